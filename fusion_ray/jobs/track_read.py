"""Face tracking inside a read task: a keyframe segment's faces found while it is decoded.

Tracking needs a segment's frames in order, and Ray Data sends a segment's blocks to any
actor of a pool, so the tracker cannot live in a pool actor. It lives in the read task, which
decodes one segment in order anyway. With tracking on, a video read task:

1. loads the detector once (and the embedder for ``reference`` selection), with the detect
   stage's CPU budget;
2. runs :class:`~fusion_ray.core.tracking.redetect.TrackingDetector` on each decoded frame: a full-frame
   detection on the segment's first frame, every ``full_every`` frames, after a loss or a low
   crop score; crop re-detection of the tracked faces otherwise (one batched detector call per
   frame; a confident, slow face every other frame, interpolated in between);
3. holds the newest frames (at most :func:`~fusion_ray.core.tracking.stream.lookahead` + 1)
   until :class:`~fusion_ray.core.tracking.stream.SegmentTracks` has made their faces final
   (lookback, gap filling, centred-window smoothing);
4. decides the selection per track (:class:`~fusion_ray.core.tracking.select.TrackSelection`),
   so that the chosen person stays chosen through the segment, and emits each frame with its
   selected faces and counters (:class:`TrackedFrame`).

Tracks start again at each segment (a segment begins with a full detection), so segments
still decode and track in parallel.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core import identity
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.core.modelset import Component, ModelSet
from fusion_ray.core.steps import step_named
from fusion_ray.core.tracking.redetect import TrackingDetector
from fusion_ray.core.tracking.select import TrackSelection
from fusion_ray.core.tracking.stream import SegmentTracks
from fusion_ray.core.tracking.tracks import FrameFaces
from fusion_ray.jobs.stages import READ_FACE_COLUMNS
from fusion_ray.types import Embedding, Frame
from fusion_ray.video.decode import DecodedFrame

log = logging.getLogger(__name__)

READ_STAGE = "track"
"""The report's name for the detection and tracking a read does (busy time per frame in the rows'
``busy_ms_track``): it runs where the frames are decoded, not in a stage."""
TRACK_COLUMNS = (*READ_FACE_COLUMNS, "tracked", "faces_found", "det_full", "det_roi", "faces_interpolated",
                 "tracks_new")
"""Per-row columns of a tracking read task: the selected faces; ``tracked`` (the faces were
decided here; False for images, which the detect stage detects); ``faces_found`` (faces on
the frame, interpolated ones included); ``det_full`` (1 when the frame had a full-frame
detection); ``det_roi`` (crops re-detected while reading this frame, follow-backs included);
``faces_interpolated`` (selected faces filled in over a gap); ``tracks_new`` (tracks whose
first face is on this frame)."""


@dataclass(frozen=True)
class TrackedRead:
    """What a tracking read task needs: the engine settings (its models run on CPU), the
    reference face's embedding (``reference`` selection) and the detector's CPU budget."""

    engine: EngineConfig
    reference: Embedding | None = None
    cpu_budget: float = 1.0

    def components(self) -> list[Component]:
        """The detect step's models (the read task detects in its place)."""
        return step_named("detect").components(self.engine)

    def load_models(self) -> ModelSet:
        """The read task's models (the session start is logged: each read task pays it once)."""
        start = time.perf_counter()
        models = ModelSet.load(self.engine, self.components(), cpu_budget=self.cpu_budget)
        log.info("tracking read task: %s loaded in %.0f ms", "+".join(self.components()),
                 1000 * (time.perf_counter() - start))
        return models


@dataclass
class TrackedFrame:
    """One decoded frame with its final, selected faces and its counters."""

    index: int
    time_s: float
    frame: Frame
    det_full: int = 0
    det_roi: int = 0
    faces: FrameFaces = field(default_factory=FrameFaces.empty)
    faces_found: int = 0
    tracks_new: int = 0
    track_ms: float = 0.0
    """Time the reader spent detecting, tracking and selecting for this frame."""

    @property
    def faces_interpolated(self) -> int:
        return int(self.faces.interpolated.sum())


