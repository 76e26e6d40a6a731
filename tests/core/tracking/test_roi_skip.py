"""Skipping the crop of a confident, slow track on every other frame (offline), and what keeps
every visible face detected or interpolated (the real SCRFD on a shared photo)."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.redetect import TrackingDetector, merge
from fusion_ray.core.tracking.roi_skip import predicted_motion, skippable
from fusion_ray.core.tracking.tracks import TrackPrediction, track_segment
from tests.core.clips import sliding_face

EYES = np.asarray([[100, 100], [140, 100], [120, 120], [105, 140], [135, 140]], np.float64)


def prediction(track_id=0, dx=0.0, x=0.0, misses=0, score=0.9, settled=True):
    landmarks = EYES + [x + dx, 0]
    box = np.asarray([80 + x + dx, 70, 160 + x + dx, 170], np.float64)
    return TrackPrediction(track_id, box, landmarks, misses, score, settled)


def test_predicted_motion_is_the_largest_point_move_in_eye_distances():
    assert predicted_motion(prediction(dx=4.0), prediction()) == pytest.approx(0.1)


@pytest.mark.parametrize("now,skipped_last,expected", [
    ([prediction(dx=2.0)], set(), {0}),                                    # slow, confident, alone
    ([prediction(dx=2.0)], {0}, set()),                                    # skipped the previous frame
    ([prediction(dx=6.0)], set(), set()),                                  # too fast (0.15 eye distances)
    ([prediction(dx=2.0, score=0.7)], set(), set()),                       # last score too low
    ([prediction(dx=2.0, misses=1)], set(), set()),                        # not seen on the previous frame
    ([prediction(dx=2.0, settled=False)], set(), set()),                   # no velocity yet
    ([prediction(dx=2.0), prediction(1, x=110.0)], set(), set()),          # another face near its crop
    ([prediction(dx=2.0), prediction(1, x=400.0)], set(), {0, 1}),         # far apart
])
def test_skippable(now, skipped_last, expected):
    last = {p.track_id: prediction(p.track_id, x=400.0 if p.track_id else 0.0) for p in now}
    assert skippable(now, last, skipped_last, TrackingConfig()) == expected


def test_skipping_turns_off_with_zero_motion_or_no_gap_filling():
    now, last = [prediction(dx=1.0)], {0: prediction()}
    assert skippable(now, last, set(), TrackingConfig(roi_skip_motion=0.0)) == set()
    assert skippable(now, last, set(), TrackingConfig(max_gap=0)) == set()



@pytest.fixture(scope="module")
def still(images_dir):
    """12 frames of obama.jpg's face, drifting 1 px a frame (0.02 eye distances)."""
    return sliding_face(images_dir, start_x=200, step_px=1)


def run(detector, frames, cfg, **kwargs):
    tracking = TrackingDetector(detector, cfg, **kwargs)
    steps = [tracking.step(f, frame) for f, frame in enumerate(frames)]
    raw = [s.raw for s in steps]
    for backfill in [*(s.backfill for s in steps), tracking.finish()]:
        for idx, faces in backfill.items():
            raw[idx] = merge(raw[idx], faces)
    return tracking, steps, raw


def test_a_still_face_skips_every_other_crop_and_is_interpolated_there(detector, still):
    cfg = TrackingConfig(full_every=50)
    tracking, steps, raw = run(detector, still, cfg)
    found = [len(s.raw) for s in steps]
    assert found[:2] == [1, 1] and 0 in found and all(a or b for a, b in zip(found, found[1:], strict=False))
    assert tracking.counters.skipped == found.count(0) >= 4 and tracking.counters.full == 1
    assert tracking.counters.roi + tracking.counters.skipped == len(still) - 1
    tracked = track_segment(raw, cfg)
    assert [f.track_id.tolist() for f in tracked] == [[0]] * len(still)    # no frame without its face
    assert [bool(f.interpolated[0]) for f in tracked] == [n == 0 for n in found]
    off = run(detector, still, cfg.model_copy(update={"roi_skip_motion": 0.0}))
    assert off[0].counters.skipped == 0 and off[0].counters.roi == len(still) - 1
    exact = track_segment(off[2], cfg)
    eye = np.linalg.norm(EYES[1] - EYES[0])
    assert max(np.abs(a.landmarks_5 - b.landmarks_5).max() for a, b in zip(tracked, exact, strict=True)) < 0.1 * eye


def test_live_tracking_never_skips(detector, still):
    tracking, steps, _ = run(detector, still, TrackingConfig(full_every=50), lookback=False)
    assert tracking.counters.skipped == 0 and all(len(s.raw) == 1 for s in steps)


def test_a_face_hidden_after_a_skipped_frame_is_re_detected_on_that_frame(detector, still):
    cfg = TrackingConfig(full_every=50)
    tracking, steps, _ = run(detector, still[:6], cfg)
    skipped = [f for f, s in enumerate(steps) if not len(s.raw)]
    assert skipped
    k = skipped[0]
    frames = [*still[:k + 1], np.full_like(still[0], 110), *still[k + 2:k + 5]]
    tracking, steps, raw = run(detector, frames, cfg)
    assert not len(steps[k].raw) and not len(steps[k + 1].raw)         # skipped, then hidden
    assert sorted(steps[k + 1].backfill) == [k] and len(raw[k]) == 1    # caught up on the skipped frame
    assert tracking.counters.reasons == {"first": 1, "missed": 1, "lost": 1}   # then searched as a lost face
    tracked = track_segment(raw, cfg)
    assert [f.track_id.tolist() for f in tracked] == [[0]] * len(frames)


def test_a_skipped_last_frame_is_re_detected_when_the_segment_ends(detector, still):
    cfg = TrackingConfig(full_every=50)
    tracking = TrackingDetector(detector, cfg)
    steps = [tracking.step(f, frame) for f, frame in enumerate(still)]
    last = next(n for n in range(len(still), 0, -1) if not len(steps[n - 1].raw))
    tracking = TrackingDetector(detector, cfg)
    for f, frame in enumerate(still[:last]):
        tracking.step(f, frame)
    assert list(tracking.finish()) == [last - 1] and tracking.finish() == {}
