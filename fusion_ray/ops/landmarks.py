"""68-point landmark geometry (pure functions): 68 -> 5 points, face angle, 2dfan4's crop and score.

Conventions are FaceFusion 3.8.1's (``face_helper.py``, ``face_landmarker.py``), read for
facts:

- 68 -> 5: the mean of points 36-41 (left eye), the mean of 42-47 (right eye), 30 (nose tip),
  48 and 54 (mouth corners).
- 2dfan4's crop: the box scaled so that its longest side is 195 px of a 256 px crop, centred,
  then rotated by the face angle (a multiple of 90 degrees); the model's 68 points are in 64 px
  heatmap units (x 4 gives crop pixels); the score is the mean over the 68 heatmaps of each
  heatmap's peak, mapped linearly from [0, 0.9] to [0, 1] (clipped).
- The 5 alignment points are the landmarker's when its score is over ``--face-landmarker-score``
  (default 0.5), else the detector's.
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from fusion_ray.types import AffineMatrix, Landmarks5

FloatArray = npt.NDArray[np.float32]

LANDMARKER_CROP_SIZE = 256
"""2dfan4's square input size."""
LANDMARKER_FACE_SIZE = 195.0
"""Pixels of the 256 px crop the box's longest side is scaled to."""
HEATMAP_SIZE = 64
"""Side of 2dfan4's heatmaps; its points are in these units."""
SCORE_FULL_AT = 0.9
"""Mean heatmap peak that maps to a score of 1."""
DEFAULT_LANDMARKER_SCORE = 0.5
"""FaceFusion's ``--face-landmarker-score`` default."""
UPRIGHT_FROM_DEGREES = 15.0
"""dlib_68 fits a face rolled less than this as it is; a face rolled more is turned upright first."""


def _check_68(points_68: npt.ArrayLike) -> npt.NDArray[np.float64]:
    points = np.asarray(points_68, dtype=np.float64)
    if points.shape[-2:] != (68, 2):
        raise ValueError(f"expected 68 points of shape (..., 68, 2), got {points.shape}")
    return points


def landmarks_68_to_5(points_68: npt.ArrayLike) -> FloatArray:
    """(..., 68, 2) points -> (..., 5, 2): eye centres, nose tip, mouth corners."""
    points = _check_68(points_68)
    five = np.stack([points[..., 36:42, :].mean(axis=-2), points[..., 42:48, :].mean(axis=-2),
                     points[..., 30, :], points[..., 48, :], points[..., 54, :]], axis=-2)
    return five.astype(np.float32)


def face_angle(landmarks_5: Landmarks5) -> int:
    """The face's roll, rounded to 0, 90, 180 or 270 degrees, from the eye line.

    FaceFusion takes the angle from points 0 and 16 of a 68-point estimate made from the 5
    points (a model of its own); the eye line of the 5 points runs parallel to that jaw line, so
    the rounded angle is the same for any face that is not within a few degrees of 45.
    """
    points = np.asarray(landmarks_5, dtype=np.float64).reshape(5, 2)
    dx, dy = points[1] - points[0]
    theta = float(np.degrees(np.arctan2(dy, dx))) % 360.0
    return int(round(theta / 90.0) % 4) * 90


def roll_degrees(landmarks_5: Landmarks5) -> float:
    """The face's roll in degrees, (-180, 180]: the eye line's angle from the image's x axis
    (positive when the right-hand eye is lower, i.e. the face is turned clockwise on screen)."""
    points = np.asarray(landmarks_5, dtype=np.float64).reshape(5, 2)
    dx, dy = points[1] - points[0]
    return float(np.degrees(np.arctan2(dy, dx)))


def upright_crop(bbox_xyxy: npt.ArrayLike, landmarks_5: Landmarks5
                 ) -> tuple[AffineMatrix, int, npt.NDArray[np.float64]]:
    """A square crop around the face turned so that its eye line is level: (frame -> crop
    matrix, crop side, the box in crop pixels). The crop is twice the box's longest side, centred
    on the box, turned about its centre by the face's roll; the box keeps its size, centred."""
    box = np.asarray(bbox_xyxy, dtype=np.float64).reshape(4)
    size = np.maximum(box[2:] - box[:2], 1.0)
    side = int(np.ceil(2.0 * size.max()))
    centre = (box[:2] + box[2:]) / 2.0
    turn = np.asarray(cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), roll_degrees(landmarks_5), 1.0),
                      np.float64)
    matrix = np.hstack([turn[:, :2], (turn[:, 2] + side / 2.0 - centre)[:, None]])
    half = size / 2.0
    return matrix, side, np.concatenate([side / 2.0 - half, side / 2.0 + half])


