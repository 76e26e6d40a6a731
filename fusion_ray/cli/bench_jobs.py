"""``fusion-ray bench images``: a dataset job over many images against insightface's own loop."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from fusion_ray.cli.common import add_engine_arguments, connect_ray, engine_config_from_args
from fusion_ray.cli.video import add_pipeline_arguments, job_config


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "images", help="many images: the dataset job against insightface's own loop",
        description="Generate N images from face photos, then in one run: insightface's loop over the files "
                    "(one image at a time; needs a Python with insightface, --insightface-python) and the "
                    "dataset job over the same files and model files (Ray started first, its start-up "
                    "reported apart). Prints one JSON line per count.")
    parser.add_argument("--counts", default="50,1000", help="image counts, comma-separated (default 50,1000)")
    parser.add_argument("--photos", type=Path, nargs="+", required=True, help="face photos the images are made from")
    parser.add_argument("--source", "-s", type=Path, required=True, help="source face image")
    parser.add_argument("--insightface-python", help="a Python with insightface (default: skip that loop)")
    parser.add_argument("--work-dir", type=Path, help="keep images and outputs here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    add_engine_arguments(parser)
    add_pipeline_arguments(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from fusion_ray.bench.images import image_job, insightface_loop, make_image_set

    cfg = job_config(args, engine_config_from_args(args))
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="fusion_ray_bench_images_"))
    started = time.perf_counter()
    connect_ray(args.address)
    ray_start_s = time.perf_counter() - started
    rows = []
    try:
        for count in (int(c) for c in args.counts.split(",")):
            files = make_image_set(work / f"in_{count}", count, args.photos)
            row: dict[str, object] = {"images": count, "ray_start_s": round(ray_start_s, 2)}
            if args.insightface_python:
                loop = insightface_loop(args.insightface_python, cfg.engine, args.source, work / f"loop_{count}",
                                        files, work)
                row.update(loop_s=round(loop["wall_s"], 2), loop_faces=loop["faces"])
            report = image_job(cfg, args.source, work / f"job_{count}", files)
            row.update(job_s=round(report.wall_s, 2), job_done=report.counts().get("done", 0),
                       job_faces=sum(i.faces_swapped for i in report.items),
                       idle={name: round(s.idle_ratio, 3) for name, s in report.stages.items()},
                       busy_s={name: round(s.busy_s, 2) for name, s in report.stages.items()},
                       stand_ins=report.stand_in_models)
            if "loop_s" in row:
                row["speedup"] = round(float(row["loop_s"]) / report.wall_s, 2)  # type: ignore[arg-type]
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0
