"""One group of items run as one streaming Ray Data pipeline.

``run_group`` embeds the group's sources on the driver, then a :class:`GroupRun` starts the
segment writers and streams the group through Ray Data: planning tasks, decode tasks
(:mod:`fusion_ray.pipeline.stream`), the stages and the encode stage. The driver folds each
slim output batch into the report and the segment tracker: an item's info row registers it
(a video's segments, those an earlier run finished), a segment whose frames have all reached
their writer is finished, and a video whose segments are all written is joined by a Ray task
(:mod:`fusion_ray.pipeline.finalise`). Past planning (a few items, ``plan_on_driver``), the
driver holds a few counters and a compact plan per item, never a frame or a video's timestamps. Whatever happens, the open segments of unfinished videos are
aborted (their finished ones stay, for a re-run to resume) and the writers stopped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from fusion_ray.image import load_reference
from fusion_ray.pipeline.animated import animated_task
from fusion_ray.pipeline.build import Sink, build_pipeline
from fusion_ray.pipeline.config import FUSED_POOL, PipelineConfig
from fusion_ray.pipeline.datasource import INFO_ROW, unpack
from fusion_ray.pipeline.finalise import (
    CLEANUP_TIMEOUT_S,
    check_video,
    cleanup,
    done_message,
    join_task,
)
from fusion_ray.pipeline.plan import GroupPlan, ItemPlan, JobPlan
from fusion_ray.pipeline.report import ItemKind, ItemResult, ItemStatus, JobReport
from fusion_ray.pipeline.sources import driver_provenance, load_driver_engine, prepare_identities
from fusion_ray.pipeline.stages import stage_names
from fusion_ray.pipeline.stream import (
    GroupContext,
    ItemInfo,
    ItemSource,
    chunks,
    decode_units,
    one_row_blocks,
)
from fusion_ray.pipeline.track_read import TrackedRead
from fusion_ray.pipeline.tracker import SegmentKey, SegmentTracker
from fusion_ray.pipeline.writer import SegmentWriter, writer_for
from fusion_ray.storage import Storage
from fusion_ray.types import Embedding, SourceIdentity

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int, JobReport], None]
"""progress(frames_done, frames_total_known_so_far, report_so_far)."""


@dataclass(frozen=True)
class Sources:
    """What the driver prepared for the stages: identities by source id, and the reference
    face's embedding (``--select reference``); each item's source id is in the GroupContext."""

    identities: Mapping[str, SourceIdentity]
    reference: Embedding | None


def run_group(plan: JobPlan, group: GroupPlan, results: Sequence[ItemResult], report: JobReport,
              progress: ProgressCallback | None, gpus_now: float) -> None:
    """Embed the group's sources on the driver, then run its items (see the module docstring)."""
    driver = load_driver_engine(group.cfg.engine)
    members = [plan.items[n] for n in group.members]
    storage = Storage(plan.storage)
    identities, source_of = prepare_identities({p.index: p.item.sources for p in members}, driver, results,
                                               storage)
    report.settle(group.members)  # items whose sources failed
    sources = Sources(identities, load_reference(driver))
    provenance = driver_provenance(group.models, driver)
    report.add_stand_ins(provenance.report_field())
    ctx = GroupContext(group.cfg, group.models_fingerprint, source_of, provenance.metadata(), plan.storage, plan.output_root,
                       plan.force)
    # The planning tasks get compact plans: a video's timestamps are found again where needed.
    items = [dataclasses.replace(p, frame_times=None) for p in members if p.index in source_of]
    run = GroupRun(items, ctx, results, report, provenance.comment())
    run.execute(sources, progress, gpus_now)


