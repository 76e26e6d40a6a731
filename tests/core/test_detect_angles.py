"""FaceFusion's detector angles with the real SCRFD on shared photos turned by a right angle:
the face is found at its upright score only on the frame turned back by the matching angle, and
its box and landmarks map back onto the turned photo where the upright detection says."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from fusion_ray.core.chain import detect_turned
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.ops.rotate import map_boxes, map_points, turn_matrix

TURNS = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}
"""The photo turned clockwise by the angle: turning it back is the angle counter-clockwise."""



@pytest.fixture(scope="module")
def photo(images_dir: Path) -> np.ndarray:
    return np.asarray(cv2.imread(str(images_dir / "obama.jpg")), np.uint8)


def test_angle_zero_is_the_detector_as_it_is(detector: ScrfdDetector, photo: np.ndarray) -> None:
    plain, turned = detector.detect(photo), detect_turned(detector, photo, (0,))
    assert len(plain) == len(turned) == 1
    np.testing.assert_array_equal(plain[0].bbox_xyxy, turned[0].bbox_xyxy)
    np.testing.assert_array_equal(plain[0].landmarks_5, turned[0].landmarks_5)
    assert plain[0].score == turned[0].score


@pytest.mark.parametrize("turn", [90, 180, 270])
def test_a_turned_photo_is_found_upright_with_the_matching_angle(detector: ScrfdDetector, photo: np.ndarray,
                                                                 turn: int) -> None:
    upright = detector.detect(photo)[0]
    turned = np.ascontiguousarray(cv2.rotate(photo, TURNS[turn]))
    onto, _ = turn_matrix(-turn, (photo.shape[1], photo.shape[0]))  # upright -> turned photo
    box, points = map_boxes(upright.bbox_xyxy, onto)[0], map_points(upright.landmarks_5, onto)
    size = float(upright.bbox_xyxy[2] - upright.bbox_xyxy[0])
    scores = {}
    for angle in (0, 90, 180, 270):
        found = detect_turned(detector, turned, (angle,))
        scores[angle] = max((f.score for f in found), default=0.0)
    assert abs(scores[turn] - upright.score) < 0.02
    assert all(score < upright.score - 0.1 for angle, score in scores.items() if angle != turn), scores
    merged = detect_turned(detector, turned, (0, 90, 180, 270))
    assert len(merged) == 1 and merged[0].score == pytest.approx(scores[turn])
    assert np.abs(merged[0].bbox_xyxy - box).max() < 6.0
    assert np.linalg.norm(merged[0].landmarks_5 - points, axis=1).max() < 0.03 * size
