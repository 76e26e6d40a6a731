"""Per-face paste masks on crop coordinates (pure functions), combined by element-wise minimum.

FaceFusion 3.8.1's processing (``face_masker.py``; docs/ARCHITECTURE.md, FaceFusion's conventions), read for facts:

- box: ones, a border of ``max(blur_area, padding%)`` zeroed on each side, then a Gaussian blur
  of sigma ``int(S * 0.5 * blur) * 0.25`` (blur_area = ``max(int(S * 0.5 * blur) // 2, 1)``);
  padding is (top, right, bottom, left) in percent of the crop, truncated to whole pixels.
- area: one convex hull over the chosen areas' 68-point indices, filled with 1, then
  :func:`feather` (Gaussian sigma 5, clipped to [0.5, 1], stretched back to [0, 1]).
- the masks of one face are combined by element-wise minimum (:func:`combine_masks`).

Deep-Live-Cam's mouth mask (``create_lower_mouth_mask``, read for facts): the target's own lip
polygon, grown about its centre, feathered, and the original pixels kept there over the swap.
Here it is a *keep* mask (1 on the mouth); :func:`without` turns it into a paste mask that joins
the minimum.

Every function takes points already in crop pixels: map frame points with
``fusion_ray.ops.align.transform_points(points, affine_matrix)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import MappingProxyType

import cv2
import numpy as np
import numpy.typing as npt

from fusion_ray.types import Mask

AREA_POINTS: MappingProxyType[str, tuple[int, ...]] = MappingProxyType({
    "upper-face": (0, 1, 2, 31, 32, 33, 34, 35, 14, 15, 16, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17),
    "lower-face": (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 35, 34, 33, 32, 31),
    "mouth": tuple(range(48, 68)),
})
"""FaceFusion's ``--face-mask-areas``: the 68-point indices of each area."""

OUTER_LIP = tuple(range(48, 60))
"""The outer lip contour of the 68 points (the polygon of the mouth mask)."""

FEATHER_SIGMA = 5.0


def _check_size(crop_size: int) -> None:
    if crop_size <= 0:
        raise ValueError(f"crop_size: expected a positive size, got {crop_size}")


def feather(mask: npt.ArrayLike) -> Mask:
    """FaceFusion's feather of a hard mask: ``(blur(m, sigma 5).clip(0.5, 1) - 0.5) * 2``.

    Shrinks the mask by about a sigma and gives it a soft inner edge; 0 stays 0 far outside.
    """
    hard = np.clip(np.asarray(mask, dtype=np.float32), 0.0, 1.0)
    blurred = cv2.GaussianBlur(hard, (0, 0), FEATHER_SIGMA)
    return ((np.clip(blurred, 0.5, 1.0) - 0.5) * 2.0).astype(np.float32)


