"""``fusion-ray bench precision``: the INT8 detector against FP32, speed and quality in one run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fusion_ray.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "precision", help="INT8 against FP32 detection: ms per call on 1 and 2 threads, and quality",
        description="Build (or load) the cached INT8 detector from the calibration folder of the models "
                    "directory (filled from --photos when empty), then in one run: ms per call of both "
                    "on 1 and 2 threads (calls interleaved), and recall / IoU / landmark error / extra faces "
                    "of INT8 against FP32 on the photos, augmentations of them and generated clips. "
                    "--study also compares calibration sets. Run it on a quiet machine.")
    parser.add_argument("--photos", type=Path, nargs="+", required=True, help="face photos (evaluation and calibration)")
    parser.add_argument("--models-dir", type=Path, required=True, help="models directory (the INT8 cache goes here)")
    parser.add_argument("--model", default=None, metavar="PATH", help="the SCRFD file (default: in --models-dir)")
    parser.add_argument("--runs", type=int, default=30, help="timed calls per model and thread count")
    parser.add_argument("--study", action="store_true", help="also quantise from several calibration sets")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fusion_ray.bench.machine import code_version, load_average
    from fusion_ray.bench.precision_bench import run as run_bench
    from fusion_ray.cli.detect import _print_progress
    from fusion_ray.config import DetectorConfig, ModelsConfig
    from fusion_ray.models.precision import Int8Request, calibration_sources, detector_int8
    from fusion_ray.models.registry import get_spec
    from fusion_ray.models.store import ModelStore

    overrides = {"scrfd_2.5g": Path(args.model)} if args.model else {}
    store = ModelStore(args.models_dir, overrides=overrides)
    located = store.locate("scrfd_2.5g")
    models = ModelsConfig()
    if not calibration_sources(models, store.root):  # calibrate on the bench's photos, in memory
        models = ModelsConfig(calibration=list(args.photos))
    int8 = detector_int8(located, get_spec("scrfd_2.5g"), Int8Request(models, store.root, DetectorConfig()),
                         _print_progress)
    if int8 is None:
        raise InputError("the INT8 detector could not be built (see the warning above)")
    report = {"code": code_version(), "load_before": load_average(), "fp32": str(located.path), "int8": str(int8),
              **run_bench(located.path, int8, args.photos, runs=args.runs, study=args.study),
              "load_after": load_average()}
    for row in report["speed"]:
        print(json.dumps(row))
    print(json.dumps(report["quality"]))
    for row in report["roi_quality"]:
        print(json.dumps(row))
    for row in report.get("calibration_study", []):
        print(json.dumps(row))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0