class GroupRun:
    """The state of one group's run: its items, writers, segment tracker, finishing segments and joins."""

    def __init__(self, items: Sequence[ItemPlan], ctx: GroupContext, results: Sequence[ItemResult],
                 report: JobReport, comment: str) -> None:
        self.items = list(items)
        self.ctx = ctx
        self.results = results
        self.report = report
        self.comment = comment
        self.tracker = SegmentTracker()
        self.videos: dict[int, ItemPlan] = {}
        """Registered videos that run (compact plans), until they are joined or failed."""
        self.heard: set[int] = set()
        self.writers: list[Any] = []
        self.finishing: dict[Any, SegmentKey] = {}
        self.joining: dict[Any, int] = {}
        self.animating: dict[Any, int] = {}
        """Tasks swapping an animated image (:mod:`fusion_ray.pipeline.animated`), by item."""
        self.sources: Sources | None = None
        self.done_frames = 0
        self.total = 0

    def execute(self, sources: Sources, progress: ProgressCallback | None, gpus_now: float) -> None:
        """Run every item; the cleanup always runs."""
        self.sources = sources
        try:
            if not self.items:
                return
            self._start_writers()
            self._stream(sources, progress, gpus_now)
            self._collect(block=True)
            self._fail_incomplete()
        finally:
            self.report.frames += self.done_frames
            self._wait_for_joins()
            self._stop_animations()
            unfinished = {n for n in self.videos if self.results[n].status != ItemStatus.DONE}
            cleanup(self.tracker.unfinished(unfinished | (self._members() - self.heard)), self.writers)

    def _members(self) -> set[int]:
        return {p.index for p in self.items}

    def _may_have(self, kind: ItemKind) -> bool:
        return any(not p.planned or p.kind is kind for p in self.items)

    def _start_writers(self) -> None:
        pipeline = self.ctx.cfg.pipeline
        if not self._may_have(ItemKind.VIDEO):
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
        self.report.track_stages([*stage_names(engine), "encode", *fused])
        # Videos are tracked in their decode tasks (one per segment), with the detector's threads.
        tracking = (TrackedRead(engine.in_ray_actor(False), sources.reference, pipeline.detect.cpu_budget)
                    if engine.tracking.enabled and self._may_have(ItemKind.VIDEO) else None)
        images = self._may_have(ItemKind.IMAGE)
        # A dataset copies the DataContext when it is created: set it up first.
        with _data_context(pipeline):
            ds = ray.data.read_datasource(
                ItemSource(self.items, self.ctx, pipeline.plan_chunk_items), num_cpus=0.05,
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
        for n, info, error in zip(batch["item"], batch["info"], batch["error"], strict=True):
            if error == INFO_ROW:
                self._register(int(n), unpack(info))
        fold = self.report.fold(batch)
        self.report.settle(fold.items & self.heard)  # an item's row waits for its info (its warnings)
        self.done_frames += fold.frames
        for key in self.tracker.receive(fold.segment_frames, fold.segment_lengths):
            writer = self.writers[writer_for(key, len(self.writers))]
            self.finishing[writer.finish.remote(key)] = key
        self._collect(block=False)

    def _register(self, n: int, info: ItemInfo) -> None:
        """An item's plan came back: what it is, whether it runs, a video's segments."""
        plan, result = info.plan, self.results[n]
        if n in self.heard:
            return  # a planning block delivered twice (a retried task): counted once
        self.heard.add(n)
        planned = plan.result()
        result.kind = planned.kind
        result.frames_missing, result.missing_from_s = planned.frames_missing, planned.missing_from_s
        if not plan.runs:
            result.status, result.error = planned.status, planned.error
            self.report.settle([n])
            return
        result.warnings = list(planned.warnings)  # the same as before for an item planned on the driver
        self.total += plan.expected_frames
        if plan.kind is not ItemKind.VIDEO:
            if plan.frames > 1:
                self._animate(plan)
            self.report.settle([n])  # an image may have come back before its info
            return
        self.videos[n] = plan
        self.tracker.add(n, plan.segments)
        for index, segment in sorted(info.resumed.items()):
            frames = self.tracker.resume((n, index), Path(segment.path))
            result.frames += frames
            result.frames_resumed += frames
            result.frames_failed += segment.counts.frames_failed
            result.faces_swapped += segment.counts.faces_swapped
            result.error = result.error or segment.counts.first_error
            self.total -= frames
        if info.resumed:
            log.info("%s: %d of %d segments resumed from %s", plan.item.target, len(info.resumed),
                     len(plan.segments), plan.work_dir)
        self._join_if_complete(n)

    def _join_if_complete(self, n: int) -> None:
        """Start the join task of a video whose segments are all written (if it came back whole)."""
        result = self.results[n]
        if n not in self.videos or not self.tracker.complete(n) or result.status != ItemStatus.PENDING:
            return
        problem = check_video(self.videos[n], result)
        if problem is not None:
            result.fail(problem)
            self.report.settle([n])
            return
        ref = join_task.remote(self.videos[n], self.tracker.paths(n), self.comment, self.ctx.storage)  # type: ignore[call-arg]
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
                    self._segment_finished(self.finishing.pop(ref), ref)
                elif ref in self.joining:
                    self._joined(self.joining.pop(ref), ref)
                else:
                    self._animated(self.animating.pop(ref), ref)

    def _animate(self, plan: ItemPlan) -> None:
        """Start the task that swaps an animated image whole."""
        assert self.sources is not None
        identity = self.sources.identities[self.ctx.source_of[plan.index]]
        ref = animated_task.remote(plan, self.ctx.cfg.engine, identity, self.sources.reference,  # type: ignore[call-arg]
                                   self.ctx.storage)
        self.animating[ref] = plan.index

    def _animated(self, n: int, ref: Any) -> None:
        result = self.results[n]
        try:
            done = ray.get(ref)
        except Exception as exc:
            result.fail(exc)
        else:
            result.frames, result.faces_swapped = done.frames, done.faces_swapped
            result.warnings += [f"{result.target}: {change}" for change in done.changes]
            result.status = ItemStatus.DONE
            self.done_frames += done.frames
        self.report.settle([n])

    def _stop_animations(self) -> None:
        """Animated images still being swapped (the group failed): stopped, their outputs never written."""
        for ref, n in self.animating.items():
            ray.cancel(ref, force=True)
            self.results[n].fail("stopped: the group failed before the animated image was swapped")
            self.report.settle([n])
        self.animating.clear()

    def _segment_finished(self, key: SegmentKey, ref: Any) -> None:
        """A writer closed a segment: join its video once every segment is written."""
        n = key[0]
        try:
            path, _ = ray.get(ref)
        except Exception as exc:
            self.tracker.failed(key)
            self.results[n].fail(exc)
            self.report.settle([n])
            return
        if self.tracker.written(key, Path(path)):
            self._join_if_complete(n)

    def _joined(self, n: int, ref: Any) -> None:
        result = self.results[n]
        try:
            ray.get(ref)
        except Exception as exc:
            result.fail(exc)
        else:
            if result.status == ItemStatus.PENDING:  # a read failure that came after all its frames stands
                result.status, result.error = ItemStatus.DONE, done_message(result)
        self.videos.pop(n, None)
        self.report.settle([n])

    def _wait_for_joins(self) -> None:
        """Joins still running (the group failed): their outcome is recorded, bounded."""
        if not self.joining:
            return
        ready, _ = ray.wait(list(self.joining), num_returns=len(self.joining), timeout=CLEANUP_TIMEOUT_S)
        for ref in ready:
            self._joined(self.joining.pop(ref), ref)
        for ref, n in self.joining.items():  # stopped: an output it was writing never appears
            ray.cancel(ref, force=True)
            self.results[n].fail(f"the join did not end within {CLEANUP_TIMEOUT_S:.0f} s of the job stopping")
            self.report.settle([n])
        self.joining.clear()

    def _fail_incomplete(self) -> None:
        for item in self.items:
            n = item.index
            result = self.results[n]
            if result.status != ItemStatus.PENDING:
                continue
            if n not in self.heard:
                result.fail("incomplete: its plan did not come back from the pipeline")
            elif result.kind == ItemKind.VIDEO:
                result.fail(f"incomplete: {self.tracker.progress(n)}")
            else:
                result.fail("incomplete: the image did not come back from the pipeline")


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
