"""One group of items run as one streaming Ray Data pipeline.

``run_group`` embeds the group's sources on the driver, then a :class:`GroupRun` starts the
segment writers and streams the group through Ray Data: planning tasks, decode tasks
(:mod:`fusion_ray.runners.ray.stream`), the stages and the encode stage. The driver registers each item as its plan comes back beside the stream
(:mod:`fusion_ray.runners.ray.plans`: a video's segments, those an earlier run finished) and folds
each slim output batch (frames only) into the report and the segment tracker: a segment whose frames have all reached
their writer is finished, and a video whose segments are all written is joined by a Ray task
(:mod:`fusion_ray.jobs.finalise`); an animated image is swapped whole by a Ray task
(:mod:`fusion_ray.jobs.animated`). Past planning (a few items, ``plan_on_driver``), the
driver holds a few counters and a compact plan per item, never a frame or a video's timestamps. Whatever happens, the open segments of unfinished videos are
aborted (their finished ones stay, for a re-run to resume) and the writers stopped.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import ray

from fusion_ray.jobs.animated import swap_animated
from fusion_ray.jobs.config import FUSED_POOL, PipelineConfig
from fusion_ray.jobs.finalise import CLEANUP_TIMEOUT_S, join_item
from fusion_ray.jobs.group import GroupBook, ProgressCallback, Sources, prepare_group
from fusion_ray.jobs.plan import GroupPlan, ItemPlan, JobPlan
from fusion_ray.jobs.report import ItemKind, ItemResult, JobReport
from fusion_ray.jobs.segment_status import SegmentKey
from fusion_ray.jobs.stages import stage_names
from fusion_ray.jobs.track_read import READ_STAGE, TrackedRead
from fusion_ray.jobs.writer import SegmentWriter, writer_for
from fusion_ray.runners.ray.build import Sink, build_pipeline
from fusion_ray.runners.ray.plans import PlanInbox, PostPlans, start_board
from fusion_ray.runners.ray.stream import (
    GroupContext,
    ItemSource,
    chunks,
    decode_units,
    one_row_blocks,
)

log = logging.getLogger(__name__)

def run_group(plan: JobPlan, group: GroupPlan, results: Sequence[ItemResult], report: JobReport,
              progress: ProgressCallback | None, gpus_now: float) -> None:
    """Embed the group's sources on the driver, then run its items (see the module docstring)."""
    prepared = prepare_group(plan, group, results, report)
    run = GroupRun(prepared.items, prepared.ctx, results, report, prepared.comment)
    run.execute(prepared.sources, progress, gpus_now)


