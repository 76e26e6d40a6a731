"""A frame's crops re-detected in one batched call give the faces one call per crop gives
(the real SCRFD, on the shared photos)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.redetect import TrackingDetector, redetect, roi_detector
from fusion_ray.core.tracking.tracks import FrameFaces, Tracker
from fusion_ray.imageio import read_image
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.detector_batch import batch_detector

NOISE_PX = 1e-3



@pytest.fixture(scope="module")
def group_clip(images_dir):
    """obama_and_biden.jpg (3 faces) at 640 px wide, sliding and zooming a little each frame."""
    photo = read_image(images_dir / "obama_and_biden.jpg").frame
    scale = 640 / photo.shape[1]
    frames = []
    for f in range(14):
        zoom = scale * (1 + 0.01 * f)
        m = np.asarray([[zoom, 0, -3.0 * f], [0, zoom, 2.0 * f]], np.float64)
        frames.append(np.asarray(cv2.warpAffine(photo, m, (640, round(photo.shape[0] * scale))), np.uint8))
    return frames


def same_faces(a: FrameFaces, b: FrameFaces) -> bool:
    return (len(a) == len(b) and np.allclose(a.bbox_xyxy, b.bbox_xyxy, atol=NOISE_PX, rtol=0)
            and np.allclose(a.landmarks_5, b.landmarks_5, atol=NOISE_PX, rtol=0)
            and np.allclose(a.score, b.score, atol=1e-5, rtol=0))


def test_the_batch_copy_takes_several_images_and_detects_as_the_original(detector, images_dir):
    batched = batch_detector(detector)
    assert batched is not detector and batched.batch_dynamic and not detector.batch_dynamic
    assert batch_detector(detector) is batched                       # made once
    for name in ("obama.jpg", "biden.jpg", "obama_and_biden.jpg"):
        frame = read_image(images_dir / name).frame
        assert same_faces(FrameFaces.from_faces(batched.detect(frame)), FrameFaces.from_faces(detector.detect(frame)))


def test_a_detector_without_its_file_stays_one_call_per_image(detector):
    plain = ScrfdDetector(detector.session, detector.spec, detector.cfg)
    assert batch_detector(plain) is plain


def test_crops_of_different_sizes_in_one_call_match_one_call_each(detector, images_dir):
    photo = read_image(images_dir / "obama_and_biden.jpg").frame
    square = roi_detector(detector, 192)
    crops = []
    for face in detector.detect(photo):
        x1, y1, x2, y2 = (int(v) for v in face.bbox_xyxy)
        pad = (x2 - x1) // 2
        crops.append(photo[max(0, y1 - pad):y2 + pad, max(0, x1 - pad):x2 + 2 * pad])  # not square
    assert len(crops) == 3
    one_call = roi_detector(batch_detector(detector), 192).detect_batch(crops)
    for crop, found in zip(crops, one_call, strict=True):
        expected = FrameFaces.from_faces(square.detect(crop))
        assert len(expected) >= 1 and same_faces(FrameFaces.from_faces(found), expected)


def test_redetect_batched_gives_the_faces_of_one_call_per_crop(detector, group_clip):
    cfg = TrackingConfig()
    tracker = Tracker(cfg)
    tracker.update(0, FrameFaces.from_faces(detector.detect(group_clip[0])))
    predictions = tracker.predictions(1)
    assert len(predictions) == 3
    per_crop = redetect(group_clip[1], roi_detector(detector, cfg.roi_canvas), predictions, cfg)
    batched = redetect(group_clip[1], roi_detector(batch_detector(detector), cfg.roi_canvas), predictions, cfg)
    assert batched.crops == per_crop.crops == 3 and batched.boxes == per_crop.boxes
    assert len(batched.faces) == 3 and same_faces(batched.faces, per_crop.faces)
    assert batched.scores == pytest.approx(per_crop.scores, abs=1e-5)


def test_tracking_with_batched_crops_gives_the_same_faces_and_counts(detector, group_clip):
    runs = {}
    for batch in (True, False):
        tracking = TrackingDetector(detector, TrackingConfig(full_every=6), batch=batch)
        steps = [tracking.step(f, frame) for f, frame in enumerate(group_clip)]
        runs[batch] = (steps, tracking.counters)
    (batched, counted), (looped, looped_counts) = runs[True], runs[False]
    assert counted == looped_counts and counted.roi >= 3 * 10
    for a, b in zip(batched, looped, strict=True):
        assert same_faces(a.raw, b.raw) and a.online.track_id.tolist() == b.online.track_id.tolist()
        assert sorted(a.backfill) == sorted(b.backfill)
