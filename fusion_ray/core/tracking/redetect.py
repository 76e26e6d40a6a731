"""Cheap re-detection between full-frame detections.

Between full-frame detections each live track is re-detected on a square crop around its
predicted box (the box's longest side times ``roi_growth``, at least ``roi_canvas`` pixels:
the detector's cost is set by its canvas, so a small face gets more context for free), run
at a ``roi_canvas`` x ``roi_canvas`` detector canvas; a frame's crops share that canvas, so
they go to the detector in one batched call where the model allows it. SCRFD's cost grows with
canvas area: on one CPU thread a 192 px canvas takes about 5 ms, a 640x384 frame about 31 ms. A crop that
moves by less than ``roi_hold`` of its side stays where it was, so a still face is re-detected
on the same pixels. Offline, a face found by a full detection is followed back through the
frames since the previous one (:func:`backfill`).

A face seen on the previous frame and not found on its crop (it moved further than the gate,
or it is hidden) makes the tracking detector search the whole frame at once (reason
``missed``), so a visible face is not left out for a frame.

Offline, a confident, slow track away from other faces skips its crop on every other frame and
is interpolated there (:mod:`~fusion_ray.core.tracking.roi_skip`); a skipped frame whose next frame does
not find the face is re-detected after all, and so is a skipped last frame (``finish``).

A full-frame detection runs (:func:`full_detection_reason`) on a segment's first frame, when
``full_every`` frames have passed since the last one (new faces), on the frame after a track
was lost, and after a re-detected face scored below ``roi_min_score``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.matching import iou_matrix, landmark_distance_matrix
from fusion_ray.core.tracking.roi_skip import skippable
from fusion_ray.core.tracking.tracks import (
    NO_TRACK,
    FrameFaces,
    Tracker,
    TrackPrediction,
    gate_scale,
)
from fusion_ray.models.detector import DetectorCanvases, ScrfdDetector, nms
from fusion_ray.models.detector_batch import batch_detector
from fusion_ray.types import Frame, check_frame

CropBox = tuple[int, int, int, int]
"""Integer crop ``(x1, y1, x2, y2)`` in frame pixels, x2/y2 exclusive."""

FullReason = Literal["first", "every", "lost", "low_score", "missed"]


def roi_for(bbox_xyxy: npt.ArrayLike, frame_hw: tuple[int, int], growth: float, canvas: int) -> CropBox | None:
    """The re-detection crop for a predicted box: a square of side max(growth x longest box side,
    canvas) centred on the box, moved inside the frame where it fits, else cut by the frame.
    None when nothing of it lies inside the frame."""
    x1, y1, x2, y2 = (float(v) for v in np.asarray(bbox_xyxy, np.float64).reshape(4))
    height, width = frame_hw
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)) or height <= 0 or width <= 0:
        return None
    side = max(growth * max(x2 - x1, y2 - y1), float(canvas))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    if x2 <= 0 or y2 <= 0 or x1 >= width or y1 >= height:
        return None

    def place(centre: float, limit: int) -> tuple[int, int]:
        lo = centre - side / 2
        if side <= limit:
            lo = min(max(lo, 0.0), limit - side)
        start, stop = max(0, round(lo)), min(limit, round(lo + side))
        return start, stop

    left, right = place(cx, width)
    top, bottom = place(cy, height)
    if right - left < 2 or bottom - top < 2:
        return None
    return left, top, right, bottom


def hold_roi(previous: CropBox | None, proposed: CropBox, tolerance: float) -> CropBox:
    """The previous crop while the proposed one is within ``tolerance`` of its side on every
    edge, else the proposed one: a still face then gives the detector the very same pixels,
    so the crop's own movement adds no jitter."""
    if previous is None:
        return proposed
    side = max(proposed[2] - proposed[0], proposed[3] - proposed[1])
    moved = max(abs(a - b) for a, b in zip(previous, proposed, strict=True))
    return previous if moved <= tolerance * side else proposed


def to_frame(faces: FrameFaces, crop: CropBox) -> FrameFaces:
    """Faces detected on a crop, in frame coordinates."""
    offset = np.asarray([crop[0], crop[1]], np.float32)
    return FrameFaces(faces.bbox_xyxy + np.tile(offset, 2), faces.landmarks_5 + offset, faces.score,
                      faces.track_id, faces.interpolated)


