"""The local runner's encode thread: processed frames in order through one
:class:`~fusion_ray.jobs.writer.SegmentWriter` (its own encoder thread per open segment),
images written whole; a slim row per frame (no pixels) goes to the main thread's bookkeeping."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from fusion_ray.jobs.reading import unpack
from fusion_ray.jobs.report import TRACKING_COUNTERS
from fusion_ray.jobs.writer import SegmentWriter, write_image
from fusion_ray.runners.local.lanes import Lanes, Work
from fusion_ray.runners.local.queues import END, get

_TARGETS_KEPT = 1024
"""Unpacked output targets remembered (a dataset of many images starts over past it)."""


class Encoder:
    """The encode thread's body (:meth:`run`); ends with an ``encoded`` event after the last frame."""

    def __init__(self, lanes: Lanes, writer: SegmentWriter) -> None:
        self.lanes, self.writer = lanes, writer

    def run(self) -> None:
        lanes = self.lanes
        clock = lanes.clocks["encode"]
        targets: dict[bytes, Any] = {}
        while True:
            work, waited = get(lanes.processed, lanes.stop)
            clock.add(idle_s=waited)
            if work is END:
                lanes.events.put(("encoded",))
                return
            start = time.perf_counter()
            packed = work.unit.target
            if packed not in targets:
                if len(targets) > _TARGETS_KEPT:
                    targets.clear()
                targets[packed] = unpack(packed)
            self._write(work, targets[packed])
            lanes.events.put(("rows", slim_row(work)))
            clock.add(busy_s=time.perf_counter() - start)

    def _write(self, work: Work, target: Any) -> None:
        unit = work.unit
        if work.read_failed:
            return  # nothing was read: nothing to write
        if unit.segment is None:
            if not work.error:  # a failed image is not written (a re-run retries it)
                try:
                    write_image(work.frame, work.alpha, target)
                except Exception as exc:
                    work.error = f"encode: {type(exc).__name__}: {exc}"
            return
        seg = unit.segment
        # Segments of one writer, from this thread only; finish() (another thread) closes a
        # segment only once all its frames were pushed.
        self.writer.push((unit.item, seg.index), seg.start_frame, seg.frame_count, [work.index], [work.frame],
                         target, [work.error], [work.faces_swapped])


def slim_row(work: Work) -> dict[str, np.ndarray]:
    """The slim row the bookkeeping folds (no pixels), as the Ray runner's output rows."""
    unit = work.unit
    seg = unit.segment
    row: dict[str, np.ndarray] = {
        "item": np.asarray([unit.item]), "segment": np.asarray([seg.index if seg is not None else 0]),
        "index": np.asarray([work.index]), "error": np.asarray([work.error], object),
        "read_failed": np.asarray([work.read_failed]), "image": np.asarray([seg is None]),
        "faces_swapped": np.asarray([work.faces_swapped]),
        "seg_count": np.asarray([seg.frame_count if seg is not None else 1])}
    if work.tracked is not None:
        for column in TRACKING_COUNTERS:
            row[column] = np.asarray([int(getattr(work.tracked, column))])
    return row
