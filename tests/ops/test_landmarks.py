"""68-point geometry: 68 -> 5, the face angle, 2dfan4's crop, heatmap score and the threshold."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.models.standins_quality import synthetic_face_68
from fusion_ray.ops.landmarks import (
    alignment_points,
    consistency_score,
    face_angle,
    heatmap_points_to_frame,
    heatmap_score,
    landmarker_crop_matrix,
    landmarks_68_to_5,
    roll_degrees,
    upright_crop,
)


def test_68_to_5_is_facefusions_convention() -> None:
    points = np.arange(136, dtype=np.float64).reshape(68, 2)
    five = landmarks_68_to_5(points)
    np.testing.assert_allclose(five[0], points[36:42].mean(axis=0))
    np.testing.assert_allclose(five[1], points[42:48].mean(axis=0))
    np.testing.assert_allclose(five[2], points[30])
    np.testing.assert_allclose(five[3], points[48])
    np.testing.assert_allclose(five[4], points[54])
    assert landmarks_68_to_5(np.stack([points, points + 1])).shape == (2, 5, 2)
    with pytest.raises(ValueError, match="68 points"):
        landmarks_68_to_5(np.zeros((5, 2)))


def test_synthetic_face_gives_eyes_above_nose_above_mouth() -> None:
    left_eye, right_eye, nose, mouth_left, mouth_right = landmarks_68_to_5(synthetic_face_68())
    assert left_eye[0] < right_eye[0] and mouth_left[0] < mouth_right[0]
    assert left_eye[1] < nose[1] < mouth_left[1]


@pytest.mark.parametrize(("degrees", "expected"), [(0, 0), (10, 0), (80, 90), (180, 180), (-90, 270), (260, 270)])
def test_face_angle_rounds_the_eye_line_to_quarter_turns(degrees: float, expected: int) -> None:
    theta = np.radians(degrees)
    left = np.array([100.0, 100.0])
    right = left + 50 * np.array([np.cos(theta), np.sin(theta)])
    five = np.array([left, right, left, left, right])
    assert face_angle(five) == expected


def test_crop_matrix_puts_the_box_at_195_px_centred() -> None:
    matrix = landmarker_crop_matrix([100, 50, 300, 350], 0)  # longest side 300 -> 195
    corners = np.array([[100, 50, 1], [300, 350, 1]], np.float64) @ matrix.T
    np.testing.assert_allclose(corners[1, 1] - corners[0, 1], 195.0)
    np.testing.assert_allclose(corners.mean(axis=0), [128.0, 128.0])


def test_rotated_crop_turns_about_the_centre_and_points_come_back() -> None:
    box = [100, 100, 200, 200]
    upright = landmarker_crop_matrix(box, 0)
    turned = landmarker_crop_matrix(box, 90)
    top_middle = np.array([150.0, 100.0, 1.0])
    a, b = upright @ top_middle, turned @ top_middle
    np.testing.assert_allclose(a - 128, [0.0, -97.5])
    np.testing.assert_allclose(np.linalg.norm(b - 128), 97.5)
    assert not np.allclose(a, b)
    in_heatmap = (turned @ np.array([[150, 120, 1], [130, 170, 1]], np.float64).T).T / 4.0
    np.testing.assert_allclose(heatmap_points_to_frame(in_heatmap, turned), [[150, 120], [130, 170]], atol=1e-4)


def test_heatmap_score_maps_the_mean_peak_from_0_0_9_to_0_1() -> None:
    maps = np.zeros((3, 68, 64, 64), np.float32)
    maps[0, :, 10, 10] = 0.45
    maps[1, :, 5, 5] = 0.95
    np.testing.assert_allclose(heatmap_score(maps), [0.5, 1.0, 0.0], atol=1e-6)


def test_alignment_points_take_the_landmarkers_only_over_the_threshold() -> None:
    detector = np.full((5, 2), 7.0, np.float32)
    points = synthetic_face_68() * 100
    np.testing.assert_array_equal(alignment_points(detector, points, 0.5), detector)  # not over 0.5
    np.testing.assert_allclose(alignment_points(detector, points, 0.51), landmarks_68_to_5(points))
    np.testing.assert_array_equal(alignment_points(detector, None, 0.9), detector)
    np.testing.assert_array_equal(alignment_points(detector, points, 0.8, threshold=0.9), detector)


def test_consistency_score_is_1_on_agreement_and_falls_with_the_error() -> None:
    points = synthetic_face_68() * 200
    five = landmarks_68_to_5(points)
    eye_distance = float(np.linalg.norm(five[1] - five[0]))
    assert consistency_score(points, five) == pytest.approx(1.0)
    shifted = five + [0.125 * eye_distance, 0.0]
    assert consistency_score(points, shifted) == pytest.approx(0.5)
    assert consistency_score(points, five + [eye_distance, 0.0]) == 0.0


def test_dark_crops_get_clahe_and_bright_ones_stay() -> None:
    from fusion_ray.ops.landmarks import brighten_dark_crop

    bright = np.full((32, 32, 3), 120, np.uint8)
    assert brighten_dark_crop(bright) is bright
    dark = np.zeros((32, 32, 3), np.uint8)
    dark[8:24, 8:24] = 20
    lifted = brighten_dark_crop(dark)
    assert lifted.mean() > dark.mean()


@pytest.mark.parametrize("degrees", [-60.0, -20.0, 0.0, 30.0, 45.0, 120.0])
def test_upright_crop_levels_the_eye_line_about_the_box_centre(degrees: float) -> None:
    level = np.array([[-20.0, -10.0], [20.0, -10.0], [0.0, 5.0], [-15.0, 20.0], [15.0, 20.0]])
    theta = np.radians(degrees)
    turn = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    centre = np.array([300.0, 200.0])
    five = level @ turn.T + centre
    assert roll_degrees(five) == pytest.approx(degrees)
    box = np.array([250.0, 140.0, 350.0, 270.0])  # centred on (300, 205), 100 x 130
    matrix, side, upright_box = upright_crop(box, five)
    assert side == 260
    np.testing.assert_allclose(upright_box, [80.0, 65.0, 180.0, 195.0])
    in_crop = five @ matrix[:, :2].T + matrix[:, 2]
    np.testing.assert_allclose(in_crop[1, 1], in_crop[0, 1], atol=1e-9)  # the eyes level
    assert in_crop[0, 0] < in_crop[1, 0] and in_crop[3, 1] > in_crop[0, 1]  # upright, not upside down
    np.testing.assert_allclose(np.array([300.0, 205.0]) @ matrix[:, :2].T + matrix[:, 2], [130.0, 130.0])
