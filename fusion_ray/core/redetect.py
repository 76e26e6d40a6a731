"""Cheap re-detection between full-frame detections.

Between full-frame detections each live track is re-detected on a square crop around its
predicted box (the box's longest side times ``roi_growth``, at least ``roi_canvas`` pixels:
the detector's cost is set by its canvas, so a small face gets more context for free), run
at a ``roi_canvas`` x ``roi_canvas`` detector canvas. SCRFD's cost grows with canvas area:
a 160 px canvas costs about a tenth of a 640x384 frame.

A full-frame detection runs (:func:`full_detection_reason`) on a segment's first frame, when
``full_every`` frames have passed since the last one (new faces), on the frame after a track
was lost, and after a re-detected face scored below ``roi_min_score``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from fusion_ray.core.matching import landmark_distance_matrix
from fusion_ray.core.tracking import GATE_GROWTH, FrameFaces, Tracker, TrackPrediction
from fusion_ray.core.tracking_config import TrackingConfig
from fusion_ray.models.detector import ScrfdDetector, nms
from fusion_ray.types import Frame, check_frame

CropBox = tuple[int, int, int, int]
"""Integer crop ``(x1, y1, x2, y2)`` in frame pixels, x2/y2 exclusive."""

FullReason = Literal["first", "every", "lost", "low_score"]


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
    return ScrfdDetector(detector.session, detector.spec,
                         detector.cfg.model_copy(update={"size": canvas, "canvas": "square"}))


def pick_for_track(found: FrameFaces, prediction: TrackPrediction, max_distance: float) -> int | None:
    """Index of the crop's face closest to a track's prediction (within ``max_distance`` eye
    distances), or None: a neighbour's face cut by the crop's edge is not taken for it."""
    if not len(found):
        return None
    dist = landmark_distance_matrix(prediction.landmarks_5[None], found.landmarks_5)[0]
    best = int(np.argmin(dist))
    return best if dist[best] <= max_distance * (1 + GATE_GROWTH * prediction.misses) else None


@dataclass(frozen=True)
class RoiResult:
    """Faces re-detected on crops (frame coordinates), each track's score (0: not found), crops run."""

    faces: FrameFaces
    scores: dict[int, float]
    crops: int


def redetect(frame: Frame, detector: ScrfdDetector, predictions: Sequence[TrackPrediction],
             cfg: TrackingConfig) -> RoiResult:
    """Re-detect each predicted face on its crop with ``detector`` (a small-canvas one).

    Duplicates from overlapping crops are removed (NMS at the detector's IoU).
    """
    check_frame(frame)
    frame_hw = (frame.shape[0], frame.shape[1])
    found: list[FrameFaces] = []
    scores: dict[int, float] = {}
    crops = 0
    for pred in predictions:
        scores[pred.track_id] = 0.0
        crop = roi_for(pred.bbox_xyxy, frame_hw, cfg.roi_growth, cfg.roi_canvas)
        if crop is None:
            continue
        x1, y1, x2, y2 = crop
        crops += 1
        faces = to_frame(FrameFaces.from_faces(detector.detect(frame[y1:y2, x1:x2])), crop)
        best = pick_for_track(faces, pred, cfg.max_landmark_distance)
        if best is not None:
            found.append(faces.take([best]))
            scores[pred.track_id] = float(faces.score[best])
    if not found:
        return RoiResult(FrameFaces.empty(), scores, crops)
    merged = FrameFaces(np.concatenate([f.bbox_xyxy for f in found]), np.concatenate([f.landmarks_5 for f in found]),
                        np.concatenate([f.score for f in found]))
    keep = nms(merged.bbox_xyxy, merged.score, detector.cfg.nms_iou)
    return RoiResult(merged.take(np.sort(keep)), scores, crops)


@dataclass
class DetectionCounters:
    """What the tracking detector ran (for the job report)."""

    full: int = 0
    roi: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


class TrackingDetector:
    """Full-frame or crop re-detection per frame, frames of one segment in order.

    ``step(frame_idx, frame)`` returns the raw detections (give a segment's list of them to
    :func:`~fusion_ray.core.tracking.track_segment` for offline tracking) and the online
    tracker's faces (live streams). ``start_segment()`` makes the next frame a full detection.
    """

    def __init__(self, detector: ScrfdDetector, cfg: TrackingConfig, fps: float = 30.0) -> None:
        self.full_detector = detector
        self.roi_detector = roi_detector(detector, cfg.roi_canvas)
        self.cfg = cfg
        self.fps = fps
        self.counters = DetectionCounters()
        self.start_segment()

    def start_segment(self) -> None:
        self.tracker = Tracker(self.cfg, self.fps)
        self._last_full: int | None = None
        self._low_score = False

    def step(self, frame_idx: int, frame: Frame) -> tuple[FrameFaces, FrameFaces]:
        reason = full_detection_reason(frame_idx, last_full=self._last_full, cfg=self.cfg,
                                       lost=bool(self.tracker.newly_lost), low_score=self._low_score)
        if reason is not None:
            raw = FrameFaces.from_faces(self.full_detector.detect(frame))
            self._last_full = frame_idx
            self._low_score = False
            self.counters.full += 1
            self.counters.reasons[reason] = self.counters.reasons.get(reason, 0) + 1
        else:
            predictions = self.tracker.predictions(frame_idx)
            result = redetect(frame, self.roi_detector, predictions, self.cfg)
            raw = result.faces
            self._low_score = any(0 < s < self.cfg.roi_min_score for s in result.scores.values())
            self.counters.roi += result.crops
        online = self.tracker.update(frame_idx, raw, (frame.shape[0], frame.shape[1]))
        return raw, online