class SegmentReader:
    """Tracks one segment's decoded frames; ``frames`` yields them in order, faces final."""

    def __init__(self, models: ModelSet, read: TrackedRead, *, fps: float, frame_hw: tuple[int, int]) -> None:
        cfg = read.engine.tracking
        selection = read.engine.selection
        self.detector = TrackingDetector(models.need_detector(), cfg, fps)
        self.tracks = SegmentTracks(cfg, lookback=self.detector.lookback, fps=fps, frame_hw=frame_hw)
        self.selection = TrackSelection(selection.mode, index=selection.index, reference=read.reference,
                                        max_distance=selection.max_distance, order=selection.order)
        self.embedder = models.embedder
        self.buffer: deque[TrackedFrame] = deque()
        self.peak_buffered = 0
        """The most frames held at once (at most ``SegmentTracks.lookahead`` + 1)."""
        self._embeddings: dict[int, Embedding] = {}
        self._seen: set[int] = set()

    def frames(self, decoded: Iterable[DecodedFrame]) -> Iterator[TrackedFrame]:
        for item in decoded:
            start = time.perf_counter()
            full, roi = self.detector.counters.full, self.detector.counters.roi
            step = self.detector.step(item.index, item.frame)
            row = TrackedFrame(item.index, item.time_s, item.frame, det_full=self.detector.counters.full - full,
                               det_roi=self.detector.counters.roi - roi)
            self.buffer.append(row)
            self.peak_buffered = max(self.peak_buffered, len(self.buffer))
            final = self.tracks.add(item.index, step.raw, step.backfill)
            released = list(self._release(final))
            row.track_ms += (time.perf_counter() - start) * 1000.0
            yield from released
        start = time.perf_counter()
        final = self.tracks.finish(self.detector.finish())
        if self.buffer:   # the last frame's re-detections, where a track skipped it
            self.buffer[-1].track_ms += (time.perf_counter() - start) * 1000.0
        yield from self._release(final)

    def _release(self, final: Sequence[tuple[int, FrameFaces]]) -> Iterator[TrackedFrame]:
        for index, faces in final:
            row = self.buffer[0]
            if row.index != index:
                raise RuntimeError(f"tracking: frame {index} is final but frame {row.index} is the oldest held")
            embeddings = self._embed(faces, index) if self.selection.mode == "reference" else None
            chosen = self.selection.choose(faces, live=self.tracks.live(index), embeddings=embeddings)
            fresh = set(faces.track_id.tolist()) - self._seen
            self._seen |= fresh
            row.faces, row.faces_found, row.tracks_new = faces.take(np.flatnonzero(chosen)), len(faces), len(fresh)
            self.buffer.popleft()
            yield row

    def _embed(self, faces: FrameFaces, index: int) -> dict[int, Embedding]:
        """Embeddings of this frame's tracks not embedded yet: each from its best-scored
        detection among the frames still held."""
        held = {row.index: row.frame for row in self.buffer}
        for tid in faces.track_id.tolist():
            if tid in self._embeddings or self.embedder is None:
                continue
            best = self.tracks.best_detection(tid, since=index)
            if best is not None and best[0] in held:
                embedding = identity.embed_faces(self.embedder, held[best[0]], best[1].to_faces())[0].embedding
                if embedding is not None:
                    self._embeddings[tid] = embedding
        return self._embeddings


def faces_of(faces: Sequence[FrameFaces], source_ids: Sequence[str]) -> FaceBatch:
    """One FaceBatch of several frames' tracked faces (frame r holds ``faces[r]``, its source
    ``source_ids[r]``)."""
    counts = [len(f) for f in faces]
    if not sum(counts):
        return FaceBatch.empty()
    rows = np.repeat(np.arange(len(faces)), counts)
    return FaceBatch(rows, np.concatenate([f.bbox_xyxy for f in faces]), np.concatenate([f.landmarks_5 for f in faces]),
                     np.clip(np.concatenate([f.score for f in faces]), 0.0, 1.0),
                     np.asarray([source_ids[int(r)] for r in rows], dtype=np.object_),
                     np.concatenate([f.track_id for f in faces]))


def face_columns(faces: Sequence[FrameFaces], source_id: str) -> dict[str, np.ndarray]:
    """The :data:`READ_FACE_COLUMNS` of one block (row r holds ``faces[r]``)."""
    columns = faces_of(faces, [source_id] * len(faces)).to_columns(len(faces))
    return {name: columns[name] for name in READ_FACE_COLUMNS}
