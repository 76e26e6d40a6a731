"""A live stream's faces between full detections (degradation level 3), for every host.

The stream's online :class:`~fusion_ray.core.tracking.tracks.Tracker` predicts where each face is;
the host re-detects each one on a small crop around its prediction
(:func:`fusion_ray.core.tracking.redetect.redetect`: in-process, or on the Serve detector deployment)
and hands the result back here. A face not found near its prediction (it moved fast, turned,
or the scene cut) makes the host detect on the whole frame instead: a face is never pasted
where it no longer is. Only the faces seen at the stream's last update are followed: a track
the last detection lost (the face left, the scene cut) is left to the next full detection
instead of making every frame until it expires a failed crop plus a full detection, and a
face the tracker only holds at its prediction is never pasted.
"""

from __future__ import annotations

import numpy as np

from fusion_ray.config import TrackingConfig
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.core.tracking.redetect import CropBox, RoiResult
from fusion_ray.core.tracking.tracks import FrameFaces, Tracker, TrackPrediction


class StreamFollower:
    """One stream's tracker and its faces' last crops."""

    def __init__(self, cfg: TrackingConfig) -> None:
        self.tracker = Tracker(cfg)
        self.crops: dict[int, CropBox] = {}
        self._last_seq: int | None = None

    def predictions(self, seq: int, follow: bool) -> list[TrackPrediction]:
        """The faces to re-detect on crops at frame ``seq``: those seen at the last update. Empty
        when the frame needs a full detection (``follow`` False: the plan asks for one, or no
        face is tracked yet)."""
        if not follow or self._last_seq is None:
            return []
        return [p for p in self.tracker.predictions(seq) if seq - 1 - p.misses == self._last_seq]

    def followed(self, seq: int, roi: RoiResult, frame_hw: tuple[int, int]) -> FaceBatch | None:
        """The re-detected faces with their track ids, or None when one was not found (detect
        the whole frame then)."""
        if any(score == 0.0 for score in roi.scores.values()):
            return None
        self.crops = dict(roi.boxes)
        tracked = self.tracker.update(seq, roi.faces, frame_hw)
        self._last_seq = seq
        found = tracked.take(np.flatnonzero(~tracked.interpolated))  # not the faces it only holds
        return FaceBatch.one_frame(found.landmarks_5, found.bbox_xyxy, found.score, found.track_id)

    def detected(self, seq: int, faces: FaceBatch, frame_hw: tuple[int, int]) -> None:
        """A full detection's selected faces: the tracker follows them from here."""
        self.tracker.update(seq, FrameFaces(faces.bbox_xyxy, faces.landmarks_5, faces.score), frame_hw)
        self.crops = {}
        self._last_seq = seq
