"""Which tracks may skip their crop re-detection on a frame (offline only).

A video job knows later frames: a face missed on one frame between two detections of its track
is interpolated there (:func:`~fusion_ray.core.tracking.tracks.fill_gaps`), then smoothed with its
neighbours. So a track that is easy to follow may be re-detected every other frame and
interpolated in between. A track skips frame ``f`` (:func:`skippable`) only when all hold:

- it was detected on frame ``f - 1`` (re-detected or fully) and did not skip ``f - 1``: at most
  one frame in two is skipped, and a skipped frame always has a detection on each side;
- it has a velocity (two detections or more) and its last score is at least ``roi_skip_score``;
- its points (5 landmarks and box corners) are predicted to move at most ``roi_skip_motion``
  eye distances from ``f - 1`` to ``f`` (a slow face: the interpolation error is half the
  change of its velocity across the gap);
- its re-detection crop would not touch another track's predicted box: where faces meet or
  cross, every frame is detected, so identities are decided on detections.

The tracking detector treats a skipped track as seen: it is not lost on frame ``f``, and on
frame ``f + 1`` a skipped track not found on its crop makes the whole frame searched at once,
as a track seen on the previous frame would. Full detections keep their schedule.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.matching import eye_distance
from fusion_ray.core.tracking.tracks import TrackPrediction


def predicted_motion(now: TrackPrediction, last: TrackPrediction) -> float:
    """How far a track's points move from its last detection to ``now``, in eye distances (the
    largest of its 5 landmarks and 2 box corners)."""
    a = np.concatenate([last.landmarks_5, np.asarray(last.bbox_xyxy, np.float64).reshape(2, 2)])
    b = np.concatenate([now.landmarks_5, np.asarray(now.bbox_xyxy, np.float64).reshape(2, 2)])
    eye = float(eye_distance(np.asarray(last.landmarks_5, np.float64).reshape(1, 5, 2))[0])
    return float(np.linalg.norm(b - a, axis=-1).max()) / max(eye, 1e-6)


def _touches(crop_of: TrackPrediction, other: TrackPrediction, growth: float) -> bool:
    x1, y1, x2, y2 = (float(v) for v in np.asarray(crop_of.bbox_xyxy).reshape(4))
    half = growth * max(x2 - x1, y2 - y1) / 2
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    ox1, oy1, ox2, oy2 = (float(v) for v in np.asarray(other.bbox_xyxy).reshape(4))
    return ox1 < cx + half and ox2 > cx - half and oy1 < cy + half and oy2 > cy - half


def skippable(now: Sequence[TrackPrediction], last: Mapping[int, TrackPrediction],
              skipped_last: Collection[int], cfg: TrackingConfig) -> set[int]:
    """The tracks that may skip their crop on this frame (see the module docstring).

    ``now``: the live tracks' predictions for this frame; ``last``: their predictions for the
    previous frame (a track detected there is predicted at its detection); ``skipped_last``:
    the tracks that skipped the previous frame.
    """
    if cfg.roi_skip_motion <= 0 or cfg.max_gap < 1:
        return set()
    out = set()
    for pred in now:
        before = last.get(pred.track_id)
        if (before is None or pred.misses != 0 or not pred.settled or pred.track_id in skipped_last
                or pred.last_score < cfg.roi_skip_score):
            continue
        if predicted_motion(pred, before) > cfg.roi_skip_motion:
            continue
        if any(_touches(pred, other, cfg.roi_growth) or _touches(other, pred, cfg.roi_growth)
               for other in now if other.track_id != pred.track_id):
            continue
        out.add(pred.track_id)
    return out