def full_detection_reason(frame_idx: int, *, last_full: int | None, cfg: TrackingConfig,
                          lost: bool, low_score: bool) -> FullReason | None:
    """Why frame ``frame_idx`` needs a full-frame detection, or None when re-detection is enough.

    ``last_full``: the last frame that had one in this segment (None: this is its first frame);
    ``lost``: a track was lost on the previous frame; ``low_score``: a face re-detected on the
    previous frame scored below ``cfg.roi_min_score``.
    """
    if last_full is None:
        return "first"
    if frame_idx - last_full >= cfg.full_every:
        return "every"
    if lost:
        return "lost"
    if low_score:
        return "low_score"
    return None


def roi_detector(detector: ScrfdDetector, canvas: int) -> ScrfdDetector:
    """A detector over the same session and model that runs at a square ``canvas``."""
    return DetectorCanvases(detector).get(canvas, square=True)


def pick_for_track(found: FrameFaces, prediction: TrackPrediction, max_distance: float) -> int | None:
    """Index of the crop's face closest to a track's prediction (within ``max_distance`` eye
    distances), or None: a neighbour's face cut by the crop's edge is not taken for it."""
    if not len(found):
        return None
    dist = landmark_distance_matrix(prediction.landmarks_5[None], found.landmarks_5)[0]
    best = int(np.argmin(dist))
    return best if dist[best] <= max_distance * gate_scale(prediction.misses, prediction.settled) else None


@dataclass(frozen=True)
class RoiResult:
    """Faces re-detected on crops (frame coordinates), each track's score (0: not found) and
    crop box, and the number of crops run."""

    faces: FrameFaces
    scores: dict[int, float]
    crops: int
    boxes: dict[int, CropBox] = field(default_factory=dict)


def redetect(frame: Frame, detector: ScrfdDetector, predictions: Sequence[TrackPrediction],
             cfg: TrackingConfig, previous: Mapping[int, CropBox] | None = None) -> RoiResult:
    """Re-detect each predicted face on its crop with ``detector`` (a square small-canvas one).

    Every crop is placed on the same canvas, so with a batch-dynamic detector
    (:func:`~fusion_ray.models.detector_batch.batch_detector`) all of a frame's crops go in one
    call, with the faces one call per crop finds. ``previous``: each track's last crop, kept
    while it still fits (:func:`hold_roi`). Duplicates from overlapping crops are removed (NMS at
    the detector's IoU).
    """
    check_frame(frame)
    frame_hw = (frame.shape[0], frame.shape[1])
    scores: dict[int, float] = {}
    boxes: dict[int, CropBox] = {}
    wanted: list[tuple[TrackPrediction, CropBox]] = []
    for pred in predictions:
        scores[pred.track_id] = 0.0
        proposed = roi_for(pred.bbox_xyxy, frame_hw, cfg.roi_growth, cfg.roi_canvas)
        if proposed is None:
            continue
        crop = hold_roi((previous or {}).get(pred.track_id), proposed, cfg.roi_hold)
        boxes[pred.track_id] = crop
        wanted.append((pred, crop))
    detected = detector.detect_batch([frame[y1:y2, x1:x2] for _, (x1, y1, x2, y2) in wanted])
    found: list[FrameFaces] = []
    for (pred, crop), crop_faces in zip(wanted, detected, strict=True):
        faces = to_frame(FrameFaces.from_faces(crop_faces), crop)
        best = pick_for_track(faces, pred, cfg.max_landmark_distance)
        if best is not None:
            found.append(faces.take([best]))
            scores[pred.track_id] = float(faces.score[best])
    if not found:
        return RoiResult(FrameFaces.empty(), scores, len(wanted), boxes)
    merged = FrameFaces(np.concatenate([f.bbox_xyxy for f in found]), np.concatenate([f.landmarks_5 for f in found]),
                        np.concatenate([f.score for f in found]))
    keep = nms(merged.bbox_xyxy, merged.score, detector.cfg.nms_iou)
    return RoiResult(merged.take(np.sort(keep)), scores, len(wanted), boxes)


