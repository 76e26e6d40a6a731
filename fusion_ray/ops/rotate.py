"""Frames turned by a right angle and points mapped back (pure geometry): FaceFusion's
``--face-detector-angles`` searches a frame turned by each angle and maps the faces it finds
back onto the frame.

The turn is FaceFusion 3.8.1's (``face_helper.create_rotation_matrix_and_size``, read for facts):
OpenCV's ``getRotationMatrix2D`` about the frame's centre, ``angle`` degrees counter-clockwise,
the canvas grown to hold the whole turned frame and the matrix shifted onto it. Faces found on
the turned canvas go back through the inverse matrix: landmarks point by point, a box as the
bounds of its four turned corners (``face_detector.detect_faces_by_angle``).
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from fusion_ray.types import AffineMatrix, Frame

FloatArray = npt.NDArray[np.float32]


def turn_matrix(angle: int, size_wh: tuple[int, int]) -> tuple[AffineMatrix, tuple[int, int]]:
    """The 2x3 matrix turning a ``size_wh`` frame ``angle`` degrees counter-clockwise about its
    centre onto a canvas that holds all of it, and that canvas's (width, height)."""
    width, height = size_wh
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), float(angle), 1.0).astype(np.float64)
    canvas = np.abs(matrix[:, :2]) @ np.asarray([width, height], np.float64)
    matrix[:, 2] += (canvas - [width, height]) / 2
    return matrix, (int(round(canvas[0])), int(round(canvas[1])))


def turn_frame(frame: Frame, angle: int) -> tuple[Frame, AffineMatrix]:
    """``frame`` turned ``angle`` degrees counter-clockwise, and the matrix that maps the turned
    canvas back onto ``frame`` (angle 0: the frame itself and the identity)."""
    height, width = frame.shape[:2]
    if angle % 360 == 0:
        return frame, np.asarray([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    matrix, canvas = turn_matrix(angle, (width, height))
    turned = cv2.warpAffine(frame, matrix, canvas)
    return np.asarray(turned, np.uint8), cv2.invertAffineTransform(matrix).astype(np.float64)


def map_points(points: npt.ArrayLike, matrix: AffineMatrix) -> FloatArray:
    """``points`` (..., 2) through the 2x3 ``matrix``, in the same shape."""
    pts = np.asarray(points, np.float64)
    flat = pts.reshape(-1, 2) @ np.asarray(matrix, np.float64)[:, :2].T + np.asarray(matrix, np.float64)[:, 2]
    return flat.reshape(pts.shape).astype(np.float32)


def map_boxes(bbox_xyxy: npt.ArrayLike, matrix: AffineMatrix) -> FloatArray:
    """Boxes (n, 4) through ``matrix``: the bounds of each box's four mapped corners."""
    boxes = np.asarray(bbox_xyxy, np.float64).reshape(-1, 4)
    x1, y1, x2, y2 = boxes.T
    corners = np.stack([np.stack([x1, y1], -1), np.stack([x2, y1], -1),
                        np.stack([x2, y2], -1), np.stack([x1, y2], -1)], axis=1)
    mapped = map_points(corners, matrix)
    return np.concatenate([mapped.min(axis=1), mapped.max(axis=1)], axis=1).astype(np.float32)


def merge_iou(angles: int) -> float:
    """The IoU over which faces found at ``angles`` angles are one face (FaceFusion's
    ``get_nms_threshold``: 0.4 for one angle, 0.3 for two, 0.2 for three, 0.1 for four)."""
    return {1: 0.4, 2: 0.3, 3: 0.2}.get(angles, 0.1)
