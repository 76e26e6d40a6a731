"""Settings of the face tracker (pydantic; wired into the engine config as ``tracking``).

Units: frames for counts, eye distances (the distance between the two eye landmarks of a
face) for landmark distances, Hz (at the clip's frame rate) for the One Euro filter.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TrackingConfig(BaseModel):
    """How faces are linked, re-detected, gap-filled and smoothed through a video."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Track faces through videos (off: detect every frame).")
    full_every: int = Field(
        default=10, ge=1, description="N: a full-frame detection at least every N frames (catches new faces); "
        "in between each tracked face is re-detected on a crop around its predicted position.")
    roi_canvas: int = Field(default=192, ge=64, le=640, description="Detector canvas of a re-detection crop "
                            "(square, a multiple of 32).")
    roi_growth: float = Field(default=1.6, ge=1.2, le=4.0,
                              description="Side of a re-detection crop over the longest side of the predicted box.")
    roi_hold: float = Field(default=0.05, ge=0.0, le=0.5, description="A track's crop stays where it is while "
                            "the new one would move by at most this fraction of its side (a still face then "
                            "gives the detector the same pixels: no jitter from the crop moving).")
    roi_min_score: float = Field(default=0.6, gt=0.0, lt=1.0, description="A re-detected face scoring below this "
                                 "asks for a full-frame detection on the next frame.")
    roi_skip_motion: float = Field(
        default=0.1, ge=0.0, le=1.0, description="Offline: a track seen on the previous frame, scoring at least "
        "roi_skip_score, away from other faces and predicted to move at most this many eye distances skips its "
        "crop on every other frame (interpolated there from its detections on both sides); 0 turns this off.")
    roi_skip_score: float = Field(default=0.75, gt=0.0, lt=1.0,
                                  description="Smallest last score of a track that may skip a crop.")
    max_gap: int = Field(default=3, ge=0, description="G: a face missed for at most G frames between two "
                         "detections of its track is interpolated (offline) or held (online).")
    lookback: bool = Field(default=True, description="Offline: a face found by a full detection is followed back "
                           "on crops through the frames since the previous one (it entered in between).")
    keep_lost: int = Field(default=30, ge=0, description="Frames an unmatched track is kept (and predicted) so "
                           "that a face hidden or crossed by another one gets its id back.")
    max_landmark_distance: float = Field(
        default=1.0, gt=0.0, description="Largest mean landmark distance from a track's prediction to a "
        "detection that may match it, in eye distances (it grows with the frames the track was lost).")
    min_iou: float = Field(default=0.05, ge=0.0, lt=1.0,
                           description="Smallest box IoU between a track's prediction and a detection it matches.")
    smoothing: Literal["auto", "one_euro", "window", "off"] = Field(
        default="auto", description="Landmark smoothing along each track: 'auto' uses the centred window "
        "offline (video jobs, later frames known) and the One Euro filter online (live streams).")
    one_euro_min_cutoff: float = Field(default=1.0, gt=0.0, description="One Euro minimum cutoff (Hz): lower "
                                       "removes more jitter at rest.")
    one_euro_beta: float = Field(default=10.0, ge=0.0, description="One Euro speed coefficient (per eye distance "
                                 "per second): higher follows fast motion with less lag.")
    one_euro_d_cutoff: float = Field(default=1.0, gt=0.0, description="One Euro cutoff of the speed estimate (Hz).")
    window_radius: int = Field(default=2, ge=1, le=15, description="Centred window: frames on each side.")
    window_order: int = Field(default=1, ge=0, le=2, description="Centred window: degree of the local "
                              "polynomial fit (1: a moving average inside, unbiased for steady motion at the ends).")

    @model_validator(mode="after")
    def _canvas_multiple_of_32(self) -> TrackingConfig:
        if self.roi_canvas % 32:
            raise ValueError(f"roi_canvas must be a multiple of 32, got {self.roi_canvas}")
        return self
