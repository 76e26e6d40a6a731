"""Re-detection crops, the full-detection policy, and ROI re-detection with the real SCRFD."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.redetect import (
    TrackingDetector,
    full_detection_reason,
    hold_roi,
    merge,
    redetect,
    roi_detector,
    roi_for,
    to_frame,
)
from fusion_ray.core.tracking.tracks import FrameFaces, Tracker, track_segment
from tests.core.clips import sliding_face


@pytest.mark.parametrize("box,frame_hw,growth,canvas,expected", [
    ([300, 150, 340, 200], (360, 640), 2.0, 64, (270, 125, 370, 225)),   # 2 x the longest side (50)
    ([300, 150, 340, 200], (360, 640), 2.0, 160, (240, 95, 400, 255)),   # at least the canvas
    ([0, 10, 40, 50], (360, 640), 2.0, 64, (0, 0, 80, 80)),              # moved inside the frame
    ([600, 300, 640, 360], (360, 640), 2.0, 64, (520, 240, 640, 360)),
    ([100, 50, 300, 300], (360, 640), 2.0, 64, (0, 0, 500, 360)),        # taller than the frame: cut
    ([700, 100, 760, 160], (360, 640), 2.0, 64, None),                   # outside the frame
    ([10, -80, 50, -20], (360, 640), 2.0, 64, None),
])
def test_roi_for(box, frame_hw, growth, canvas, expected):
    assert roi_for(box, frame_hw, growth, canvas) == expected


def test_to_frame_moves_crop_faces_by_the_crop_origin():
    faces = FrameFaces(np.asarray([[1, 2, 3, 4]], np.float32), np.ones((1, 5, 2), np.float32), np.asarray([0.9], np.float32))
    moved = to_frame(faces, (10, 20, 50, 60))
    assert moved.bbox_xyxy.tolist() == [[11, 22, 13, 24]] and np.allclose(moved.landmarks_5, [[11, 21]] * 5)


CFG = TrackingConfig(full_every=5)


@pytest.mark.parametrize("frame_idx,last_full,lost,low,expected", [
    (0, None, False, False, "first"),
    (7, None, True, True, "first"),
    (5, 0, False, False, "every"),
    (4, 0, False, False, None),
    (3, 0, True, False, "lost"),
    (3, 0, False, True, "low_score"),
    (12, 10, False, False, None),
])
def test_full_detection_reason(frame_idx, last_full, lost, low, expected):
    assert full_detection_reason(frame_idx, last_full=last_full, cfg=CFG, lost=lost, low_score=low) == expected



@pytest.fixture(scope="module")
def clip(images_dir):
    """A 640x360 clip: obama.jpg's face scaled down, sliding 6 px per frame."""
    return sliding_face(images_dir, start_x=150, step_px=6)


def test_roi_detector_keeps_session_and_uses_a_square_canvas(detector):
    small = roi_detector(detector, 160)
    assert small.session is detector.session and small.cfg.size == 160 and small.cfg.canvas == "square"


def test_redetect_on_a_crop_finds_the_face_where_full_detection_does(detector, clip):
    cfg = TrackingConfig()
    tracker = Tracker(cfg)
    tracker.update(0, FrameFaces.from_faces(detector.detect(clip[0])))
    full = FrameFaces.from_faces(detector.detect(clip[1]))
    result = redetect(clip[1], roi_detector(detector, cfg.roi_canvas), tracker.predictions(1), cfg)
    assert result.crops == 1 and len(result.faces) == 1 and result.scores[0] > cfg.roi_min_score
    eye = np.linalg.norm(full.landmarks_5[0, 1] - full.landmarks_5[0, 0])
    assert np.abs(result.faces.landmarks_5[0] - full.landmarks_5[0]).max() < 0.15 * eye


def test_tracking_detector_runs_full_detection_every_n_frames_and_crops_between(detector, clip):
    tracking = TrackingDetector(detector, TrackingConfig(full_every=5))
    ids = []
    for f, frame in enumerate(clip):
        step = tracking.step(f, frame)
        assert len(step.raw) == 1 and not step.backfill
        ids.append(step.online.track_id.tolist())
    assert ids == [[0]] * len(clip)
    assert tracking.counters.full == 3 and tracking.counters.roi == len(clip) - 3   # frames 0, 5, 10
    assert tracking.counters.reasons == {"first": 1, "every": 2}


def test_tracking_detector_runs_full_detection_after_a_face_is_lost(detector, clip):
    tracking = TrackingDetector(detector, TrackingConfig(full_every=50))
    hidden = np.full_like(clip[3], 110)
    for f, frame in enumerate(clip[:6]):
        tracking.step(f, hidden if f == 3 else frame)
    # 0: first; 3: the crop finds nothing, so the whole frame is searched at once (nothing
    # there: the face is lost); 4: a full detection finds it again.
    assert tracking.counters.reasons == {"first": 1, "missed": 1, "lost": 1}
    assert tracking.counters.roi == 4


@pytest.mark.parametrize("previous,proposed,tolerance,expected", [
    (None, (10, 10, 110, 110), 0.05, (10, 10, 110, 110)),
    ((10, 10, 110, 110), (13, 12, 113, 112), 0.05, (10, 10, 110, 110)),   # moved 3 px <= 5% of 100
    ((10, 10, 110, 110), (16, 10, 116, 110), 0.05, (16, 10, 116, 110)),   # moved 6 px
    ((10, 10, 110, 110), (10, 10, 120, 120), 0.05, (10, 10, 120, 120)),   # grew
    ((10, 10, 110, 110), (11, 10, 111, 110), 0.0, (11, 10, 111, 110)),
])
def test_hold_roi(previous, proposed, tolerance, expected):
    assert hold_roi(previous, proposed, tolerance) == expected


def test_a_crop_stays_while_the_face_moves_less_than_the_hold(detector, clip):
    # The face slides 6 px a frame; its crop (about 210 px) holds for moves up to 5% (10 px).
    crops: dict[float, list] = {}
    for hold in (0.05, 0.0):
        tracking = TrackingDetector(detector, TrackingConfig(full_every=50, roi_hold=hold))
        crops[hold] = []
        for f in range(5):
            tracking.step(f, clip[f])
            crops[hold].append(tracking.crops.get(0))
    held = crops[0.05]
    assert held[0] is None and held[3] == held[2] and held[4] != held[3]
    assert crops[0.0][3] != crops[0.0][2]


def test_a_face_entering_between_full_detections_is_followed_back(detector, clip):
    empty = np.full_like(clip[0], 110)
    frames = [empty] * 3 + clip[3:8]       # the face appears on frame 3; full detections on 0 and 5
    tracking = TrackingDetector(detector, TrackingConfig(full_every=5))
    steps = [tracking.step(f, frame) for f, frame in enumerate(frames)]
    assert [len(s.raw) for s in steps] == [0, 0, 0, 0, 0, 1, 1, 1]
    assert sorted(steps[5].backfill) == [3, 4] and tracking.counters.backfilled == 2
    raw = [s.raw for s in steps]
    for idx, faces in steps[5].backfill.items():
        raw[idx] = merge(raw[idx], faces)
    tracked = track_segment(raw, TrackingConfig())
    assert [f.track_id.tolist() for f in tracked] == [[], [], [], [0], [0], [0], [0], [0]]
    live = TrackingDetector(detector, TrackingConfig(full_every=5), lookback=False)
    assert not any(live.step(f, frame).backfill for f, frame in enumerate(frames))
