"""``fusion-ray bench runners``: the local runner against the Ray runner on the same jobs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "runners", help="the local runner against the Ray runner, side by side",
        description="Generate multi-face 640x360 clips with audio (a group photo sweeping over a background) "
                    "and photo sets, then run each as `fusion-ray job --runner local` and `--runner ray` "
                    "(a local Ray started by the job, as a user runs it): wall time, first output frame, "
                    "steady frames/s. The classic swapper and the given SCRFD detector; tracking on.")
    parser.add_argument("--photos", type=Path, nargs="+", required=True,
                        help="face photos: the first is the source, the photo sets are made from all")
    parser.add_argument("--group-photo", type=Path, required=True, help="a photo with several faces (the clips)")
    parser.add_argument("--scrfd", type=Path, required=True, help="the SCRFD 2.5g detector (.onnx)")
    parser.add_argument("--clip-frames", type=int, default=275)
    parser.add_argument("--clips", default="1", help="clip counts, comma-separated (default 1)")
    parser.add_argument("--images", default="50", help="photo-set sizes, comma-separated (default 50)")
    parser.add_argument("--runners", default="local,ray", help="comma-separated: local, ray, insightface "
                        "(insightface's own loop; needs --insightface-python and --models-dir)")
    parser.add_argument("--insightface-python", help="a Python with insightface (the insightface runner)")
    parser.add_argument("--models-dir", type=Path, help="swap with the inswapper of this folder (and its embedder) "
                        "on every runner instead of the classic swapper")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=OPTIONS",
                        help="run every workload once per setting: a name and extra `fusion-ray job` options, "
                             "e.g. 'masks=--face-mask-types box occlusion region' (repeatable; default: none)")
    parser.add_argument("--footage", action="store_true",
                        help="footage-like workloads: the clips are three faces that turn, cross and are covered, "
                             "with audio that starts early (the first three --photos), the photo sets PNG and JPEG "
                             "photos of 0.5 to 2 megapixels with 1 to 3 faces")
    parser.add_argument("--check-every", type=int, default=0, metavar="N",
                        help="count the faces each run left unswapped: the detector on every N-th input frame "
                             "(a photo is one frame) against the output (default 0: not checked)")
    parser.add_argument("--work-dir", type=Path, help="keep the media and outputs here")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.set_defaults(run=run)


def _counts(text: str) -> list[int]:
    return [int(c) for c in text.split(",") if c.strip()]


def run(args: argparse.Namespace) -> int:
    from fusion_ray.bench.runners import bench_runners, parse_setting, render_markdown

    results = bench_runners(photos=args.photos, group_photo=args.group_photo, scrfd=args.scrfd,
                            clip_frames=args.clip_frames, clip_counts=_counts(args.clips),
                            image_counts=_counts(args.images), runners=args.runners.split(","),
                            work_dir=args.work_dir, models_dir=args.models_dir,
                            insightface_python=args.insightface_python,
                            settings=[parse_setting(s) for s in args.setting] or [("", [])],
                            footage=args.footage, check_every=args.check_every)
    print(render_markdown(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if all(r["status"] == "ok" for r in results) else 1

