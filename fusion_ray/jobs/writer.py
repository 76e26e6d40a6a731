"""The ordered sink: segment writers (a Ray actor in the Ray runner, a plain object in the local
runner) and image outputs.

The Ray runner's last stage (:class:`fusion_ray.runners.ray.encode_stage.EncodeStage`) sends each
segment's processed frames to one ``SegmentWriter`` actor, chosen by the segment's key
(:func:`writer_for`), so that every segment is encoded by a single writer; each row's ``target`` column says where it goes (a :class:`VideoTarget`: its
video's size, rate and parts folder; an :class:`ImageTarget`: its output). The writer re-orders
frames by index and streams them into a PyAV encoder running in a thread, one per open
segment; a segment's file is complete once its last frame is in. No process ever holds a
whole video: a writer holds only frames that arrived out of order, and the stage returns slim
rows (no pixels) to the driver, which has a Ray task join the segments.
Image items are written directly by that stage (:func:`write_image`), with the alpha plane their read task decoded
(the ``alpha`` column), unless an earlier stage failed on the image (its row carries an
``error``): then nothing is written. Rows marked ``read_failed`` hold no frame and are not
written. Failed video frames are passed through unchanged (a video cannot skip a frame); the
job counts them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.imageio import encode_image, write_bytes_atomic
from fusion_ray.jobs.parts import SegmentCounts, counts_name, segment_name
from fusion_ray.jobs.reading import alpha_plane, is_remote
from fusion_ray.jobs.segment_status import SegmentKey
from fusion_ray.storage import Storage, StorageConfig
from fusion_ray.video.encode import EncodeOptions, encode_segment

log = logging.getLogger(__name__)

_END = object()
IMAGE_WRITE_THREADS = 4
"""Image outputs an encode stage writes at once (PNG/JPEG encoding and uploads overlap)."""


@dataclass(frozen=True)
class VideoTarget:
    """What the writers need to know about one video item."""

    fps: Fraction
    width: int
    height: int
    work_dir: str
    """The parts folder: a local path, or a URI (segments are encoded to a local file, then
    published there whole)."""
    storage: StorageConfig | None = None
    pix_fmt: str = ""
    """The encoded pixel format the planner chose from the source's ("" = the options' choice)."""


@dataclass(frozen=True)
class ImageTarget:
    """Where an image item is written."""

    output_path: str
    metadata: Mapping[str, str]
    storage: StorageConfig | None = None
    """Settings of the store an ``output_path`` URI names."""


@dataclass
class _OpenSegment:
    path: Path
    start_index: int
    next_index: int
    end_index: int
    frames: queue.Queue[Any]
    thread: threading.Thread
    pending: dict[int, np.ndarray] = field(default_factory=dict)
    error: BaseException | None = None
    written: int = 0
    counts: SegmentCounts = field(default_factory=lambda: SegmentCounts())
    published: str = ""
    """Where the finished file goes: its name in the parts folder (a URI in a bucket)."""


SPOOL_STALE_S = 3600.0
"""A spooled segment not written to for this long was left by a writer that died with its
driver (an encoding file grows with every frame): the next writer on the node removes it."""


def sweep_spool(folder: Path, stale_s: float = SPOOL_STALE_S) -> int:
    """Remove the stale spooled segments in ``folder``; returns how many."""
    removed = 0
    now = time.time()
    for path in folder.glob("segment.*.mp4") if folder.is_dir() else ():
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime > stale_s:
                path.unlink()
                removed += 1
    if removed:
        log.info("removed %d stale spooled segment(s) from %s", removed, folder)
    return removed


def segment_path(work_dir: str, key: SegmentKey) -> Path:
    return Path(work_dir) / segment_name(key[1])


class SegmentWriter:
    """Encodes the segments routed to it, each in its own encoder thread (run as a Ray actor)."""

    def __init__(self, options: EncodeOptions, max_queue: int = 32, spool_dir: Path | None = None) -> None:
        self.options = options
        self.max_queue = max_queue
        self.open: dict[SegmentKey, _OpenSegment] = {}
        self.closed: set[SegmentKey] = set()  # finished or aborted: late pushes are ignored
        self.spool_dir = spool_dir or Path(tempfile.gettempdir()) / "fusion_ray_segments"
        """Where segments bound for a bucket are encoded before they are published."""
        sweep_spool(self.spool_dir)

    def _start(self, key: SegmentKey, start_frame: int, frame_count: int, target: VideoTarget) -> _OpenSegment:
        # A segment appears under its name only when complete (a re-run resumes every file
        # there): encoded to a hidden partial file, then renamed, or published whole.
        final = segment_path(target.work_dir, key)
        path, published = final.with_name(f".{final.name}.partial"), str(final)
        if is_remote(target.work_dir):
            self.spool_dir.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="segment.", suffix=".mp4", dir=self.spool_dir)
            os.close(fd)
            path, published = Path(name), f"{target.work_dir}/{final.name}"
        frames: queue.Queue[Any] = queue.Queue(maxsize=self.max_queue)
        state = _OpenSegment(path, start_frame, start_frame, start_frame + frame_count, frames, threading.Thread(),
                             published=published)

        ended = threading.Event()

        def feed() -> Iterator[np.ndarray]:
            while True:
                frame = frames.get()
                if frame is _END:
                    ended.set()
                    return
                yield frame

        def run() -> None:
            try:
                state.written = encode_segment(feed(), path, fps=target.fps, width=target.width,
                                               height=target.height, options=self.options, pix_fmt=target.pix_fmt)
                if state.next_index != state.end_index:  # ended early (aborted, incomplete): never published
                    path.unlink(missing_ok=True)
                    return
                store = Storage(target.storage)
                store.write_bytes_atomic(counts_name(published), state.counts.to_json())
                store.publish(path, published, move=True)  # a rename for a local file
            except BaseException as exc:  # reported by finish()
                state.error = exc
                path.unlink(missing_ok=True)
                while not ended.is_set() and frames.get() is not _END:  # drain: producers never block
                    pass

        state.thread = threading.Thread(target=run, name=f"encode-{key}", daemon=True)
        state.thread.start()
        self.open[key] = state
        return state

    def push(self, key: SegmentKey, start_frame: int, frame_count: int,
             indices: Sequence[int], frames: Sequence[np.ndarray], target: VideoTarget,
             errors: Sequence[str] | None = None, faces: Sequence[int] | None = None) -> int:
        """Add frames of a segment (any order), with each frame's error (a failed frame is passed
        through) and swapped faces; returns how many frames were queued for encoding.

        Frames already received are ignored: when Ray Data re-runs a block after a stage actor
        died, the block's frames may arrive a second time. A segment already finished or
        aborted ignores pushes (a re-run must not restart its encoder over the written file).
        """
        if key in self.closed:
            return 0
        state = self.open.get(key) or self._start(key, start_frame, frame_count, target)
        errors = errors if errors is not None else [""] * len(indices)
        faces = faces if faces is not None else [0] * len(indices)
        for index, frame, error, swapped in zip(indices, frames, errors, faces, strict=True):
            if not state.start_index <= index < state.end_index:
                raise ValueError(f"segment {key}: frame index {index} is outside "
                                 f"[{state.start_index}, {state.end_index})")
            if index < state.next_index or index in state.pending:
                continue  # a repeat
            state.pending[int(index)] = frame
            state.counts.add(error, int(swapped))
        queued = 0
        while state.next_index in state.pending:
            state.frames.put(state.pending.pop(state.next_index))
            state.next_index += 1
            queued += 1
        if state.next_index == state.end_index:
            state.frames.put(_END)
        return queued

    def finish(self, key: SegmentKey) -> tuple[str, int]:
        """Wait for a complete segment's encoder; returns (segment file, frames written)."""
        state = self.open.pop(key)
        self.closed.add(key)
        if state.next_index != state.end_index:
            state.frames.put(_END)
            state.thread.join()
            raise RuntimeError(f"segment {key} is incomplete: next frame {state.next_index} of {state.end_index}")
        state.thread.join()
        if state.error is not None:
            raise RuntimeError(f"segment {key}: encoding failed: {state.error}") from state.error
        return state.published, state.written

    def abort(self, keys: Sequence[SegmentKey]) -> None:
        """Stop and forget segments (of a failed item); their partial files are removed."""
        for key in keys:
            self.closed.add(key)
            state = self.open.pop(key, None)
            if state is None:
                continue
            if state.next_index != state.end_index:
                state.frames.put(_END)
            state.thread.join()
            state.path.unlink(missing_ok=True)

    def ready(self) -> bool:
        return True


def writer_for(key: SegmentKey, count: int) -> int:
    """The writer that owns a segment, the same in every process: consecutive segments of a video
    (decoded at once) and the single segments of consecutive videos go to different writers."""
    return (key[0] + key[1]) % count


def write_image(frame: np.ndarray, alpha: bytes, target: ImageTarget) -> None:
    """Write an image item: its frame with the alpha plane its read decoded, whole or not at all
    (in its bucket too)."""
    output = Path(target.output_path)
    data = encode_image(frame, output.suffix, alpha=alpha_plane(alpha, frame), metadata=target.metadata)
    if is_remote(target.output_path):
        Storage(target.storage).write_bytes_atomic(target.output_path, data)
    else:
        write_bytes_atomic(output, data, force=True)
