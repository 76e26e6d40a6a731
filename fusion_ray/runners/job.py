"""Dataset jobs: many images and videos swapped in one streaming Ray Data run.

``run_job`` is four explicit parts:

- :mod:`~fusion_ray.jobs.plan` groups the items by engine options and plans the first
  ``plan_on_driver`` items before Ray is needed (probe, keyframe segments, truncation, image
  sizes; corrupt items are reported, not fatal), so that a small job of bad inputs fails at
  once; the others are planned in Ray tasks near the data (:mod:`~fusion_ray.runners.ray.stream`),
  streamed: the first segments are processed while later items are still being planned;
- :mod:`~fusion_ray.runners.ray.run` runs each group as one pipeline: it embeds each distinct
  source once, streams every item through planning, decoding, the stages and the segment
  writers, tracking every segment (:mod:`~fusion_ray.jobs.segment_status`);
- :mod:`~fusion_ray.jobs.report` folds the output batches into per-item counters and
  per-stage busy time and idle ratio, streams each settled item's row to a JSON Lines file
  and writes the JSON report;
- :mod:`~fusion_ray.jobs.finalise` joins each finished video with its audio into place in
  a Ray task, and aborts the open segments and stops the writers.

Completed outputs are skipped on re-run, and an unfinished video's finished segments are kept
in its parts folder (:mod:`~fusion_ray.jobs.parts`), so re-running a job, after a crash or
a ``kill -9`` of the driver too, redoes only the missing segments.
Failures are per item, and a failed item leaves no output (so a re-run retries it):

- an image whose frame failed in a stage is ``failed`` and is not written;
- a video frame that fails in a stage is passed through unchanged (a video cannot skip a
  frame) and counted in ``frames_failed``. If every frame of a video failed, nothing was
  swapped: the video is ``failed`` and not written. Otherwise it is ``done`` and its
  ``error`` says how many frames failed (with the first frame's message);
- an item that cannot be read or planned (corrupt, missing, a video output not named .mp4,
  .m4v or .mov, an output that is one of its inputs, a frame size the encoder refuses) is
  ``failed``;
- a truncated video (its container declares more frames than the file holds) is ``failed``,
  unless the job config allows truncated videos: then it is ``done`` with a warning, and its
  ``frames_missing`` and ``missing_from_s`` say what was lost;
- a group's model that is missing or corrupt fails the group's items at planning, before
  Ray starts;
- an error that stops a whole group of items (those with the same engine options: a model
  that cannot load, a Ray failure) fails that group's unfinished items with its message (one
  line: ``Type: message``); the other groups still run and the report is still written. A
  pipeline config that cannot fit on the cluster (ConfigError) is a whole-job error, raised
  before anything is written.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from fusion_ray.jobs.config import JobConfig, LocalConfig
from fusion_ray.jobs.group import ProgressCallback
from fusion_ray.jobs.parts import PARTS_SUFFIX
from fusion_ray.jobs.plan import (
    GroupPlan,
    JobItem,
    JobPlan,
    confine,
    plan_job,
    with_overrides,
)
from fusion_ray.jobs.report import (
    ItemKind,
    ItemResult,
    ItemStatus,
    JobReport,
    StageStats,
    typed_error,
)
from fusion_ray.storage import Storage

__all__ = ["PARTS_SUFFIX", "ItemResult", "JobItem", "JobPlan", "JobReport", "ProgressCallback", "StageStats",
           "confine", "plan_job", "run_job", "run_plan", "with_overrides"]

log = logging.getLogger(__name__)


Runner = Literal["ray", "local"]
"""Where a job's groups run: Ray Data (:mod:`fusion_ray.runners.ray.run`, a cluster or a local Ray
instance) or one process (:mod:`fusion_ray.runners.local.runner`, which never imports Ray)."""


def run_job(items: Sequence[JobItem], cfg: JobConfig, *, output_root: Path | None = None,
            force: bool = False, progress: ProgressCallback | None = None,
            report_path: Path | None = None, storage: Storage | None = None, runner: Runner = "ray") -> JobReport:
    """Run ``items`` as one streaming job with ``runner`` (ray: on the connected, or a new local,
    Ray cluster); inputs in buckets are read through ``storage``."""
    start = time.perf_counter()
    plan = plan_job(items, cfg, output_root=output_root, force=force, storage=storage)
    return run_plan(plan, progress=progress, report_path=report_path, started=start, runner=runner)


def run_plan(plan: JobPlan, *, progress: ProgressCallback | None = None, report_path: Path | None = None,
             started: float | None = None, runner: Runner = "ray") -> JobReport:
    """Run a planned job (the runner starts only when an item runs); returns and writes its report.

    Both runners share the planning, this loop (a group's failure fails its items, the others
    still run), the bookkeeping (:mod:`fusion_ray.jobs.group`) and the report."""
    start = time.perf_counter() if started is None else started
    results = [item.result() for item in plan.items]
    report = JobReport(results, started=start)
    if report_path is not None:
        report.start_rows(rows_path(report_path))
        report.settle()  # the items skipped or failed at planning
    if plan.runs:
        run_group = _group_runner(plan, runner)
        for group in plan.groups:
            try:
                run_group(plan, group, results, report, progress)
            except Exception as exc:  # this group's failure; the others still run
                error = typed_error(exc)  # each failed item carries it (the CLI prints it once)
                log.info("a group of %d item(s) failed: %s", len(group.members), error)
                log.debug("the group's traceback", exc_info=True)
                for n in group.members:
                    if results[n].status == ItemStatus.PENDING:
                        results[n].fail(error)
            report.settle(group.members)
    report.wall_s = time.perf_counter() - start
    if report_path is not None:
        report.write(report_path)
    return report


def rows_path(report_path: Path) -> Path:
    """The JSON Lines file beside a report: one row per item, appended as each item settles."""
    rows = report_path.with_suffix(".jsonl")
    return rows.with_name(f"{report_path.stem}.rows.jsonl") if rows == report_path else rows


GroupRunner = Callable[[JobPlan, GroupPlan, Sequence[ItemResult], JobReport, ProgressCallback | None], None]


def _group_runner(plan: JobPlan, runner: Runner) -> GroupRunner:
    """The function that runs one group with ``runner`` (Ray imported only for ``ray``)."""
    if runner == "local":
        from fusion_ray.runners.local.runner import run_group_local

        return run_group_local
    import ray

    from fusion_ray.runners.ray.build import cluster_gpus
    from fusion_ray.runners.ray.run import run_group

    gpus_now = cluster_gpus()  # one reading: the checks and the runs agree
    _check_fits(plan, gpus_now, float(ray.cluster_resources().get("CPU", 0.0)))
    return functools.partial(run_group, gpus_now=gpus_now)


def _check_fits(plan: JobPlan, gpus_now: float, cluster_cpus: float) -> None:
    """A pipeline that cannot fit is a whole-job error (ConfigError), raised before anything is
    written: the pools of the stages each group builds are budgeted."""
    from fusion_ray.runners.ray.build import stage_pools

    for group in plan.groups:
        cfg = group.cfg
        pools = stage_pools(cfg.engine, cfg.pipeline, gpus_available=cfg.pipeline.uses_gpus(gpus_now))
        cfg.pipeline.check_fits(cluster_cpus, pools, cluster_gpus=gpus_now)

def job_frames(plan: JobPlan) -> int:
    """The frames a job's runnable items deliver (a video's frames, one per image), for ``auto``;
    an item left to plan later (past ``plan_on_driver``) counts as the planned items' mean."""
    planned = [p.expected_frames if p.kind is ItemKind.VIDEO else 1 for p in plan.items if p.runs and p.planned]
    later = sum(1 for p in plan.items if p.runs and not p.planned)
    mean = sum(planned) / len(planned) if planned else 1.0
    return int(sum(planned) + later * mean)


def choose_runner(requested: str, plan: JobPlan, local: LocalConfig, address: str | None,
                  environ: Mapping[str, str]) -> Runner:
    """``local`` or ``ray``: what was asked, or for ``auto`` Ray when a cluster address is given
    (``--address`` or ``RAY_ADDRESS``) or the job's frames exceed ``local.auto_ray_frames``."""
    if requested in ("local", "ray"):
        return "local" if requested == "local" else "ray"
    if address or environ.get("RAY_ADDRESS"):
        return "ray"
    return "ray" if job_frames(plan) > local.auto_ray_frames else "local"
