"""``fusion-ray models``: list, download, verify, quantize, make-dynamic, make-standins."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fusion_ray.errors import FusionRayError, InputError, ModelError
from fusion_ray.models.hashes import write_hash_record
from fusion_ray.models.registry import all_specs, get_spec
from fusion_ray.models.store import ModelStore, resolve_models_dir


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("models", help="manage model files", description="List, download and verify models.")
    parser.add_argument("--models-dir", type=Path, help="model directory (default: $FUSION_RAY_MODELS or the user cache)")
    msub = parser.add_subparsers(dest="models_command", required=True, metavar="ACTION")

    p = msub.add_parser("list", help="every registered model: kind, standard set or optional, present, missing "
                        "or stand-in, integrity, size, licence")
    p.set_defaults(run=run_list)

    p = msub.add_parser("download", help="download (resumable) and verify models")
    p.add_argument("names", nargs="*", help="model names (default: all)")
    p.add_argument("--accept-licences", action="store_true",
                   help="accept the models' licences without asking (needed when not on a terminal)")
    p.add_argument("--force", action="store_true", help="download again even if present and verified")
    p.set_defaults(run=run_download)

    p = msub.add_parser("verify", help="re-hash model files and check them")
    p.add_argument("names", nargs="*", help="model names (default: all present)")
    p.set_defaults(run=run_verify)

    p = msub.add_parser("quantize", help="build (or check) the cached INT8 detector from calibration photos")
    p.add_argument("names", nargs="*", help="model names (default: the detectors)")
    p.add_argument("--calibration", type=Path, action="append", default=[], metavar="PATH",
                   help="photos or videos (files or folders) to calibrate on, read in memory and kept nowhere "
                        "(repeatable; none: the photos in <models dir>/calibration)")
    p.add_argument("--model", action="append", default=[], metavar="NAME=PATH", help="use this file for model NAME")
    p.set_defaults(run=run_quantize)

    p = msub.add_parser("make-dynamic", help="rewrite a model's fixed batch dimension and prove outputs unchanged")
    p.add_argument("src", type=Path)
    p.add_argument("dst", type=Path)
    p.add_argument("--check-batch", type=int, default=4)
    p.set_defaults(run=run_make_dynamic)

    p = msub.add_parser("make-standins", help="generate labelled STAND-IN models (not real weights) for tests")
    p.add_argument("directory", type=Path)
    p.add_argument("--variant", choices=["light", "cost_faithful"], default="light")
    p.add_argument("--quality", action="store_true",
                   help="also the optional models (landmarkers, occluders, parsers, swappers, enhancers; light only)")
    p.set_defaults(run=run_make_standins)


def _store(args: argparse.Namespace) -> ModelStore:
    return ModelStore(resolve_models_dir(args.models_dir))


def run_list(args: argparse.Namespace) -> int:
    store = _store(args)
    print(f"models directory: {store.root}")
    print(f"{'name':28} {'kind':10} {'set':8} {'status':8} {'check':14} {'size':>8}  licence")
    for row in store.status_rows():
        size = f"{row['size'] / 1e6:.0f} MB" if row["size"] else f"~{row['approx_size_mb']:.0f} MB"
        size = "?" if size == "~0 MB" else size
        check = row["status"] if row["present"] else "-"
        print(f"{row['name']:28} {row['kind']:10} {'standard' if row['standard'] else 'optional':8} "
              f"{presence(row):8} {check:14} {size:>8}  {row['licence']}")
    return 0


def presence(row: Mapping[str, Any]) -> str:
    """A ``models list`` row's status: ``present``, ``missing`` or ``stand-in`` (a labelled
    fusion_ray stand-in, not the real model)."""
    if not row["present"]:
        return "missing"
    return "stand-in" if row["stand_in"] else "present"


class _Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last = 0.0

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self.last < 0.2 and (total is None or done < total):
            return
        self.last = now
        if total:
            width = 30
            filled = int(width * done / total)
            bar = "#" * filled + "-" * (width - filled)
            print(f"\r{self.name}: [{bar}] {done / 1e6:7.1f}/{total / 1e6:.1f} MB", end="", file=sys.stderr)
        else:
            print(f"\r{self.name}: {done / 1e6:7.1f} MB", end="", file=sys.stderr)
        if total is not None and done >= total:
            print(file=sys.stderr)


def run_download(args: argparse.Namespace) -> int:
    store = _store(args)
    specs = [get_spec(n) for n in args.names] if args.names else list(all_specs())
    print("Licences of the models to download:", file=sys.stderr)
    for spec in specs:
        print(f"  {spec.name}: {spec.licence} ({spec.licence_url})", file=sys.stderr)
    if not args.accept_licences:
        if not sys.stdin.isatty():
            raise InputError("pass --accept-licences to accept the licences above (not on a terminal)")
        answer = input("Accept these licences and download? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing downloaded", file=sys.stderr)
            return 1
    def download(name: str) -> str:
        located = store.download(name, progress=_Progress(name), force=args.force)
        return f"{located.status} at {located.path}"

    return _each([spec.name for spec in specs], download)


def run_verify(args: argparse.Namespace) -> int:
    store = _store(args)
    names = args.names or [r["name"] for r in store.status_rows() if r["present"] and not r["packaged"]]
    if not names:
        print(f"no model files in {store.root}", file=sys.stderr)
        return ModelError.exit_code
    def verify(name: str) -> str:
        located = store.verify(name)
        return f"{located.status} ({located.path})"

    return _each(names, verify)


def _each(names: list[str], act: Callable[[str], str]) -> int:
    """``act`` on each model, a line each (``name: what act says``, or ``name: FAILED: why`` on
    stderr); the exit code (a model error when any failed)."""
    failed = 0
    for name in names:
        try:
            print(f"{name}: {act(name)}")
        except FusionRayError as exc:
            failed += 1
            print(f"{name}: FAILED: {exc}", file=sys.stderr)
    return 0 if failed == 0 else ModelError.exit_code


def run_quantize(args: argparse.Namespace) -> int:
    from fusion_ray.cli.common import parse_model_paths
    from fusion_ray.cli.detect import _print_progress
    from fusion_ray.config import DetectorConfig, ModelsConfig
    from fusion_ray.models.calibration import calibration_images
    from fusion_ray.models.precision import Int8Request, detector_int8

    store = ModelStore(resolve_models_dir(args.models_dir), overrides=parse_model_paths(args.model))
    specs = [get_spec(n) for n in args.names] if args.names else [s for s in all_specs() if s.kind == "detector"]
    wrong = [s.name for s in specs if s.kind != "detector"]
    if wrong:
        raise InputError(f"INT8 quantisation is for the detector only, got {', '.join(wrong)}")
    inputs = [p for item in args.calibration for p in (calibration_images(item) if item.is_dir() else [item])]
    missing = [str(p) for p in inputs if not p.is_file()]
    if missing:
        raise InputError(f"calibration input not found: {', '.join(missing)}")
    # Calibrated in memory on the inputs given (else the models directory's calibration folder):
    # only the model and a hash of the frames are kept.
    request = Int8Request(ModelsConfig(calibration=inputs), store.root, DetectorConfig())
    failed = 0
    for spec in specs:
        built = detector_int8(store.locate(spec.name), spec, request, _print_progress)
        if built is None:
            failed += 1
            print(f"{spec.name}: no INT8 model (see the warning above); it runs at FP32", file=sys.stderr)
        else:
            print(f"{spec.name}: INT8 at {built}")
    return 0 if failed == 0 else ModelError.exit_code


def run_make_dynamic(args: argparse.Namespace) -> int:
    from fusion_ray.models.dynamic import make_batch_dynamic

    report = make_batch_dynamic(args.src, args.dst, check_batch=args.check_batch)
    if report.already_dynamic:
        print(f"{args.src} already has a dynamic batch dimension; nothing written")
        return 0
    print(f"wrote {report.dst}: batch {report.check_batch} output equals {report.check_batch} batch-1 runs "
          f"(max abs diff {report.max_abs_diff:.2e})")
    return 0


def run_make_standins(args: argparse.Namespace) -> int:
    from fusion_ray.models.standins import build_all_standins

    args.directory.mkdir(parents=True, exist_ok=True)
    written = {name: (path, args.variant) for name, path in build_all_standins(args.directory,
                                                                                variant=args.variant).items()}
    if args.quality:
        from fusion_ray.models.standins_quality import build_quality_standins

        written.update({name: (path, "light") for name, path in build_quality_standins(args.directory).items()})
    for name, (path, variant) in written.items():
        write_hash_record(path, "generated")
        print(f"{name}: STAND-IN ({variant}) written to {path}: not the real model")
    return 0
