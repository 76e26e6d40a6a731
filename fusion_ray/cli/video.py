"""Shared parts of the video swap and ``job``: the runner options, progress lines, the summary."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fusion_ray.config import EngineConfig
from fusion_ray.errors import FusionRayError, InputError
from fusion_ray.jobs.config import FUSED_POOL
from fusion_ray.jobs.report import bounding_line, line_shares

if TYPE_CHECKING:
    from fusion_ray.runners.job import Runner


class ProgressPrinter:
    """Prints frames done, frames/s and ETA to stderr at most twice a second."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int, report: object) -> None:
        now = time.monotonic()
        if now - self.last < 0.5 and done < total:
            return
        self.last = now
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else float("nan")
        print(f"\rframes {done}/{total}  {rate:5.1f} frames/s  ETA {eta:5.0f} s ", end="", file=sys.stderr)
        if done >= total:
            print(file=sys.stderr)


def print_summary(report, wall_s: float, report_path: Path | None, *,  # type: ignore[no-untyped-def]
                  list_failures: bool = True) -> None:
    """The end-of-job summary: items, frames/s, per-stage time and idle ratio, and each failed
    item's error (unless ``list_failures`` is off: a one-item command raises it instead)."""
    counts = report.counts()
    print(f"items: {', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}", file=sys.stderr)
    print(f"frames: {report.frames} in {wall_s:.1f} s (start-up included): {report.frames / wall_s:.1f} frames/s",
          file=sys.stderr)
    print(f"{'stage':15} {'busy s':>8} {'idle s':>8} {'idle %':>7}", file=sys.stderr)
    for name, stats in report.stages.items():
        print(f"{name:15} {stats.busy_s:8.2f} {stats.idle_s:8.2f} {100 * stats.idle_ratio:6.1f}%", file=sys.stderr)
    if report.steps:  # each step of the chain, wherever it ran
        print("steps (busy s): " + ", ".join(f"{name} {busy:.2f}" for name, busy in report.steps.items()),
              file=sys.stderr)
    tracked = [item for item in report.items if item.det_full]
    if tracked:
        print(f"tracking ({len(tracked)} video(s)): {sum(i.det_full for i in tracked)} full-frame detections, "
              f"{sum(i.det_roi for i in tracked)} ROI detections, {sum(i.faces_interpolated for i in tracked)} "
              f"interpolated faces, {sum(i.tracks for i in tracked)} tracks", file=sys.stderr)
    if "compute" in report.stages:
        print("(local runner: the steps run inside the compute threads and never wait; the threads do)",
              file=sys.stderr)
        lines = line_shares(report.stages)
        if lines:
            shares = ", ".join(f"{name} {100 * line['busy_share']:.0f}%" for name, line in lines.items())
            print(f"lines busy: {shares}; {bounding_line(lines)} bounds the job", file=sys.stderr)
    if FUSED_POOL in report.stages:
        print(f"({FUSED_POOL}: no GPU, so one CPU actor pool runs every stage; its stages never wait, the pool does)",
              file=sys.stderr)
    for item in report.items:
        if item.status == "failed":
            if list_failures:
                print(f"FAILED {item.target} -> {item.output}: {item.error}", file=sys.stderr)  # one target, many rows
        elif item.frames_failed:
            print(f"note: {item.target}: {item.error or f'{item.frames_failed} frame(s) failed'}", file=sys.stderr)
        if item.status != "failed":
            for warning in item.warnings:
                print(f"warning: {warning}", file=sys.stderr)
    if report.stand_in_models:
        print(f"note: made with STAND-IN models ({', '.join(report.stand_in_models)}): not real swaps",
              file=sys.stderr)
    if report_path is not None:
        print(f"report: {report_path}", file=sys.stderr)


def add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("runner (videos and jobs)")
    group.add_argument("--runner", choices=("auto", "local", "ray"), default="auto",  # fusion_ray.runners
                       help="local: this process, threads and bounded queues, no Ray; ray: a Ray Data job "
                            "(a local Ray instance, or --address); auto (default): ray when a cluster address "
                            "is given (--address or RAY_ADDRESS) or the job has more frames than the local "
                            "section's auto_ray_frames, else local")
    group.add_argument("--address", help="Ray cluster to join, e.g. auto or ray://head:10001 (default: local Ray)")
    group.add_argument("--pipeline-config", type=Path, help="pipeline YAML (default: configs/pipeline.yaml defaults)")
    group.add_argument("--report", type=Path, help="write the job report (JSON) here")
    group.add_argument("--no-progress-bars", action="store_true", help="hide Ray Data's progress bars")
    group.add_argument("--allow-truncated", action="store_true",
                       help="process a truncated video (its container declares more frames than the file "
                            "holds) as far as it goes, with a warning; by default such a video fails")


def job_config(args: argparse.Namespace, engine: EngineConfig):  # type: ignore[no-untyped-def]
    """The pipeline YAML (if any) with the command line's engine settings."""
    from fusion_ray.jobs.config import JobConfig, load_job_config

    base = load_job_config(args.pipeline_config)
    pipeline = base.pipeline
    if args.no_progress_bars:
        pipeline = pipeline.model_copy(update={"progress_bars": False})
    return JobConfig(engine=engine, pipeline=pipeline, local=base.local,
                     allow_truncated=base.allow_truncated or args.allow_truncated)


def start_runner(args: argparse.Namespace, plan) -> Runner:  # type: ignore[no-untyped-def]
    """The runner for a planned job (``--runner``, see :func:`fusion_ray.runners.choose_runner`),
    started: Ray connected, or for the local runner SIGTERM turned into a clean stop (as Ctrl-C)."""
    from fusion_ray.runners.job import choose_runner

    runner = choose_runner(args.runner, plan, plan.groups[0].cfg.local, args.address, os.environ)
    if runner == "ray":
        from fusion_ray.cli.common import connect_ray

        connect_ray(args.address)
    else:
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    print(f"runner: {runner}", file=sys.stderr)
    return runner


def _stop_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM stops a local run as Ctrl-C does: its threads end, open segments are aborted."""
    raise KeyboardInterrupt


def run_video_swap(args: argparse.Namespace, engine: EngineConfig) -> int:
    """``fusion-ray swap --target VIDEO``: a one-item job, planned before any runner starts:
    a video that cannot be read or encoded, is truncated, or whose models are missing or
    corrupt fails at once with its planning error (the swap command checked the output)."""
    from fusion_ray.runners.job import JobItem, plan_job, run_plan

    started = time.monotonic()
    cfg = job_config(args, engine)
    plan = plan_job([JobItem(tuple(args.source), args.target, args.output)], cfg, force=args.force)
    planned = plan.items[0]
    if not planned.runs:
        raise planned.cause or InputError(planned.error or f"{args.target}: {planned.status}")
    runner = start_runner(args, plan)
    report = run_plan(plan, progress=ProgressPrinter(), report_path=args.report, runner=runner)
    print_summary(report, time.monotonic() - started, args.report, list_failures=False)
    item = report.items[0]
    if item.status != "done":
        raise FusionRayError(f"{args.target}: {item.error or item.status}")  # its error, printed once
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