def backfill(history: Sequence[tuple[int, Frame, FrameFaces]], face: FrameFaces, detector: ScrfdDetector,
             cfg: TrackingConfig) -> tuple[dict[int, FrameFaces], int]:
    """Follow a face first found by a full detection back through the frames before it.

    ``history``: (frame index, frame, faces already found there), oldest first; ``face``: the
    new face (one row). Each earlier frame, newest first, is re-detected on a crop around the
    face's position extrapolated at constant velocity, until the face is not found or was
    already found there. Returns frame index -> the face found there, and the crops run
    (offline only: a face entering between two full detections then has landmarks from its
    first frame on).
    """
    if len(face) != 1:
        raise ValueError(f"expected one face to follow back, got {len(face)}")
    found: dict[int, FrameFaces] = {}
    points = face.points()[0]
    velocity = np.zeros_like(points)
    crops = 0
    for frame_idx, frame, known in reversed(history):
        guess = points + velocity
        box = np.concatenate([np.minimum(guess[5], guess[6]), np.maximum(guess[5], guess[6])])
        result = redetect(frame, detector, [TrackPrediction(NO_TRACK, box, guess[:5], 0, float(face.score[0]))], cfg)
        crops += result.crops
        if not len(result.faces):
            break
        if len(known) and float(iou_matrix(result.faces.bbox_xyxy, known.bbox_xyxy).max()) > 0.5:
            break
        found[frame_idx] = result.faces
        new_points = result.faces.points()[0]
        velocity, points = new_points - points, new_points
    return found, crops


def merge(a: FrameFaces, b: FrameFaces) -> FrameFaces:
    """The faces of both (one frame)."""
    return FrameFaces(np.concatenate([a.bbox_xyxy, b.bbox_xyxy]), np.concatenate([a.landmarks_5, b.landmarks_5]),
                      np.concatenate([a.score, b.score]), np.concatenate([a.track_id, b.track_id]),
                      np.concatenate([a.interpolated, b.interpolated]))


@dataclass
class DetectionCounters:
    """What the tracking detector ran (for the job report)."""

    full: int = 0
    roi: int = 0
    skipped: int = 0
    """Crops not run: a confident, slow track between two detections (:mod:`~fusion_ray.core.tracking.roi_skip`)."""
    backfilled: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    """One frame of the tracking detector.

    ``raw``: this frame's detections; ``online``: the online tracker's faces (ids, One Euro,
    held faces); ``backfill``: faces of new tracks found on earlier frames (frame index ->
    faces to add to that frame's raw detections before :func:`track_segment`).
    """

    raw: FrameFaces
    online: FrameFaces
    backfill: dict[int, FrameFaces]


