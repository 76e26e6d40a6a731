"""``fusion-ray bench scale | resume | storage | videos``: dataset jobs at scale.

Each starts a local Ray (or joins ``--address``) and runs ``fusion-ray job`` processes on it
(:mod:`fusion_ray.bench.jobs`); each prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

ENGINE_DEFAULT = "--swapper classic --no-tracking --providers cpu"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    scale = _parser(sub, "scale", "time to the first output frame, driver peak RSS and wall time against "
                    "item count (generated images), items planned in Ray tasks (streamed) and all on the driver")
    scale.add_argument("--counts", default="1,100,1000")
    scale.add_argument("--photos", type=Path, nargs="+", required=True)
    scale.set_defaults(run=run_scale)
    resume = _parser(sub, "resume", "kill -9 a job's driver at --kill-at of a --frames video, re-run it, "
                     "and compare with an uninterrupted run")
    resume.add_argument("--frames", type=int, default=3000)
    resume.add_argument("--kill-at", type=float, default=0.7)
    resume.add_argument("--segment-seconds", type=float, default=2.0)
    resume.set_defaults(run=run_resume)
    storage = _parser(sub, "storage", "the same clips job on local files and through an S3 API "
                      "(--bucket, with the standard AWS environment)")
    storage.add_argument("--clips", type=int, default=6)
    storage.add_argument("--frames", type=int, default=100)
    storage.add_argument("--bucket", required=True, help="a prefix to work under, e.g. s3://bench/run1")
    storage.set_defaults(run=run_storage)
    videos = _parser(sub, "videos", "one job over N clips against N `fusion-ray swap` commands "
                     "(each job or command starts its own local Ray)")
    videos.add_argument("--clips", type=int, default=6)
    videos.add_argument("--frames", type=int, default=100)
    videos.set_defaults(run=run_videos)


def _parser(sub: argparse._SubParsersAction, name: str, text: str) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    parser: argparse.ArgumentParser = sub.add_parser(name, help=text, description=text + ".")
    parser.add_argument("--source", "-s", type=Path, required=True, help="source face image (also the clips' face)")
    parser.add_argument("--engine-args", default=ENGINE_DEFAULT,
                        help=f"engine options for every job, e.g. models (default: {ENGINE_DEFAULT!r})")
    parser.add_argument("--address", help="Ray cluster to join (default: start a local one)")
    parser.add_argument("--work-dir", type=Path, help="keep media and outputs here (default: a temporary folder)")
    return parser


class _Bench:
    """A work folder and a Ray cluster the job processes join."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = args.work_dir or Path(tempfile.mkdtemp(prefix="fusion_ray_bench_"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.engine = shlex.split(args.engine_args)
        self.address = args.address

    def __enter__(self) -> _Bench:
        if self.address is None:
            import ray

            from fusion_ray.cli.common import connect_ray

            connect_ray(None)
            self.address = ray.get_runtime_context().gcs_address
        return self

    def __exit__(self, *exc: object) -> None:
        if self.args.work_dir is None:
            shutil.rmtree(self.work, ignore_errors=True)

    def job(self, name: str, sources: str, targets: str, root: str, *, env: dict[str, str] | None = None,
            kill_when: Any = None, **pipeline: Any) -> Any:
        from fusion_ray.bench.jobs import job_args, pipeline_yaml, run_command

        settings = {"progress_bars": False, **pipeline}
        if "://" not in root:
            Path(root).mkdir(parents=True, exist_ok=True)
        yaml = pipeline_yaml(self.work / f"{name}.pipeline.yaml", **settings)
        report = self.work / f"{name}.report.json"
        report.unlink(missing_ok=True)
        args = job_args(sources=sources, targets=targets, root=root, address=str(self.address), pipeline=yaml,
                        report=report, engine=self.engine)
        return run_command(args, report, env=env, kill_when=kill_when)


def _emit(row: dict[str, Any]) -> None:
    print(json.dumps(row), flush=True)


def _checked(run: Any, what: str) -> Any:
    if run.code != 0:
        raise SystemExit(f"{what} failed ({run.code}): {run.stderr.strip().splitlines()[-3:]}")
    return run


def run_scale(args: argparse.Namespace) -> int:
    from fusion_ray.bench.images import make_image_set

    with _Bench(args) as bench:
        warm = bench.work / "warm"
        make_image_set(warm, 1, args.photos)  # the cluster's first workers start here, not in a measured run
        _checked(bench.job("warm", str(args.source), str(warm / "*.jpg"), str(bench.work / "out_warm")), "warm-up")
        for count in (int(c) for c in args.counts.split(",")):
            folder = bench.work / f"images_{count}"
            make_image_set(folder, count, args.photos)
            for mode, on_driver in (("streamed", 8), ("driver", None)):
                run = _checked(bench.job(f"scale_{count}_{mode}", str(args.source), str(folder / "*.jpg"),
                                         str(bench.work / f"out_{count}_{mode}"), plan_on_driver=on_driver),
                               f"the {count}-item job")
                driver = run.report["driver"]
                _emit({"items": count, "planning": mode, "first_frame_s": driver["first_frame_s"],
                       "driver_peak_rss_mb": driver["peak_rss_mb"], "job_wall_s": run.report["wall_s"],
                       "process_wall_s": round(run.wall_s, 2), "done": run.report["counts"].get("done", 0)})
    return 0