def landmarker_crop_matrix(bbox_xyxy: npt.ArrayLike, angle: int,
                           crop_size: int = LANDMARKER_CROP_SIZE) -> AffineMatrix:
    """Frame -> 2dfan4 crop: the box scaled to 195 px and centred, then rotated by ``angle``.

    FaceFusion warps twice (scale and translate, then rotate about the crop centre); for the
    multiples of 90 degrees that :func:`face_angle` gives, the rotated crop keeps its size, so
    the two matrices compose into one warp.
    """
    box = np.asarray(bbox_xyxy, dtype=np.float64).reshape(4)
    side = float(max(box[2] - box[0], box[3] - box[1], 1.0))
    scale = LANDMARKER_FACE_SIZE * crop_size / (256.0 * side)
    translation = (crop_size - (box[:2] + box[2:]) * scale) * 0.5
    to_crop = np.array([[scale, 0.0, translation[0]], [0.0, scale, translation[1]], [0.0, 0.0, 1.0]])
    rotation = np.vstack([cv2.getRotationMatrix2D((crop_size / 2, crop_size / 2), float(angle), 1.0),
                          [0.0, 0.0, 1.0]])
    return np.asarray((rotation @ to_crop)[:2], dtype=np.float64)


def brighten_dark_crop(crop: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """CLAHE (clip limit 2) on the lightness of a crop whose mean lightness is under 30.

    FaceFusion converts its BGR crop with OpenCV's RGB -> Lab code; so does this, so the
    lightness (and the threshold) match its input exactly.
    """
    lab = cv2.cvtColor(crop, cv2.COLOR_RGB2Lab)
    if float(lab[:, :, 0].mean()) >= 30.0:
        return crop
    lab[:, :, 0] = cv2.createCLAHE(clipLimit=2.0).apply(lab[:, :, 0])
    return np.asarray(cv2.cvtColor(lab, cv2.COLOR_Lab2RGB), np.uint8)


def heatmap_score(heatmaps: npt.ArrayLike) -> FloatArray:
    """(N, 68, H, W) heatmaps -> (N,) scores: mean of the per-point peaks, [0, 0.9] -> [0, 1]."""
    maps = np.asarray(heatmaps, dtype=np.float32)
    if maps.ndim != 4 or maps.shape[1] != 68:
        raise ValueError(f"expected heatmaps of shape (N, 68, H, W), got {maps.shape}")
    peaks = maps.max(axis=(2, 3)).mean(axis=1)
    return np.clip(peaks / SCORE_FULL_AT, 0.0, 1.0).astype(np.float32)


def heatmap_points_to_frame(points: npt.ArrayLike, crop_matrix: AffineMatrix,
                            crop_size: int = LANDMARKER_CROP_SIZE) -> FloatArray:
    """(68, 2+) model points in heatmap units -> (68, 2) frame pixels through the crop's inverse."""
    pts = np.asarray(points, dtype=np.float64)[..., :2].reshape(-1, 2) * (crop_size / HEATMAP_SIZE)
    inverse = cv2.invertAffineTransform(np.asarray(crop_matrix, dtype=np.float64))
    return (pts @ inverse[:, :2].T + inverse[:, 2]).astype(np.float32)


def alignment_points(detector_5: Landmarks5, landmarks_68: npt.ArrayLike | None, score: float,
                     threshold: float = DEFAULT_LANDMARKER_SCORE) -> Landmarks5:
    """The 5 points to align with: the landmarker's (68 -> 5) when ``score > threshold``."""
    if landmarks_68 is None or not score > threshold:
        return np.asarray(detector_5, dtype=np.float32).reshape(5, 2)
    return landmarks_68_to_5(landmarks_68)


def consistency_score(landmarks_68: npt.ArrayLike, detector_5: Landmarks5, *,
                      zero_at: float = 0.25) -> float:
    """How well 68 points agree with the detector's 5: 1 - mean error / (``zero_at`` x eye distance).

    A landmarker without a confidence of its own (dlib's) is scored by it: a fit on the face the
    detector found scores about 0.85 (errors of 4% of the eye distance on the shared photos); a
    fit that went astray (errors over 12.5%) scores under 0.5 and is not used for alignment.
    """
    five = landmarks_68_to_5(landmarks_68).astype(np.float64)
    reference = np.asarray(detector_5, dtype=np.float64).reshape(5, 2)
    eye_distance = max(float(np.linalg.norm(reference[1] - reference[0])), 1e-6)
    error = float(np.linalg.norm(five - reference, axis=1).mean()) / eye_distance
    return float(np.clip(1.0 - error / zero_at, 0.0, 1.0))
