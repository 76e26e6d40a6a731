"""The local runner's first stages: the planner thread (each item planned, its units queued) and
the decode threads (an image read, or a video segment decoded and, with tracking on, tracked)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from fusion_ray.core.modelset import ModelSet
from fusion_ray.errors import is_fatal
from fusion_ray.jobs.items import GroupContext, plan_one
from fusion_ray.jobs.plan import ItemPlan
from fusion_ray.jobs.reading import ReadUnit, message_of, read_image_at, segment_frames
from fusion_ray.jobs.track_read import READ_STAGE, TrackedRead
from fusion_ray.runners.local.lanes import NO_FRAME, Lanes, Work
from fusion_ray.runners.local.queues import END, Clock, Stopped, get, put
from fusion_ray.storage import Storage

log = logging.getLogger(__name__)


def plan_units(lanes: Lanes, items: Sequence[ItemPlan], ctx: GroupContext, decoders: int) -> None:
    """The planner thread: each item's info (an event) and read units, in order; then one END per decoder."""
    storage = Storage(ctx.storage)
    for item in items:
        info, units = plan_one(item, ctx, storage)
        lanes.events.put(("info", item.index, info))
        for unit in units:
            put(lanes.units, unit, lanes.stop)
    for _ in range(decoders):
        put(lanes.units, END, lanes.stop)


class Decoder:
    """One decode thread's body (:meth:`run`): units in, frames (:class:`Work`) out."""

    def __init__(self, lanes: Lanes, ctx: GroupContext, tracking: TrackedRead | None, workers: int) -> None:
        self.lanes, self.ctx, self.tracking, self.workers = lanes, ctx, tracking, workers

    def run(self) -> None:
        """Read units until END; the last decoder to end sends one END per compute worker."""
        lanes = self.lanes
        storage = Storage(self.ctx.storage)
        models = self.tracking.load_models() if self.tracking is not None else None
        clock = lanes.clocks["decode"]
        while True:
            unit, waited = get(lanes.units, lanes.stop)
            clock.add(idle_s=waited)
            if unit is END:
                break
            if unit.segment is None:
                self._read_image(unit, storage, clock)
            else:
                self._read_segment(unit, models, clock)
        if lanes.last("decoders"):
            for _ in range(self.workers):
                put(lanes.decoded, END, lanes.stop)

    def _read_image(self, unit: ReadUnit, storage: Storage, clock: Clock) -> None:
        started = time.perf_counter()
        try:
            image = read_image_at(unit.path, storage)
            alpha = image.alpha.tobytes() if image.alpha is not None else b""
            work = Work(unit, 0, image.frame, alpha)
        except Exception as exc:  # a corrupt or vanished image fails that item only
            log.warning("cannot read %s: %s", unit.path, message_of(exc))
            work = Work(unit, 0, NO_FRAME, error=f"read: {message_of(exc)}", read_failed=True)
        clock.add(busy_s=time.perf_counter() - started, idle_s=put(self.lanes.decoded, work, self.lanes.stop))

    def _read_segment(self, unit: ReadUnit, models: ModelSet | None, clock: Clock) -> None:
        """Decode (and track) a segment; its time is decoding, less what tracking took, plus the
        waits for room in the queue (idle)."""
        assert unit.segment is not None
        lanes = self.lanes
        next_index = unit.segment.start_frame
        spent = tracked = waited = 0.0
        started = time.perf_counter()
        try:
            for row in segment_frames(unit, self.tracking, self.ctx.storage, models):
                spent += time.perf_counter() - started
                tracked += row.track_ms / 1000.0
                waited += put(lanes.decoded, Work(unit, row.index, row.frame,
                                                  tracked=row if self.tracking is not None else None), lanes.stop)
                next_index = row.index + 1
                started = time.perf_counter()
        except Stopped:
            raise
        except Exception as exc:  # a decode error fails this item only
            if self.tracking is not None and is_fatal(exc):
                raise
            log.warning("cannot read %s (segment %d): %s", unit.path, unit.segment.index, message_of(exc))
            failed = Work(unit, next_index, NO_FRAME, error=f"read: {message_of(exc)}", read_failed=True)
            waited += put(lanes.decoded, failed, lanes.stop)
        finally:
            spent += time.perf_counter() - started
            clock.add(busy_s=max(spent - tracked, 0.0), idle_s=waited)
            if READ_STAGE in lanes.clocks:
                lanes.clocks[READ_STAGE].add(busy_s=tracked)
