"""One group of planned items run as one streaming Ray Data pipeline.

``run_group`` embeds the group's sources on the driver, then a :class:`GroupRun` makes the
output and parts folders, starts the segment writers, streams every frame through the stages,
and folds each slim output batch into the report and the segment tracker. A segment whose
frames have all reached their writer is finished; a video whose segments are all written is
joined (:mod:`fusion_ray.pipeline.finalise`). Segments an earlier run finished are not read
again (:mod:`fusion_ray.pipeline.parts`). Whatever happens, the writers are stopped; a video's
parts folder is removed once it is joined, and kept otherwise, for a re-run to resume.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from fusion_ray.core.provenance import Provenance
from fusion_ray.image import load_reference
from fusion_ray.imageio import FORMAT_CHANGES_KEY
from fusion_ray.pipeline.build import Sink, build_pipeline
from fusion_ray.pipeline.config import FUSED_POOL, JobConfig, PipelineConfig
from fusion_ray.pipeline.datasource import FrameDatasource, ReadUnit
from fusion_ray.pipeline.finalise import cleanup, join_video
from fusion_ray.pipeline.parts import finished_segments, remove_other_keys
from fusion_ray.pipeline.plan import GroupPlan, ItemPlan, JobPlan
from fusion_ray.pipeline.report import ItemKind, ItemResult, ItemStatus, JobReport
from fusion_ray.pipeline.sources import driver_provenance, load_driver_engine, prepare_identities
from fusion_ray.pipeline.stages import stage_names
from fusion_ray.pipeline.track_read import TrackedRead
from fusion_ray.pipeline.tracker import SegmentKey, SegmentTracker
from fusion_ray.pipeline.writer import ImageTarget, SegmentWriter, VideoTarget, writer_for
from fusion_ray.storage import Location, Storage, StorageError
from fusion_ray.types import Embedding, SourceIdentity

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int, JobReport], None]
"""progress(frames_done, frames_total, report_so_far)."""


@dataclass(frozen=True)
class Sources:
    """What the driver prepared for the stages: identities by source id, each item's source id,
    and the reference face's embedding (``--select reference``)."""

    identities: Mapping[str, SourceIdentity]
    source_of: Mapping[int, str]
    reference: Embedding | None


def run_group(plan: JobPlan, group: GroupPlan, results: Sequence[ItemResult], report: JobReport,
              progress: ProgressCallback | None, gpus_now: float) -> None:
    """Embed the group's sources on the driver, then run its items (see the module docstring)."""
    driver = load_driver_engine(group.cfg.engine)
    members = [plan.items[n] for n in group.members]
    storage = Storage(plan.storage)
    identities, source_of = prepare_identities({p.index: p.item.sources for p in members}, driver, results,
                                               storage)
    sources = Sources(identities, source_of, load_reference(driver))
    provenance = driver_provenance(group.models, driver)
    report.add_stand_ins(provenance.report_field())
    run = GroupRun([p for p in members if p.index in source_of], group.cfg, results, report, provenance, storage)
    run.execute(sources, progress, gpus_now)