def box_mask_percent(crop_size: int, blur: float = 0.3,
                     padding: Sequence[float] = (0.0, 0.0, 0.0, 0.0)) -> Mask:
    """FaceFusion's box mask: ``--face-mask-blur`` and ``--face-mask-padding`` (top, right, bottom, left, %)."""
    _check_size(crop_size)
    if len(padding) != 4 or any(not 0.0 <= p <= 100.0 for p in padding):
        raise ValueError(f"padding: expected 4 percentages in [0, 100], got {tuple(padding)}")
    if not 0.0 <= blur <= 1.0:
        raise ValueError(f"blur: expected a value in [0, 1], got {blur}")
    blur_amount = int(crop_size * 0.5 * blur)
    blur_area = max(blur_amount // 2, 1)
    top, right, bottom, left = (max(blur_area, int(crop_size * p / 100)) for p in padding)
    mask = np.ones((crop_size, crop_size), np.float32)
    mask[:top, :] = 0.0
    mask[crop_size - bottom:, :] = 0.0
    mask[:, :left] = 0.0
    mask[:, crop_size - right:] = 0.0
    if blur_amount > 0:
        mask = np.asarray(cv2.GaussianBlur(mask, (0, 0), blur_amount * 0.25), np.float32)
    return mask


def _check_points(points_68: npt.ArrayLike) -> npt.NDArray[np.float64]:
    points = np.asarray(points_68, dtype=np.float64)
    if points.shape != (68, 2) or not np.all(np.isfinite(points)):
        raise ValueError(f"expected finite 68 points of shape (68, 2), got {points.shape}")
    return points


def area_mask(crop_size: int, points_68: npt.ArrayLike, areas: Iterable[str]) -> Mask:
    """FaceFusion's area mask: one convex hull over the chosen areas' points, filled, feathered."""
    _check_size(crop_size)
    points = _check_points(points_68)
    chosen = list(areas)
    unknown = [a for a in chosen if a not in AREA_POINTS]
    if unknown or not chosen:
        raise ValueError(f"areas: expected some of {list(AREA_POINTS)}, got {chosen}")
    indices = [i for area in chosen for i in AREA_POINTS[area]]
    hull = cv2.convexHull(points[indices].astype(np.int32))
    mask = np.zeros((crop_size, crop_size), np.float32)
    cv2.fillConvexPoly(mask, hull, 1.0)
    return feather(mask)


def mouth_keep_mask(crop_size: int, points_68: npt.ArrayLike, *, grow: float = 0.5,
                    feather_ratio: float = 8.0) -> Mask:
    """Deep-Live-Cam's mouth mask: 1 where the target's own mouth is kept over the swap.

    The outer-lip polygon (points 48-59) grown by ``grow`` about its centre (Deep-Live-Cam: 1 +
    0.5), filled, and feathered by a Gaussian of sigma ``polygon size / feather_ratio`` (its
    feather ratio, default 8).
    """
    _check_size(crop_size)
    if grow < 0.0 or feather_ratio <= 0.0:
        raise ValueError(f"expected grow >= 0 and feather_ratio > 0, got {grow} and {feather_ratio}")
    lips = _check_points(points_68)[list(OUTER_LIP)]
    centre = lips.mean(axis=0)
    polygon = centre + (lips - centre) * (1.0 + grow)
    mask = np.zeros((crop_size, crop_size), np.float32)
    cv2.fillPoly(mask, [np.round(polygon).astype(np.int32)], 1.0)
    width, height = polygon.max(axis=0) - polygon.min(axis=0)
    sigma = max(float(min(width, height)) / feather_ratio, 0.5)
    return np.clip(cv2.GaussianBlur(mask, (0, 0), sigma), 0.0, 1.0).astype(np.float32)


def without(keep: npt.ArrayLike) -> Mask:
    """The paste mask that keeps the original where ``keep`` is 1 (``1 - keep``), for the minimum."""
    return (1.0 - np.clip(np.asarray(keep, dtype=np.float32), 0.0, 1.0)).astype(np.float32)


def combine_masks(masks: Sequence[npt.ArrayLike]) -> Mask:
    """Element-wise minimum of one face's masks (all of the crop's size), clipped to [0, 1]."""
    if not masks:
        raise ValueError("combine_masks: expected at least one mask")
    arrays = [np.asarray(m, dtype=np.float32) for m in masks]
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1 or len(arrays[0].shape) != 2:
        raise ValueError(f"combine_masks: expected 2-D masks of one shape, got {sorted(shapes)}")
    return np.clip(np.minimum.reduce(arrays), 0.0, 1.0).astype(np.float32)


def points_in_crops(points_68: npt.ArrayLike, affine_matrices: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """(N, 68, 2) frame points -> crop pixels through each face's (N, 2, 3) frame -> crop matrix."""
    points = np.asarray(points_68, dtype=np.float64)
    matrices = np.asarray(affine_matrices, dtype=np.float64)
    if points.ndim != 3 or points.shape[1:] != (68, 2) or matrices.shape != (len(points), 2, 3):
        raise ValueError(f"expected (N, 68, 2) points and (N, 2, 3) matrices, got {points.shape} and {matrices.shape}")
    return np.einsum("nij,nkj->nki", matrices[:, :, :2], points) + matrices[:, None, :, 2]


def area_masks(crop_size: int, points_68: npt.ArrayLike, areas: Iterable[str]) -> npt.NDArray[np.float32]:
    """:func:`area_mask` for every face: (N, 68, 2) crop points -> (N, S, S)."""
    chosen = list(areas)
    points = np.asarray(points_68, dtype=np.float64).reshape(-1, 68, 2)
    return np.stack([area_mask(crop_size, p, chosen) for p in points]) if len(points) else \
        np.zeros((0, crop_size, crop_size), np.float32)


def mouth_paste_masks(crop_size: int, points_68: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Deep-Live-Cam's mouth mask for every face, as paste masks (0 on the mouth): (N, S, S)."""
    points = np.asarray(points_68, dtype=np.float64).reshape(-1, 68, 2)
    return np.stack([without(mouth_keep_mask(crop_size, p)) for p in points]) if len(points) else \
        np.zeros((0, crop_size, crop_size), np.float32)


def combine_face_masks(mask_sets: Sequence[npt.ArrayLike]) -> npt.NDArray[np.float32]:
    """Element-wise minimum across mask kinds, per face: each set (N, S, S) -> (N, S, S)."""
    if not mask_sets:
        raise ValueError("combine_face_masks: expected at least one set of masks")
    arrays = [np.asarray(m, dtype=np.float32) for m in mask_sets]
    if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 3:
        raise ValueError(f"combine_face_masks: expected (N, S, S) sets of one shape, got {[a.shape for a in arrays]}")
    return np.clip(np.minimum.reduce(arrays), 0.0, 1.0).astype(np.float32)