class TrackingDetector:
    """Full-frame or crop re-detection per frame, frames of one segment in order.

    With ``batch`` (the default) the detector's batch-dynamic copy runs, where one can be made
    (:func:`~fusion_ray.models.detector_batch.batch_detector`), and each frame's crops go in one
    call. Offline (``lookback``), a confident, slow track away from other faces skips its crop
    on every other frame (:mod:`~fusion_ray.core.tracking.roi_skip`; ``cfg.roi_skip_motion`` 0 turns it
    off). ``step(frame_idx, frame)`` gives the raw detections (a segment's raw detections, with the
    backfilled faces added, go to :func:`~fusion_ray.core.tracking.tracks.track_segment` for offline
    tracking) and the online tracker's faces (live streams). With ``lookback`` (offline; by
    default ``cfg.lookback``; live streams pass False), the last ``full_every`` frames are kept so that a face that entered since the last full
    detection is followed back (:func:`backfill`). ``start_segment()`` starts a new segment, and
    ``finish()`` ends one (its faces go into the segment's raw detections like a backfill).
    """

    def __init__(self, detector: ScrfdDetector, cfg: TrackingConfig, fps: float = 30.0, *,
                 lookback: bool | None = None, batch: bool = True) -> None:
        # one session for both: the batch-dynamic copy gives a single frame's faces unchanged
        base = batch_detector(detector) if batch else detector
        self.full_detector = base
        self.roi_detector = roi_detector(base, cfg.roi_canvas)
        self.cfg = cfg
        self.fps = fps
        self.lookback = cfg.lookback if lookback is None else lookback
        self.counters = DetectionCounters()
        self.start_segment()

    @property
    def crops(self) -> dict[int, CropBox]:
        """Each live track's last re-detection crop."""
        return dict(self._crops)

    def start_segment(self) -> None:
        self.tracker = Tracker(self.cfg, self.fps)
        self._last_full: int | None = None
        self._low_score = False
        self._known: set[int] = set()
        self._crops: dict[int, CropBox] = {}
        self._skipped: set[int] = set()
        self._skip_predictions: list[TrackPrediction] = []
        self._lost_skipped = False
        self._history: deque[tuple[int, Frame, FrameFaces]] = deque(maxlen=self.cfg.full_every)

    def step(self, frame_idx: int, frame: Frame) -> StepResult:
        # a track that skipped its crop on the previous frame was not lost there
        lost = bool(set(self.tracker.newly_lost) - self._skipped) or self._lost_skipped
        reason = full_detection_reason(frame_idx, last_full=self._last_full, cfg=self.cfg,
                                       lost=lost, low_score=self._low_score)
        skip: set[int] = set()
        skip_predictions: list[TrackPrediction] = []
        if reason is None:
            predictions = self.tracker.predictions(frame_idx)
            if self.lookback:
                last = {p.track_id: p for p in self.tracker.predictions(frame_idx - 1)}
                skip = skippable(predictions, last, self._skipped, self.cfg)
            result = redetect(frame, self.roi_detector, [p for p in predictions if p.track_id not in skip],
                              self.cfg, self._crops)
            self._crops.update(result.boxes)
            raw = result.faces
            self._low_score = any(0 < s < self.cfg.roi_min_score for s in result.scores.values())
            self.counters.roi += result.crops
            # A face seen on the previous frame (or skipped there) and not found on its crop (it
            # moved further than the gate, or it is hidden): the whole frame is searched now.
            if any(result.scores[p.track_id] == 0 for p in predictions
                   if (p.misses == 0 or p.track_id in self._skipped) and p.track_id in result.boxes):
                reason, skip = "missed", set()
            self.counters.skipped += len(skip)
            skip_predictions = [p for p in predictions if p.track_id in skip]
        if reason is not None:
            raw = FrameFaces.from_faces(self.full_detector.detect(frame))
            self._last_full = frame_idx
            self._low_score = False
            self.counters.full += 1
            self.counters.reasons[reason] = self.counters.reasons.get(reason, 0) + 1
        online = self.tracker.update(frame_idx, raw, (frame.shape[0], frame.shape[1]))
        added = self._backfill(online, raw) if self.lookback and reason not in (None, "first") else {}
        for idx, faces in self._catch_up(frame_idx, online).items():
            added[idx] = merge(added[idx], faces) if idx in added else faces
        self._known.update(online.track_id.tolist())
        live = {p.track_id for p in self.tracker.predictions(frame_idx + 1)}
        self._crops = {tid: crop for tid, crop in self._crops.items() if tid in live}
        self._skipped, self._skip_predictions = skip & live, skip_predictions
        if self.lookback:
            self._history.append((frame_idx, frame, raw))
        return StepResult(raw, online, added)

    def finish(self) -> dict[int, FrameFaces]:
        """The segment ended: tracks that skipped its last frame are re-detected there (nothing
        after it interpolates them). Returns frame index -> faces to add, as ``backfill``."""
        if not self._skipped or not self._history:
            return {}
        idx, frame, raw = self._history[-1]
        result = redetect(frame, self.roi_detector, self._skip_predictions, self.cfg, self._crops)
        self.counters.roi += result.crops
        self._skipped, self._skip_predictions = set(), []
        if not len(result.faces):
            return {}
        self._history[-1] = (idx, frame, merge(raw, result.faces))
        return {idx: result.faces}

    def _catch_up(self, frame_idx: int, online: FrameFaces) -> dict[int, FrameFaces]:
        """A track that skipped the previous frame and is not found on this one (hidden, or it
        turned or sped up) gets its crop on the previous frame now, so that frame is not left
        in a longer gap; and the next frame has a full detection, as after a lost track."""
        missing = self._skipped - set(online.track_id[~online.interpolated].tolist())
        self._lost_skipped = bool(missing)
        if not missing or not self._history or self._history[-1][0] != frame_idx - 1:
            return {}
        idx, frame, raw = self._history[-1]
        result = redetect(frame, self.roi_detector, [p for p in self._skip_predictions if p.track_id in missing],
                          self.cfg, self._crops)
        self.counters.roi += result.crops
        if not len(result.faces):
            return {}
        self._history[-1] = (idx, frame, merge(raw, result.faces))
        return {idx: result.faces}

    def _backfill(self, online: FrameFaces, raw: FrameFaces) -> dict[int, FrameFaces]:
        added: dict[int, FrameFaces] = {}
        for row in np.flatnonzero(~np.isin(online.track_id, list(self._known)) & ~online.interpolated):
            follow = raw.take([int(np.argmin(np.abs(raw.bbox_xyxy - online.bbox_xyxy[row]).sum(axis=1)))])
            found, crops = backfill(list(self._history), follow, self.roi_detector, self.cfg)
            self.counters.roi += crops
            self.counters.backfilled += len(found)
            for idx, faces in found.items():
                added[idx] = merge(added[idx], faces) if idx in added else faces
        self._history = deque(((i, f, merge(r, added[i]) if i in added else r) for i, f, r in self._history),
                              maxlen=self.cfg.full_every)
        return added