class GroupRun(GroupBook):
    """One group's Ray run: the bookkeeping (:class:`GroupBook`), the writer actors, the segments
    finishing and the join tasks."""

    def __init__(self, items: Sequence[ItemPlan], ctx: GroupContext, results: Sequence[ItemResult],
                 report: JobReport, comment: str) -> None:
        super().__init__(items, results, report)
        self.ctx = ctx
        self.comment = comment
        self.writers: list[Any] = []
        self.finishing: dict[Any, SegmentKey] = {}
        self.joining: dict[Any, int] = {}
        self.animating: dict[Any, int] = {}
        """Tasks swapping an animated image (:mod:`fusion_ray.jobs.animated`), by item."""
        self.sources: Sources | None = None
        self.plans: PlanInbox | None = None
        """The items' plans, from the planning tasks (beside the frame stream)."""

    def execute(self, sources: Sources, progress: ProgressCallback | None, gpus_now: float) -> None:
        """Run every item; the cleanup always runs."""
        self.sources = sources
        try:
            if not self.items:
                return
            self._start_writers()
            self.plans = PlanInbox(start_board())
            self._stream(sources, progress, gpus_now)
            self._register_plans(now=True)  # items with nothing to decode (resumed, refused, animated)
            self._collect(block=True)
            self.fail_incomplete()
        finally:
            try:  # the board first: a failure of a later step cannot leak it
                if self.plans is not None:
                    self.plans.close()
            finally:
                self.report.frames += self.done_frames
                self._wait_for_joins()
                self._stop_animations()
                cleanup(self.open_segments(), self.writers)

    def _start_writers(self) -> None:
        pipeline = self.ctx.cfg.pipeline
        if not self.may_have(ItemKind.VIDEO):
            return
        known = sum(len(p.segments) for p in self.items)
        segments = pipeline.read_tasks if any(not p.planned for p in self.items) else known
        # Spread over the nodes (as Ray Data spreads its tasks), so that encoding scales out with them.
        writer_cls = ray.remote(SegmentWriter).options(num_cpus=pipeline.writer_num_cpus, scheduling_strategy="SPREAD")
        self.writers += [writer_cls.remote(pipeline.encode_options)  # type: ignore[attr-defined]
                         for _ in range(pipeline.writers_for(segments))]

    def _stream(self, sources: Sources, progress: ProgressCallback | None, gpus_now: float) -> None:
        """Items planned, decoded and through the stages; each output batch folded in as it comes back."""
        engine, pipeline = self.ctx.cfg.engine, self.ctx.cfg.pipeline
        gpus_available = pipeline.uses_gpus(gpus_now)
        fused = [FUSED_POOL] if pipeline.fused(gpus_available) else []
        # Videos are tracked in their decode tasks (one per segment), with the detector's threads.
        tracking = (TrackedRead(engine.in_ray_actor(False), sources.reference, pipeline.detect.cpu_budget)
                    if engine.tracks_faces and self.may_have(ItemKind.VIDEO) else None)
        reads = [READ_STAGE] if tracking is not None else []
        self.report.track_stages([*reads, *stage_names(engine), "encode", *fused])
        images = self.may_have(ItemKind.IMAGE)
        assert self.plans is not None
        post = PostPlans(self.plans.board)  # each planning task hands its plans to the driver here
        # A dataset copies the DataContext when it is created: set it up first.
        with _data_context(pipeline):
            ds = ray.data.read_datasource(
                ItemSource(self.items, self.ctx, pipeline.plan_chunk_items, post), num_cpus=0.05,
                compute=ray.data.TaskPoolStrategy(size=pipeline.plan_tasks),
                override_num_blocks=chunks(len(self.items), pipeline.plan_chunk_items))
            ds = one_row_blocks(ds, num_cpus=0.05)
            # The decode-ahead bound; image groups are decoded beside the video segments.
            ds = ds.map_batches(
                decode_units, batch_size=1, batch_format="numpy", num_cpus=pipeline.read_num_cpus,
                compute=ray.data.TaskPoolStrategy(size=pipeline.read_tasks + (pipeline.image_read_tasks if images else 0)),
                fn_kwargs={"block_frames": pipeline.block_frames, "block_mb": pipeline.block_mb,
                           "tracking": tracking, "storage": self.ctx.storage})
            ds = build_pipeline(ds, engine, pipeline, dict(sources.identities), reference=sources.reference,
                                gpus_available=gpus_available, sink=Sink(self.writers, images),
                                tracked=tracking is not None)
            # No prefetch: with it the iterator held the first output blocks back (the first frame
            # of a 1,000-image job came 7.7 s after the start instead of 3.5 s; BENCHMARKS.md 10).
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=0):
                self._on_batch(batch)
                if progress is not None:
                    progress(self.done_frames, max(self.total, self.done_frames), self.report)

    def _on_batch(self, batch: Mapping[str, Any]) -> None:
        # A planning task posts its plans before its units are decoded: an item not heard of yet is on the board.
        self._register_plans(now=bool({int(n) for n in batch["item"]} - self.heard))
        self.fold(batch)
        self._collect(block=False)

    def _register_plans(self, *, now: bool) -> None:
        assert self.plans is not None
        for n, info in self.plans.take(now=now):
            self.register(n, info)

    def finish_segment(self, key: SegmentKey) -> None:
        writer = self.writers[writer_for(key, len(self.writers))]
        self.finishing[writer.finish.remote(key)] = key

    def start_join(self, n: int, plan: ItemPlan, paths: list[Path]) -> None:
        ref = join_task.remote(plan, paths, self.comment, self.ctx.storage)  # type: ignore[call-arg]
        self.joining[ref] = n

    def _collect(self, *, block: bool) -> None:
        """Gather finished segments and joins (waiting for them all when ``block``)."""
        while self.finishing or self.joining or self.animating:
            pending = [*self.finishing, *self.joining, *self.animating]
            ready, _ = ray.wait(pending, num_returns=1 if block else len(pending), timeout=None if block else 0)
            if not ready:
                return
            for ref in ready:
                if ref in self.finishing:
                    key = self.finishing.pop(ref)
                    try:
                        path, _ = ray.get(ref)
                    except Exception as exc:
                        self.segment_finished(key, None, exc)
                    else:
                        self.segment_finished(key, path, None)
                elif ref in self.joining:
                    self._joined_ref(self.joining.pop(ref), ref)
                else:
                    self._animated_ref(self.animating.pop(ref), ref)

    def start_animation(self, plan: ItemPlan) -> None:
        assert self.sources is not None
        identity = self.sources.identities[self.ctx.source_of[plan.index]]
        engine = self.ctx.cfg.engine.in_ray_actor(gets_gpu=False)  # the task is given no GPU
        ref = animated_task.remote(plan, engine, identity, self.sources.reference, self.ctx.storage)  # type: ignore[call-arg]
        self.animating[ref] = plan.index

    def _animated_ref(self, n: int, ref: Any) -> None:
        try:
            done = ray.get(ref)
        except Exception as exc:
            self.animated(n, None, exc)
        else:
            self.animated(n, done, None)

    def _stop_animations(self) -> None:
        """Animated images still being swapped (the group failed): stopped, their outputs never written."""
        for ref, n in self.animating.items():
            ray.cancel(ref, force=True)
            self.animated(n, None, "stopped: the group failed before the animated image was swapped")
        self.animating.clear()

    def _joined_ref(self, n: int, ref: Any) -> None:
        try:
            ray.get(ref)
        except Exception as exc:
            self.joined(n, exc)
        else:
            self.joined(n, None)

    def _wait_for_joins(self) -> None:
        """Joins still running (the group failed): their outcome is recorded, bounded."""
        if not self.joining:
            return
        ready, _ = ray.wait(list(self.joining), num_returns=len(self.joining), timeout=CLEANUP_TIMEOUT_S)
        for ref in ready:
            self._joined_ref(self.joining.pop(ref), ref)
        for ref, n in self.joining.items():  # stopped: an output it was writing never appears
            ray.cancel(ref, force=True)
            self.joined(n, f"the join did not end within {CLEANUP_TIMEOUT_S:.0f} s of the job stopping")
        self.joining.clear()


