"""Poisson (gradient-domain) blending of a crop into its frame (pure function over copies)."""

from __future__ import annotations

import cv2
import numpy as np

from fusion_ray.ops.paste import crop_roi, paste_back, warp_to_roi
from fusion_ray.types import AffineMatrix, Crop, Frame, Mask

_BORDER = 8


def poisson_paste(frame: Frame, crop: Crop, affine_matrix: AffineMatrix, mask: Mask) -> Frame:
    """Paste ``crop`` with OpenCV's seamless cloning inside the mask, feathered at its edge.

    Works on the crop's bounding region only; falls back to a plain feathered paste when the
    mask is empty after thresholding.
    """
    crop_size = crop.shape[0]
    roi = crop_roi(affine_matrix, crop_size, frame.shape[:2])
    if roi.empty:
        return frame.copy()
    warped = warp_to_roi(crop, affine_matrix, roi)
    weight = warp_to_roi(mask.astype(np.float32), affine_matrix, roi)
    hard = (weight > 0.5).astype(np.uint8) * 255
    hard = np.asarray(cv2.erode(hard, np.ones((3, 3), np.uint8)), np.uint8)
    if cv2.countNonZero(hard) < 16:
        return paste_back(frame, crop, affine_matrix, mask)
    region = frame[roi.y0:roi.y1, roi.x0:roi.x1]
    # Pad so that the mask never touches the border (seamlessClone needs a margin).
    pad = cv2.BORDER_REFLECT
    dst = cv2.copyMakeBorder(region, _BORDER, _BORDER, _BORDER, _BORDER, pad)
    src = cv2.copyMakeBorder(warped, _BORDER, _BORDER, _BORDER, _BORDER, pad)
    hard = np.asarray(cv2.copyMakeBorder(hard, _BORDER, _BORDER, _BORDER, _BORDER, cv2.BORDER_CONSTANT, value=0), np.uint8)
    x, y, w, h = cv2.boundingRect(hard)
    center = (x + w // 2, y + h // 2)
    cloned = cv2.seamlessClone(src, dst, hard, center, cv2.NORMAL_CLONE)
    cloned = cloned[_BORDER:-_BORDER, _BORDER:-_BORDER].astype(np.float32)
    soft = weight[..., None]
    blended = region.astype(np.float32) * (1.0 - soft) + cloned * soft
    result = frame.copy()
    result[roi.y0:roi.y1, roi.x0:roi.x1] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
    return result
