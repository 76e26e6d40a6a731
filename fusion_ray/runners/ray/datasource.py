"""Decoding a job's read units with PyAV: a video's keyframe segments, and groups of images.

``ray.data.read_videos`` decodes with decord and reads each file serially in one task; here a
long video is split at keyframes (from packet timestamps, without decoding) and its segments
are decoded in parallel (:mod:`fusion_ray.runners.ray.stream` runs these functions as Ray Data
tasks). Still images are read in groups (about ``image_task_mb`` of decoded pixels per task),
so that the stages get whole blocks of them, not one-row blocks. Rows carry the frame (BGR
uint8), its global index, timestamp, the item and segment it belongs to, its source id, and
where the encode stage sends it (:data:`FRAME_COLUMNS`). An image's alpha channel is decoded
here, once, and travels in the ``alpha`` column (the plane's bytes, ``b""`` when there is
none) to the encode stage, which re-attaches it. A unit that cannot be decoded yields one row
marked ``read_failed`` (its ``index`` is the first frame it could not deliver) with the error,
so the job can report the item instead of failing as a whole; the stages skip that row, as
they skip any row with an error. Every row is a frame or such a row: what planning found of an
item reaches the driver beside the stream (:mod:`fusion_ray.runners.ray.plans`).

With tracking (``read_unit(..., tracking=TrackedRead(...))``), a video read task also tracks
the segment's faces as it decodes them (:mod:`fusion_ray.jobs.track_read`): it holds a
few frames until their faces are final and emits each frame with its selected faces and the
tracking counters (:data:`TRACK_COLUMNS`); the detect stage then only cuts the crops.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from ray import cloudpickle
from ray.data.block import Block, BlockAccessor

from fusion_ray.errors import is_fatal
from fusion_ray.jobs.reading import (
    NO_ALPHA,
    ReadUnit,
    alpha_plane,
    is_remote,
    message_of,
    object_column,
    read_image_at,
    segment_frames,
    unpack,
)
from fusion_ray.jobs.report import step_column
from fusion_ray.jobs.track_read import (
    READ_STAGE,
    TRACK_COLUMNS,
    TrackedFrame,
    TrackedRead,
    face_columns,
)
from fusion_ray.storage import Storage, StorageConfig

log = logging.getLogger(__name__)

__all__ = ["FRAME_COLUMNS", "NO_ALPHA", "TRACK_COLUMNS", "ReadUnit", "alpha_plane", "is_remote", "object_column", "pack", "read_images", "read_unit", "unpack"]

FRAME_COLUMNS = ("item", "segment", "index", "time_s", "source_id", "frame", "alpha", "error", "read_failed",
                 "image", "seg_start", "seg_count", "target")
"""Every row's columns. ``image``: whether its item is an image; ``seg_start``/``seg_count``: its
segment's first frame and length (0, 1 for an image); ``target``: where the encode stage sends it (a
``VideoTarget`` or an ``ImageTarget``, :func:`pack`-ed)."""
class _Rows:
    """The rows of the block being built (with tracking, also the :data:`TRACK_COLUMNS`)."""

    def __init__(self, unit: ReadUnit, tracking: bool) -> None:
        self.unit = unit
        self.tracking = tracking
        self.columns: dict[str, list[Any]] = {name: [] for name in FRAME_COLUMNS}
        self.tracked: list[TrackedFrame | None] = []

    def __len__(self) -> int:
        return len(self.tracked)

    def add(self, index: int, time_s: float, frame: np.ndarray, alpha: bytes = NO_ALPHA, error: str = "",
            tracked: TrackedFrame | None = None, unit: ReadUnit | None = None) -> None:
        """One row of ``unit`` (default: the block's; a block of images has one row per image)."""
        unit = unit or self.unit
        seg = unit.segment
        segment, start, count = (seg.index, seg.start_frame, seg.frame_count) if seg is not None else (0, 0, 1)
        for name, value in (("item", unit.item), ("segment", segment), ("index", index), ("time_s", time_s),
                            ("source_id", unit.source_id), ("frame", frame), ("alpha", alpha),
                            ("error", error), ("read_failed", bool(error)), ("image", seg is None), ("seg_start", start),
                            ("seg_count", count), ("target", unit.target)):
            self.columns[name].append(value)
        self.tracked.append(tracked)

    def block(self) -> Block:
        rows = self.columns
        batch = {
            "item": np.asarray(rows["item"], np.int32),
            "segment": np.asarray(rows["segment"], np.int32),
            "index": np.asarray(rows["index"], np.int64),
            "time_s": np.asarray(rows["time_s"], np.float64),
            "source_id": np.asarray(rows["source_id"], dtype=object),
            "frame": _frames_column(rows["frame"]),
            "alpha": np.asarray(rows["alpha"], dtype=object),
            "error": np.asarray(rows["error"], dtype=object),
            "read_failed": np.asarray(rows["read_failed"], np.bool_),
            "image": np.asarray(rows["image"], np.bool_),
            "seg_start": np.asarray(rows["seg_start"], np.int64),
            "seg_count": np.asarray(rows["seg_count"], np.int64),
            "target": object_column(rows["target"]),
        }
        if self.tracking:
            batch.update(self._track_columns())
        return BlockAccessor.batch_to_block(batch)

    def _track_columns(self) -> dict[str, np.ndarray]:
        rows = [t or TrackedFrame(0, 0.0, np.zeros((1, 1, 3), np.uint8)) for t in self.tracked]
        columns = face_columns([r.faces for r in rows], self.unit.source_id)
        columns["tracked"] = np.asarray([t is not None for t in self.tracked], np.bool_)
        for name in ("faces_found", "det_full", "det_roi", "faces_interpolated", "tracks_new"):
            columns[name] = np.asarray([getattr(r, name) for r in rows], np.int32)
        # the read's detection and tracking, in the report's stage table
        columns[f"busy_ms_{READ_STAGE}"] = np.asarray([r.track_ms for r in rows], np.float64)
        columns[f"idle_ms_{READ_STAGE}"] = np.zeros(len(rows), np.float64)
        columns[step_column(READ_STAGE)] = columns[f"busy_ms_{READ_STAGE}"]  # the chain's detect|track step
        return columns


def pack(value: Any) -> bytes:
    """An object for a column (Arrow keeps bytes as they are; it cannot convert a dataclass)."""
    return cloudpickle.dumps(value)  # (mapping proxies in the plans: plain pickle refuses them)


def _frames_column(frames: list[np.ndarray]) -> np.ndarray:
    if all(f.shape == frames[0].shape for f in frames):
        return np.stack(frames)
    return object_column(frames)


def read_unit(unit: ReadUnit, block_frames: int, tracking: TrackedRead | None = None,
              storage: StorageConfig | None = None) -> Iterator[Block]:
    """Decode one unit into blocks of at most ``block_frames`` rows (bounded memory).

    With ``tracking``, a video unit's faces are tracked here (:mod:`fusion_ray.jobs.track_read`)
    and every block has the :data:`TRACK_COLUMNS` (an image's rows are not ``tracked``).
    A unit whose path is a URI is read from its bucket with ``storage``'s settings.
    """
    if unit.segment is None:
        yield from read_images([unit], block_frames, tracking is not None, storage)
        return
    rows = _Rows(unit, tracking is not None)
    next_index = unit.segment.start_frame
    try:
        for row in segment_frames(unit, tracking, storage):
            rows.add(row.index, row.time_s, row.frame, tracked=row if tracking is not None else None)
            next_index = row.index + 1
            if len(rows) >= block_frames:
                yield rows.block()
                rows = _Rows(unit, tracking is not None)
    except Exception as exc:  # any decode error (an odd pixel format, a PyAV error) fails this item only
        if tracking is not None and is_fatal(exc):
            raise  # a model, provider or memory error: Ray retries the read task
        message = message_of(exc)
        log.warning("cannot read %s (segment %d): %s", unit.path, unit.segment.index, message)
        if len(rows):
            yield rows.block()
        rows = _Rows(unit, tracking is not None)
        rows.add(next_index, 0.0, np.zeros((2, 2, 3), np.uint8), error=f"read: {message}")
    if len(rows):
        yield rows.block()


def read_images(units: Sequence[ReadUnit], block_frames: int, tracking: bool = False,
                storage: StorageConfig | None = None) -> Iterator[Block]:
    """Decode a group of image units into blocks of at most ``block_frames`` images; an image
    that cannot be read is its own ``read_failed`` row (the others are still read)."""
    store = Storage(storage)  # one client for the group
    rows = _Rows(units[0], tracking)
    for unit in units:
        try:
            image = read_image_at(unit.path, store)
            rows.add(0, 0.0, image.frame, image.alpha.tobytes() if image.alpha is not None else NO_ALPHA, unit=unit)
        except Exception as exc:  # a corrupt or vanished image fails that item only
            message = message_of(exc)
            log.warning("cannot read %s: %s", unit.path, message)
            rows.add(0, 0.0, np.zeros((2, 2, 3), np.uint8), error=f"read: {message}", unit=unit)
        if len(rows) >= block_frames:
            yield rows.block()
            rows = _Rows(units[0], tracking)
    if len(rows):
        yield rows.block()


def image_groups(units: Sequence[ReadUnit], task_bytes: int) -> list[list[ReadUnit]]:
    """Image units in read tasks of about ``task_bytes`` of decoded pixels each (in order; at
    least one image per task)."""
    groups: list[list[ReadUnit]] = []
    size = task_bytes
    for unit in units:
        frame_bytes = unit.frame_hw[0] * unit.frame_hw[1] * 3
        if size + frame_bytes > task_bytes and (not groups or groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append(unit)
        size += frame_bytes
    return groups
