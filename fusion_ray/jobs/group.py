"""The driver's bookkeeping of one group's run, without Ray: what every runner of a job keeps.

:class:`GroupBook` registers each item as its plan comes back (what it is, whether it runs, a
video's segments and those an earlier run finished), folds the slim output rows into the report
and the segment tracker, says which segments are whole (all their frames reached their writer),
starts a video's join once its segments are all written, records the outcome of segments and
joins, and fails whatever did not come back. How a segment is finished, a video joined and an
animated image swapped (:mod:`fusion_ray.jobs.animated`) is the runner's
(:meth:`GroupBook.finish_segment`, :meth:`GroupBook.start_join`, :meth:`GroupBook.start_animation`):
Ray tasks and actors in :mod:`fusion_ray.runners.ray.run`, threads in :mod:`fusion_ray.runners.local.runner`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusion_ray.image import load_reference
from fusion_ray.jobs.animated import AnimatedResult
from fusion_ray.jobs.finalise import check_video, done_message
from fusion_ray.jobs.identities import driver_provenance, load_driver_engine, prepare_identities
from fusion_ray.jobs.items import GroupContext, ItemInfo
from fusion_ray.jobs.plan import GroupPlan, ItemPlan, JobPlan
from fusion_ray.jobs.report import ItemKind, ItemResult, ItemStatus, JobReport
from fusion_ray.jobs.segment_status import SegmentKey, SegmentTracker
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


@dataclass(frozen=True)
class PreparedGroup:
    """A group ready to run: its items that run, their context, the sources, the provenance comment."""

    items: list[ItemPlan]
    ctx: GroupContext
    sources: Sources
    comment: str


def prepare_group(plan: JobPlan, group: GroupPlan, results: Sequence[ItemResult], report: JobReport) -> PreparedGroup:
    """Embed the group's sources on the driver (items whose sources fail are settled failed) and
    record the models' provenance in the report."""
    driver = load_driver_engine(group.cfg.engine)
    members = [plan.items[n] for n in group.members]
    storage = Storage(plan.storage)
    identities, source_of = prepare_identities({p.index: p.item.sources for p in members}, driver, results,
                                               storage)
    report.settle(group.members)  # items whose sources failed
    sources = Sources(identities, load_reference(driver))
    provenance = driver_provenance(group.models, driver)
    report.add_stand_ins(provenance.report_field())
    report.add_precisions(provenance.precisions)
    ctx = GroupContext(group.cfg, group.models_fingerprint, source_of, provenance.metadata(), plan.storage,
                       plan.output_root, plan.force)
    # The planning gets compact plans: a video's timestamps are found again where needed.
    items = [dataclasses.replace(p, frame_times=None) for p in members if p.index in source_of]
    return PreparedGroup(items, ctx, sources, provenance.comment())


class GroupBook:
    """The state of one group's run: its items, the segment tracker, the counters."""

    def __init__(self, items: Sequence[ItemPlan], results: Sequence[ItemResult], report: JobReport) -> None:
        self.items = list(items)
        self.results = results
        self.report = report
        self.tracker = SegmentTracker()
        self.videos: dict[int, ItemPlan] = {}
        """Registered videos that run (compact plans), until they are joined or failed."""
        self.heard: set[int] = set()
        self.done_frames = 0
        self.total = 0

    # ------------------------------------------------------------ the runner's part
    def finish_segment(self, key: SegmentKey) -> None:
        """Close a whole segment's file (its outcome comes back through :meth:`segment_finished`)."""
        raise NotImplementedError

    def start_join(self, n: int, plan: ItemPlan, paths: list[Path]) -> None:
        """Join a video whose segments are all written (its outcome: :meth:`joined`)."""
        raise NotImplementedError

    def start_animation(self, plan: ItemPlan) -> None:
        """Swap an animated image whole (:func:`~fusion_ray.jobs.animated.swap_animated`;
        its outcome: :meth:`animated`)."""
        raise NotImplementedError

    # ------------------------------------------------------------ shared
    def members(self) -> set[int]:
        return {p.index for p in self.items}

    def may_have(self, kind: ItemKind) -> bool:
        return any(not p.planned or p.kind is kind for p in self.items)

    def fold(self, batch: Mapping[str, Any]) -> None:
        """A slim output batch: its items' counters, and its whole segments finished."""
        fold = self.report.fold(batch)
        self.report.settle(fold.items & self.heard)  # an item's row waits for its info (its warnings)
        self.done_frames += fold.frames
        for key in self.tracker.receive(fold.segment_frames, fold.segment_lengths):
            self.finish_segment(key)

    def register(self, n: int, info: ItemInfo) -> None:
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
            if plan.frames > 1:  # the read tasks never see it
                self.start_animation(plan)
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
        self.join_if_complete(n)

    def join_if_complete(self, n: int) -> None:
        """Start the join of a video whose segments are all written (if it came back whole)."""
        result = self.results[n]
        if n not in self.videos or not self.tracker.complete(n) or result.status != ItemStatus.PENDING:
            return
        problem = check_video(self.videos[n], result)
        if problem is not None:
            result.fail(problem)
            self.report.settle([n])
            return
        self.start_join(n, self.videos[n], self.tracker.paths(n))

    def segment_finished(self, key: SegmentKey, path: str | None, error: BaseException | None) -> None:
        """A writer closed a segment (or failed to): join its video once every segment is written."""
        n = key[0]
        if error is not None or path is None:
            self.tracker.failed(key)
            self.results[n].fail(error or "the segment was not written")
            self.report.settle([n])
            return
        if self.tracker.written(key, Path(path)):
            self.join_if_complete(n)

    def joined(self, n: int, error: BaseException | str | None) -> None:
        """A join ended (``error`` None: the output is in place)."""
        result = self.results[n]
        if error is not None:
            result.fail(error)
        elif result.status == ItemStatus.PENDING:  # a read failure that came after all its frames stands
            result.status, result.error = ItemStatus.DONE, done_message(result)
        self.videos.pop(n, None)
        self.report.settle([n])

    def animated(self, n: int, done: AnimatedResult | None, error: BaseException | str | None) -> None:
        """An animated image's swap ended (``error`` None: its output is in place)."""
        result = self.results[n]
        if done is None or error is not None:
            result.fail(error or "the animated image was not swapped")
        else:
            result.frames, result.faces_swapped = done.frames, done.faces_swapped
            result.warnings += [f"{result.target}: {change}" for change in done.changes]
            result.status = ItemStatus.DONE
            self.done_frames += done.frames
        self.report.settle([n])

    def fail_incomplete(self) -> None:
        """Whatever did not come back fails, with what is known of it."""
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

    def open_segments(self) -> list[SegmentKey]:
        """The segments of unfinished videos a writer may hold open (to abort)."""
        unfinished = {n for n in self.videos if self.results[n].status != ItemStatus.DONE}
        return self.tracker.unfinished(unfinished | (self.members() - self.heard))