def run_resume(args: argparse.Namespace) -> int:
    from fusion_ray.bench.jobs import make_clips
    from fusion_ray.jobs.parts import PARTS_SUFFIX
    from fusion_ray.video import decode_all

    with _Bench(args) as bench:
        (clip,) = make_clips(bench.work / "in", 1, args.source, frames=args.frames)
        settings = {"segment_seconds": args.segment_seconds}
        segments = -(-args.frames // int(25 * args.segment_seconds))
        ref = _checked(bench.job("reference", str(args.source), str(clip), str(bench.work / "ref"), **settings),
                       "the uninterrupted job")
        out = bench.work / "resumed"
        parts = out / f"{clip.name}{PARTS_SUFFIX}"
        killed = bench.job("killed", str(args.source), str(clip), str(out), **settings,
                           kill_when=lambda: len(list(parts.glob("*/segment_*.mp4"))) >= args.kill_at * segments)
        written = len(list(parts.glob("*/segment_*.mp4")))
        again = _checked(bench.job("rerun", str(args.source), str(clip), str(out), **settings), "the re-run")
        item = again.report["items"][0]
        same = all(a.index == b.index and (a.frame == b.frame).all()
                   for a, b in zip(decode_all(bench.work / "ref" / clip.name), decode_all(out / clip.name), strict=True))
        first = killed.last_progress
        _emit({"frames": args.frames, "segments": segments, "killed_with_segments_written": written,
               "killed_run_frames_at_last_progress": first, "rerun_frames_processed": again.report["frames"],
               "rerun_frames_resumed": item["frames_resumed"],
               "processed_over_both_runs": round((first + again.report["frames"]) / args.frames, 3),
               "reference_wall_s": round(ref.wall_s, 1), "killed_wall_s": round(killed.wall_s, 1),
               "rerun_wall_s": round(again.wall_s, 1), "output_equals_uninterrupted": same})
    return 0


def run_storage(args: argparse.Namespace) -> int:
    from fusion_ray.bench.jobs import make_clips
    from fusion_ray.storage import Location, Storage, StorageConfig

    storage = Storage(StorageConfig.from_env(os.environ))
    prefix = Location.parse(args.bucket)
    with _Bench(args) as bench:
        clips = make_clips(bench.work / "in", args.clips, args.source, frames=args.frames)
        for path in [*clips, args.source]:
            storage.publish(path, prefix / "in" / path.name)
        local = _checked(bench.job("local", str(args.source), str(bench.work / "in" / "*.mp4"),
                                   str(bench.work / "out")), "the local job")
        remote = _checked(bench.job("s3", str(prefix / "in" / args.source.name), str(prefix / "in" / "*.mp4"),
                                    str(prefix / "out")), "the S3 job")
        _emit({"clips": args.clips, "frames_each": args.frames, "local_job_wall_s": local.report["wall_s"],
               "s3_job_wall_s": remote.report["wall_s"],
               "ratio": round(remote.report["wall_s"] / local.report["wall_s"], 3),
               "done": [local.report["counts"], remote.report["counts"]]})
    return 0


def run_videos(args: argparse.Namespace) -> int:
    from fusion_ray.bench.jobs import make_clips, pipeline_yaml, run_command

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="fusion_ray_bench_"))
    try:
        clips = make_clips(work / "in", args.clips, args.source, frames=args.frames)
        engine = shlex.split(args.engine_args)
        yaml = pipeline_yaml(work / "p.yaml", progress_bars=False)
        for folder in (work / "job", work / "swap"):
            folder.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        job = run_command(["job", "--source-pattern", str(args.source), "--target-pattern", str(work / "in" / "*.mp4"),
                           "--output-pattern", "{target_name}.mp4", "--output-root", str(work / "job"),
                           "--pipeline-config", str(yaml), "--force", *engine], work / "job" / "fusion_ray_report.json")
        job_s = time.perf_counter() - start
        _checked(job, "the job")
        swaps = []
        for clip in clips:
            run = run_command(["swap", "-s", str(args.source), "-t", str(clip), "-o", str(work / "swap" / clip.name),
                               "--pipeline-config", str(yaml), "--force", *engine])
            _checked(run, f"swap {clip.name}")
            swaps.append(round(run.wall_s, 2))
        _emit({"clips": args.clips, "frames_each": args.frames, "job_wall_s": round(job_s, 2), "job_code": job.code,
               "swap_walls_s": swaps, "swaps_total_s": round(sum(swaps), 2),
               "job_speedup": round(sum(swaps) / job_s, 2)})
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0
