"""A Ray Data datasource that decodes videos with PyAV, one read task per keyframe segment.

``ray.data.read_videos`` decodes with decord and reads each file serially in one task; here a
long video is split at keyframes (from packet timestamps, without decoding) and its segments
are decoded in parallel. Still images are one-row read tasks. Rows carry the frame (BGR
uint8), its global index, timestamp, the item and segment it belongs to, and its source id.
A segment that cannot be decoded yields one row with ``index == -1`` and the error, so the
job can report the item instead of failing as a whole.
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

FRAME_COLUMNS = ("item", "segment", "index", "time_s", "source_id", "frame", "error")


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
        "error": np.asarray(rows["error"], dtype=object),
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

    def add(index: int, time_s: float, frame: np.ndarray, error: str = "") -> None:
        rows["item"].append(unit.item)
        rows["segment"].append(segment_index)
        rows["index"].append(index)
        rows["time_s"].append(time_s)
        rows["source_id"].append(unit.source_id)
        rows["frame"].append(frame)
        rows["error"].append(error)

    try:
        if unit.segment is None:
            add(0, 0.0, read_image(Path(unit.path)).frame)
        else:
            for decoded in decode_segment(unit.path, unit.segment, threads=1):
                add(decoded.index, decoded.time_s, decoded.frame)
                if len(rows["index"]) >= block_frames:
                    yield _block(rows)
                    rows = _empty_rows()
    except Exception as exc:  # any decode error (an odd pixel format, a PyAV error) fails this item only
        message = str(exc) if isinstance(exc, FusionRayError | OSError) else f"{type(exc).__name__}: {exc}"
        log.warning("cannot read %s (segment %d): %s", unit.path, segment_index, message)
        if rows["index"]:
            yield _block(rows)
        rows = _empty_rows()
        add(-1, 0.0, np.zeros((2, 2, 3), np.uint8), f"read: {message}")
    if rows["index"]:
        yield _block(rows)


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
