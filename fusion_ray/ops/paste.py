"""Paste an aligned crop back into its frame, warping only the face's bounding region."""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from fusion_ray.ops.align import invert_affine, transform_points
from fusion_ray.types import AffineMatrix, Crop, Frame, Mask


@dataclass(frozen=True)
class Roi:
    """A region of interest in frame pixels: x0 <= x < x1, y0 <= y < y1."""

    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def empty(self) -> bool:
        return self.x1 <= self.x0 or self.y1 <= self.y0

    @property
    def size_wh(self) -> tuple[int, int]:
        return self.x1 - self.x0, self.y1 - self.y0


def crop_roi(affine_matrix: AffineMatrix, crop_size: int, frame_hw: tuple[int, int],
             margin: int = 2) -> Roi:
    """The frame region covered by the crop (its corners mapped back), clipped to the frame."""
    corners = np.array([[0, 0], [crop_size, 0], [crop_size, crop_size], [0, crop_size]], np.float64)
    in_frame = transform_points(corners, invert_affine(affine_matrix))
    height, width = frame_hw
    x0 = max(int(math.floor(in_frame[:, 0].min())) - margin, 0)
    y0 = max(int(math.floor(in_frame[:, 1].min())) - margin, 0)
    x1 = min(int(math.ceil(in_frame[:, 0].max())) + margin, width)
    y1 = min(int(math.ceil(in_frame[:, 1].max())) + margin, height)
    return Roi(x0, y0, x1, y1)


def warp_to_roi(crop: np.ndarray, affine_matrix: AffineMatrix, roi: Roi,
                interpolation: int = cv2.INTER_LINEAR) -> np.ndarray:
    """Warp a crop (or a mask) back into frame coordinates, restricted to ``roi``."""
    inverse = invert_affine(affine_matrix)
    inverse[:, 2] -= (roi.x0, roi.y0)
    return cv2.warpAffine(crop, inverse, roi.size_wh, flags=interpolation,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0)


def paste_back(frame: Frame, crop: Crop, affine_matrix: AffineMatrix, mask: Mask) -> Frame:
    """A copy of ``frame`` with ``crop`` blended in through ``mask`` (both in crop coordinates).

    Only the bounding region of the crop is warped and touched; pixels outside it are
    returned unchanged.
    """
    crop_size = crop.shape[0]
    if crop.shape[:2] != (crop_size, crop_size) or mask.shape != (crop_size, crop_size):
        raise ValueError(f"expected a square crop and a mask of the same size, got {crop.shape} and {mask.shape}")
    result = frame.copy()
    roi = crop_roi(affine_matrix, crop_size, frame.shape[:2])
    if roi.empty:
        return result
    warped = warp_to_roi(crop, affine_matrix, roi).astype(np.float32)
    weight = warp_to_roi(mask.astype(np.float32), affine_matrix, roi)[..., None]
    region = result[roi.y0:roi.y1, roi.x0:roi.x1].astype(np.float32)
    blended = region * (1.0 - weight) + warped * weight
    result[roi.y0:roi.y1, roi.x0:roi.x1] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
    return result
