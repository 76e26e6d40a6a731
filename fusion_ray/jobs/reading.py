"""Reading a job's inputs without Ray: the read units, a segment's frames (tracked or not), an
image, and the small helpers the rows use. The Ray read tasks (:mod:`fusion_ray.runners.ray.datasource`)
and the local runner (:mod:`fusion_ray.runners.local.runner`) both read through these."""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.core.modelset import ModelSet
from fusion_ray.errors import FusionRayError
from fusion_ray.imageio import LoadedImage, decode_image, read_image
from fusion_ray.jobs.track_read import SegmentReader, TrackedFrame, TrackedRead
from fusion_ray.storage import Storage, StorageConfig
from fusion_ray.video.decode import decode_segment
from fusion_ray.video.probe import Media
from fusion_ray.video.segments import Segment

NO_ALPHA = b""


@dataclass(frozen=True)
class ReadUnit:
    """One read task: a segment of a video item, or a whole image item (``segment is None``)."""

    item: int
    path: str
    source_id: str
    segment: Segment | None
    frame_hw: tuple[int, int]
    fps: float = 30.0
    target: bytes = b""
    """Where its frames go: a ``writer.VideoTarget`` or ``writer.ImageTarget``, :func:`pack`-ed
    once (the units of a video share it)."""


def unpack(data: bytes) -> Any:
    """The object :func:`pack` made. Only this job's own tasks write these columns."""
    return pickle.loads(data)  # noqa: S301 - the job's own rows, never user input


def object_column(values: Sequence[Any]) -> np.ndarray:
    """A column of Python objects, one per row (numpy would turn sequences into dimensions)."""
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


def is_remote(path: str) -> bool:
    """Whether a unit's path is the URI of an object in a bucket (``s3://``, ``gs://``)."""
    return "://" in path and not path.startswith("file://")


@contextlib.contextmanager
def media_of(path: str, storage: StorageConfig | None) -> Iterator[Media]:
    """A local path as it is; an object opened by ranges, closed when the block ends."""
    if not is_remote(path):
        yield path
        return
    with Storage(storage).open_media(path) as media:
        yield media


def read_image_at(path: str, storage: Storage) -> LoadedImage:
    if is_remote(path):
        return decode_image(storage.read_bytes(path), path)
    return read_image(Path(path))


def segment_frames(unit: ReadUnit, tracking: TrackedRead | None, storage: StorageConfig | None = None,
                   models: ModelSet | None = None) -> Iterator[TrackedFrame]:
    """The segment's frames in order; with tracking, each with its final faces and counters
    (tracked with ``models``, default: loaded for this segment)."""
    assert unit.segment is not None
    with media_of(unit.path, storage) as media:
        decoded = decode_segment(media, unit.segment, threads=1)
        if tracking is None:
            for frame in decoded:
                yield TrackedFrame(frame.index, frame.time_s, frame.frame)
            return
        reader = SegmentReader(models if models is not None else tracking.load_models(), tracking, fps=unit.fps, frame_hw=unit.frame_hw)
        yield from reader.frames(decoded)


def message_of(exc: Exception) -> str:
    """A read error in one line (a typed error or an OS error as it is, others with their type)."""
    return str(exc) if isinstance(exc, FusionRayError | OSError) else f"{type(exc).__name__}: {exc}"


def alpha_plane(alpha: bytes, frame: np.ndarray) -> np.ndarray | None:
    """The alpha plane carried in a row's ``alpha`` column (None when the image has none)."""
    if not alpha:
        return None
    return np.frombuffer(alpha, np.uint8).reshape(frame.shape[:2])