join_task = ray.remote(num_cpus=0.1, max_retries=0)(join_item)
"""``join_item`` as a Ray task (a joined output must not be written twice by a retry)."""

animated_task = ray.remote(num_cpus=1, max_retries=0)(swap_animated)
"""``swap_animated`` as a Ray task (a whole CPU: the engine's sessions are sized to one)."""


def cleanup(open_keys: Sequence[SegmentKey], writers: Sequence[Any]) -> None:
    """Abort the open segments of unfinished videos (their finished segments stay, for a re-run
    to resume), then stop the writers.

    Each step is independent: a dead or stuck writer is logged and the cleanup goes on, so an
    exception being handled is not replaced.
    """
    if open_keys:
        for writer in writers:
            try:
                ray.get(writer.abort.remote(list(open_keys)), timeout=CLEANUP_TIMEOUT_S)
            except Exception as exc:
                log.warning("cleanup: a writer could not abort its open segments: %s: %s", type(exc).__name__, exc)
    for writer in writers:
        try:
            ray.kill(writer)
        except Exception as exc:
            log.warning("cleanup: cannot stop a segment writer: %s: %s", type(exc).__name__, exc)


@contextlib.contextmanager
def _data_context(pipeline: PipelineConfig) -> Iterator[None]:
    """Ray Data settings for this job's execution, restored afterwards (the context is per process)."""
    from ray.data import DataContext, ExecutionResources

    ctx = DataContext.get_current()
    saved = (ctx.enable_progress_bars, ctx.execution_no_progress_timeout_s,  # type: ignore[attr-defined]
             ctx.execution_options.resource_limits, ctx.target_max_block_size, ctx.wait_for_min_actors_s)
    ctx.enable_progress_bars = pipeline.progress_bars
    # Start dispatching once every pool has its min_actors: otherwise the first actor up takes
    # the blocks of a short clip (two tasks in flight per actor) and, the input consumed, Ray
    # Data cancels the actors still starting, so one actor does all the work.
    ctx.wait_for_min_actors_s = pipeline.actor_start_timeout_s
    # Ray Data merges blocks up to this size: keep read blocks small so frames stream through
    # the stages (and reach the writers) a few at a time instead of a segment at a time.
    ctx.target_max_block_size = int(pipeline.block_mb * 2**20)
    if pipeline.no_progress_timeout_s is not None:
        ctx.execution_no_progress_timeout_s = pipeline.no_progress_timeout_s  # type: ignore[attr-defined]
    if pipeline.object_store_mb is not None:
        ctx.execution_options.resource_limits = ExecutionResources.for_limits(
            object_store_memory=pipeline.object_store_mb * 2**20)
    try:
        yield
    finally:
        (ctx.enable_progress_bars, ctx.execution_no_progress_timeout_s,  # type: ignore[attr-defined]
         ctx.execution_options.resource_limits, ctx.target_max_block_size, ctx.wait_for_min_actors_s) = saved
