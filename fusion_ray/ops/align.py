"""Face alignment: 5-point templates, similarity estimation and warping (pure functions)."""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

from fusion_ray.types import AffineMatrix, Crop, Frame, Landmarks5

# 5-point templates normalised to the crop size (left eye, right eye, nose, mouth left, mouth right).
TEMPLATES: dict[str, npt.NDArray[np.float64]] = {
    "arcface_112_v1": np.array(
        [[0.35473214, 0.45658929], [0.64526786, 0.45658929], [0.50000000, 0.61154464],
         [0.37913393, 0.77687500], [0.62086607, 0.77687500]], dtype=np.float64),
    "arcface_112_v2": np.array(
        [[0.34191607, 0.46157411], [0.65653393, 0.45983393], [0.50022500, 0.64050536],
         [0.37097589, 0.82469196], [0.63151696, 0.82325089]], dtype=np.float64),
    "arcface_128": np.array(
        [[0.36167656, 0.40387734], [0.63696719, 0.40235469], [0.50019687, 0.56044219],
         [0.38710391, 0.72160547], [0.61507734, 0.72034453]], dtype=np.float64),
    "ffhq_512": np.array(
        [[0.37691676, 0.46864664], [0.62285697, 0.46912813], [0.50123859, 0.61331904],
         [0.39308822, 0.72541100], [0.61150205, 0.72490465]], dtype=np.float64),
    "mtcnn_512": np.array(
        [[0.36562865, 0.46733799], [0.63305391, 0.46585885], [0.50019127, 0.61942959],
         [0.39032951, 0.77598822], [0.61178945, 0.77476328]], dtype=np.float64),
}


def template_points(template: str, crop_size: int) -> npt.NDArray[np.float64]:
    """The template's 5 points in pixels of a ``crop_size`` x ``crop_size`` crop."""
    try:
        points = TEMPLATES[template]
    except KeyError:
        raise ValueError(f"unknown template {template!r}; expected one of {sorted(TEMPLATES)}") from None
    if crop_size <= 0:
        raise ValueError(f"crop_size: expected a positive size, got {crop_size}")
    return points * float(crop_size)


def estimate_similarity(src_points: npt.ArrayLike, dst_points: npt.ArrayLike) -> AffineMatrix:
    """Least-squares similarity transform (rotation, uniform scale, translation) src -> dst.

    Umeyama's closed form; returns a 2x3 matrix ``M`` with ``dst ~= M @ [x, y, 1]``.
    """
    src = np.asarray(src_points, dtype=np.float64)
    dst = np.asarray(dst_points, dtype=np.float64)
    if src.shape != dst.shape or src.ndim != 2 or src.shape[1] != 2 or src.shape[0] < 2:
        raise ValueError(f"expected two (N, 2) point sets with N >= 2, got {src.shape} and {dst.shape}")
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    src_c, dst_c = src - src_mean, dst - dst_mean
    covariance = dst_c.T @ src_c / src.shape[0]
    u, singular, vt = np.linalg.svd(covariance)
    sign = np.eye(2)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[1, 1] = -1.0
    rotation = u @ sign @ vt
    src_var = (src_c**2).sum() / src.shape[0]
    if src_var <= 0:
        raise ValueError("source points are degenerate (all equal)")
    scale = float(np.trace(np.diag(singular) @ sign)) / src_var
    matrix = np.empty((2, 3), dtype=np.float64)
    matrix[:, :2] = scale * rotation
    matrix[:, 2] = dst_mean - scale * rotation @ src_mean
    return matrix


def align_matrix(landmarks_5: Landmarks5, template: str, crop_size: int) -> AffineMatrix:
    """Affine matrix that maps the frame onto the template crop for these landmarks."""
    return estimate_similarity(landmarks_5, template_points(template, crop_size))


def transform_points(points: npt.ArrayLike, affine_matrix: AffineMatrix) -> npt.NDArray[np.float64]:
    """Apply a 2x3 affine matrix to (N, 2) points."""
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    return pts @ np.asarray(affine_matrix, dtype=np.float64)[:, :2].T + np.asarray(affine_matrix)[:, 2]


def invert_affine(affine_matrix: AffineMatrix) -> AffineMatrix:
    """Inverse of a 2x3 affine matrix."""
    return np.asarray(cv2.invertAffineTransform(np.asarray(affine_matrix, dtype=np.float64)), np.float64)


def warp_face(frame: Frame, affine_matrix: AffineMatrix, crop_size: int) -> Crop:
    """Cut the aligned ``crop_size`` x ``crop_size`` crop out of ``frame``."""
    crop = cv2.warpAffine(frame, np.asarray(affine_matrix, dtype=np.float64), (crop_size, crop_size),
                          flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return np.asarray(crop, np.uint8)


def align_face(frame: Frame, landmarks_5: Landmarks5, template: str,
               crop_size: int) -> tuple[Crop, AffineMatrix]:
    """Aligned crop and its affine matrix for one face."""
    matrix = align_matrix(landmarks_5, template, crop_size)
    return warp_face(frame, matrix, crop_size), matrix
