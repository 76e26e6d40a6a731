"""A Ray Data datasource that decodes videos with PyAV, one read task per keyframe segment.

``ray.data.read_videos`` decodes with decord and reads each file serially in one task; here a
long video is split at keyframes (from packet timestamps, without decoding) and its segments
are decoded in parallel. Still images are one-row read tasks. Rows carry the frame (BGR
uint8), its global index, timestamp, the item and segment it belongs to, and its source id.
An image's alpha channel is decoded here, once, and travels in the ``alpha`` column (the
plane's bytes, ``b""`` when there is none) to the encode stage, which re-attaches it.
A unit that cannot be decoded yields one row marked ``read_failed`` (its ``index`` is the
first frame it could not deliver) with the error, so the job can report the item instead of
failing as a whole; the stages skip that row, as they skip any row with an error.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from ray.data.block import Block, BlockAccessor, BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from fusion_ray.errors import FusionRayError
from fusion_ray.imageio import read_image
from fusion_ray.video.decode import decode_segment
from fusion_ray.video.segments import Segment

log = logging.getLogger(__name__)

FRAME_COLUMNS = ("item", "segment", "index", "time_s", "source_id", "frame", "alpha", "error", "read_failed")
NO_ALPHA = b""


@dataclass(frozen=True)
class ReadUnit:
    """One read task: a segment of a video item, or a whole image item (``segment is None``)."""

    item: int
    path: str
    source_id: str
    segment: Segment | None
    frame_hw: tuple[int, int]


def _block(rows: dict[str, list[Any]]) -> Block:
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
    }
    return BlockAccessor.batch_to_block(batch)


def _frames_column(frames: list[np.ndarray]) -> np.ndarray:
    if all(f.shape == frames[0].shape for f in frames):
        return np.stack(frames)
    column = np.empty(len(frames), dtype=object)
    for i, frame in enumerate(frames):
        column[i] = frame
    return column


def _empty_rows() -> dict[str, list[Any]]:
    return {name: [] for name in FRAME_COLUMNS}


def read_unit(unit: ReadUnit, block_frames: int) -> Iterator[Block]:
    """Decode one unit into blocks of at most ``block_frames`` rows (bounded memory)."""
    rows = _empty_rows()
    segment_index = unit.segment.index if unit.segment is not None else 0
    next_index = unit.segment.start_frame if unit.segment is not None else 0

    def add(index: int, time_s: float, frame: np.ndarray, alpha: bytes = NO_ALPHA, error: str = "") -> None:
        for name, value in (("item", unit.item), ("segment", segment_index), ("index", index), ("time_s", time_s),
                            ("source_id", unit.source_id), ("frame", frame), ("alpha", alpha),
                            ("error", error), ("read_failed", bool(error))):
            rows[name].append(value)

    try:
        if unit.segment is None:
            image = read_image(Path(unit.path))
            add(0, 0.0, image.frame, image.alpha.tobytes() if image.alpha is not None else NO_ALPHA)
        else:
            for decoded in decode_segment(unit.path, unit.segment, threads=1):
                add(decoded.index, decoded.time_s, decoded.frame)
                next_index = decoded.index + 1
                if len(rows["index"]) >= block_frames:
                    yield _block(rows)
                    rows = _empty_rows()
    except Exception as exc:  # any decode error (an odd pixel format, a PyAV error) fails this item only
        message = str(exc) if isinstance(exc, FusionRayError | OSError) else f"{type(exc).__name__}: {exc}"
        log.warning("cannot read %s (segment %d): %s", unit.path, segment_index, message)
        if rows["index"]:
            yield _block(rows)
        rows = _empty_rows()
        add(next_index, 0.0, np.zeros((2, 2, 3), np.uint8), error=f"read: {message}")
    if rows["index"]:
        yield _block(rows)


def alpha_plane(alpha: bytes, frame: np.ndarray) -> np.ndarray | None:
    """The alpha plane carried in a row's ``alpha`` column (None when the image has none)."""
    if not alpha:
        return None
    return np.frombuffer(alpha, np.uint8).reshape(frame.shape[:2])


class FrameDatasource(Datasource):
    """Frames of many videos and images, one read task per video segment or image."""

    def __init__(self, units: Sequence[ReadUnit], block_frames: int = 16) -> None:
        super().__init__()
        if not units:
            raise ValueError("FrameDatasource needs at least one read unit")
        self.units = list(units)
        self.block_frames = block_frames

    def _unit_rows(self, unit: ReadUnit) -> int:
        return unit.segment.frame_count if unit.segment is not None else 1

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(self._unit_rows(u) * u.frame_hw[0] * u.frame_hw[1] * 3 for u in self.units)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        tasks = []
        for unit in self.units:
            rows = self._unit_rows(unit)
            metadata = BlockMetadata(num_rows=rows, size_bytes=rows * unit.frame_hw[0] * unit.frame_hw[1] * 3,
                                     input_files=(unit.path,), exec_stats=None)
            tasks.append(ReadTask(functools.partial(read_unit, unit, self.block_frames), metadata))
        return tasks

    def get_name(self) -> str:
        return "ReadFrames"
