"""Turning a frame by a right angle and mapping points and boxes back (FaceFusion's detector angles)."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.ops.rotate import map_boxes, map_points, merge_iou, turn_frame, turn_matrix


@pytest.mark.parametrize("angle", [90, 180, 270])
def test_turning_then_mapping_back_is_the_identity(angle: int) -> None:
    frame = np.zeros((40, 60, 3), np.uint8)
    turned, back = turn_frame(frame, angle)
    assert turned.shape[:2] == ((60, 40) if angle % 180 else (40, 60))
    forward, _ = turn_matrix(angle, (60, 40))
    points = np.asarray([[0.0, 0.0], [59.5, 10.25], [30.0, 39.0]], np.float32)
    np.testing.assert_allclose(map_points(map_points(points, forward), back), points, atol=1e-4)


def test_a_marked_pixel_lands_where_the_matrix_says_and_maps_back() -> None:
    frame = np.zeros((40, 60, 3), np.uint8)
    frame[10, 50] = 255  # x=50, y=10
    turned, back = turn_frame(frame, 90)  # counter-clockwise: the top right corner goes to the top left
    y, x = np.argwhere(turned[:, :, 0] > 128)[0]
    assert (x, y) == (10, 60 - 50)
    np.testing.assert_allclose(map_points([[x, y]], back), [[50.0, 10.0]], atol=1.0)


def test_a_box_maps_back_to_the_bounds_of_its_corners() -> None:
    _, back = turn_frame(np.zeros((40, 60, 3), np.uint8), 90)
    box = map_boxes([[5.0, 10.0, 15.0, 30.0]], back)[0]  # on the turned canvas (40 wide, 60 high)
    x1, y1, x2, y2 = box
    assert x1 < x2 and y1 < y2
    np.testing.assert_allclose(box, [30.0, 5.0, 50.0, 15.0], atol=1e-4)


def test_angle_zero_is_the_frame_itself() -> None:
    frame = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    turned, back = turn_frame(frame, 0)
    assert turned is frame
    np.testing.assert_array_equal(back, [[1, 0, 0], [0, 1, 0]])


def test_merge_iou_follows_the_number_of_angles() -> None:
    assert [merge_iou(n) for n in (1, 2, 3, 4)] == [0.4, 0.3, 0.2, 0.1]