class GroupRun:
    """The state of one group's run: its items, writers, segment tracker and finishing segments."""

    def __init__(self, items: Sequence[ItemPlan], cfg: JobConfig, results: Sequence[ItemResult],
                 report: JobReport, provenance: Provenance, storage: Storage | None = None) -> None:
        self.items = {p.index: p for p in items}
        self.storage = storage or Storage()
        """Reads the inputs in buckets (the read tasks get its config, not the workers' environment)."""
        self.videos = {n: p for n, p in self.items.items() if p.kind is ItemKind.VIDEO}
        self.cfg = cfg
        self.results = results
        self.report = report
        self.metadata = provenance.metadata()
        self.comment = provenance.comment()
        self.tracker = SegmentTracker({n: v.segments for n, v in self.videos.items()})
        self.writers: list[Any] = []
        self.finishing: dict[Any, SegmentKey] = {}
        self.done_frames = 0

    def execute(self, sources: Sources, progress: ProgressCallback | None, gpus_now: float) -> None:
        """Run every item; from the first parts folder on, the cleanup always runs."""
        try:
            units = self._prepare_outputs(sources.source_of)
            if not units:
                return
            self._start_writers()
            self._stream(units, sources, progress, gpus_now)
            self._collect(block=True)
            self._fail_incomplete()
        finally:
            self.report.frames += self.done_frames
            cleanup(self.videos.values(), self.results, self.writers, self.storage)

    def _prepare_outputs(self, source_of: Mapping[int, str]) -> list[ReadUnit]:
        """Each item's output folder (and a video's parts folder); its read units: every image,
        and the segments of each video that no earlier run left finished in its parts folder
        (those are resumed). A video whose segments were all finished is joined here."""
        units: list[ReadUnit] = []
        for n, item in self.items.items():
            target = str(item.item.target)
            try:
                self._make_folders(item)
                if item.kind is ItemKind.VIDEO:
                    resumed = self._resume(item)
                    fps = float(item.video.fps) if item.video is not None else 30.0
                    units += [ReadUnit(n, target, source_of[n], s, item.frame_hw, fps)
                              for s in item.segments if s.index not in resumed]
                    if self.tracker.complete(n):
                        join_video(item, self.results[n], self.tracker.paths(n), self.comment, self.storage)
                else:
                    units.append(ReadUnit(n, target, source_of[n], None, item.frame_hw))
            except (OSError, StorageError) as exc:
                self.results[n].fail(exc)
        return units

    def _make_folders(self, item: ItemPlan) -> None:
        """The output's folder and a video's parts folder, without the parts of other settings
        or inputs; in a bucket there are no folders to make."""
        work_dir = item.work_dir
        if item.kind is ItemKind.VIDEO:
            remove_other_keys(self.storage, work_dir)
        if isinstance(item.output, Location) or isinstance(work_dir, Location):
            return
        item.output.parent.mkdir(parents=True, exist_ok=True)
        if item.kind is ItemKind.VIDEO:
            work_dir.mkdir(parents=True, exist_ok=True)

    def _resume(self, item: ItemPlan) -> set[int]:
        """The video's segments an earlier run finished (``DONE`` in the tracker, counted as
        resumed frames); returns their indices."""
        found = finished_segments(self.storage, item.work_dir, item.segments)
        result = self.results[item.index]
        for index, location in sorted(found.items()):
            frames = self.tracker.resume((item.index, index), Path(str(location)))
            result.frames += frames
            result.frames_resumed += frames
        if found:
            log.info("%s: %d of %d segments resumed from %s", item.item.target, len(found), len(item.segments),
                     item.work_dir)
        return set(found)

    def _start_writers(self) -> None:
        pipeline = self.cfg.pipeline
        targets = {n: VideoTarget(v.video.fps, v.video.width, v.video.height, str(v.work_dir), self.storage.config)
                   for n, v in self.videos.items() if v.video is not None}
        # Spread over the nodes (as Ray Data spreads its tasks), so that encoding scales out with them.
        writer_cls = ray.remote(SegmentWriter).options(num_cpus=pipeline.writer_num_cpus, scheduling_strategy="SPREAD")
        count = pipeline.writers_for(sum(len(v.segments) for v in self.videos.values()))  # none for images
        self.writers += [writer_cls.remote(targets, pipeline.encode_options)  # type: ignore[attr-defined]
                         for _ in range(count)]

    def _sink(self) -> Sink:
        segments = {(n, s.index): (s.start_frame, s.frame_count) for n, v in self.videos.items() for s in v.segments}
        images = {n: ImageTarget(str(p.output), _image_metadata(self.metadata, p), self.storage.config)
                  for n, p in self.items.items() if p.kind is ItemKind.IMAGE}
        return Sink(self.writers, segments, images)

    def _stream(self, units: Sequence[ReadUnit], sources: Sources, progress: ProgressCallback | None,
                gpus_now: float) -> None:
        """Frames through the stages; each output batch folded in as it comes back."""
        engine, pipeline = self.cfg.engine, self.cfg.pipeline
        gpus_available = pipeline.uses_gpus(gpus_now)
        fused = [FUSED_POOL] if pipeline.fused(gpus_available) else []
        self.report.track_stages([*stage_names(engine), "encode", *fused])
        total = sum(u.segment.frame_count if u.segment is not None else 1 for u in units)
        largest = max(u.frame_hw[0] * u.frame_hw[1] * 3 for u in units)
        block_frames = max(1, min(pipeline.block_frames, int(pipeline.block_mb * 2**20 // max(largest, 1))))
        # Videos are tracked in their read tasks (one per segment), with the detector's threads.
        tracking = (TrackedRead(engine.in_ray_actor(False), sources.reference, pipeline.detect.cpu_budget)
                    if engine.tracking.enabled and self.videos else None)
        # A dataset copies the DataContext when it is created: set it up first.
        with _data_context(pipeline):
            datasource = FrameDatasource(units, block_frames, tracking, self.storage.config, pipeline.image_task_mb)
            # The image groups are listed first: their read tasks run beside the video segments'.
            images = any(u.segment is None for u in units)
            ds = ray.data.read_datasource(
                datasource, num_cpus=pipeline.read_num_cpus, override_num_blocks=len(units),
                compute=ray.data.TaskPoolStrategy(size=pipeline.read_tasks + (pipeline.image_read_tasks if images else 0)))
            ds = build_pipeline(ds, engine, pipeline, dict(sources.identities), reference=sources.reference,
                                gpus_available=gpus_available, sink=self._sink(), tracked=tracking is not None)
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                self._on_batch(batch)
                if progress is not None:
                    progress(self.done_frames, total, self.report)

    def _on_batch(self, batch: Mapping[str, Any]) -> None:
        fold = self.report.fold(batch)
        self.done_frames += fold.frames
        for key in self.tracker.receive(fold.segment_frames):
            writer = self.writers[writer_for(key, len(self.writers))]
            self.finishing[writer.finish.remote(key)] = key
        self._collect(block=False)

    def _collect(self, *, block: bool) -> None:
        """Gather finished segments (waiting for them all when ``block``)."""
        while self.finishing:
            ready, _ = ray.wait(list(self.finishing), num_returns=1 if block else len(self.finishing),
                                timeout=None if block else 0)
            if not ready:
                return
            for ref in ready:
                self._segment_finished(self.finishing.pop(ref), ref)

    def _segment_finished(self, key: SegmentKey, ref: Any) -> None:
        """A writer closed a segment: join its video once every segment is written."""
        n = key[0]
        result = self.results[n]
        try:
            path, _ = ray.get(ref)
        except Exception as exc:
            self.tracker.failed(key)
            result.fail(exc)
            self.report.settle([n])
            return
        if self.tracker.written(key, Path(path)) and result.status == ItemStatus.PENDING:
            join_video(self.videos[n], result, self.tracker.paths(n), self.comment, self.storage)
        self.report.settle([n])

    def _fail_incomplete(self) -> None:
        for n, item in self.items.items():
            result = self.results[n]
            if result.status != ItemStatus.PENDING:
                continue
            if item.kind is ItemKind.VIDEO:
                result.fail(f"incomplete: {self.tracker.progress(n)}")
            else:
                result.fail("incomplete: the image did not come back from the pipeline")


def _image_metadata(metadata: Mapping[str, str], item: ItemPlan) -> dict[str, str]:
    """An image output's metadata: the provenance, and what writing it changed (as the image command)."""
    if not item.format_changes:
        return dict(metadata)
    return {**metadata, FORMAT_CHANGES_KEY: "; ".join(item.format_changes)}


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
