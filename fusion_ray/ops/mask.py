"""Blend masks for pasting crops back (pure functions)."""

from __future__ import annotations

import cv2
import numpy as np

from fusion_ray.types import Mask


def box_mask(crop_size: int, *, padding: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
             blur: float = 0.3) -> Mask:
    """A feathered rectangular mask over a square crop.

    ``padding`` is (top, right, bottom, left) as fractions of the crop cut away from each edge;
    ``blur`` is the feather width as a fraction of half the crop (0 gives a hard edge).
    """
    if crop_size <= 0:
        raise ValueError(f"crop_size: expected a positive size, got {crop_size}")
    if any(not 0.0 <= p < 0.5 for p in padding):
        raise ValueError(f"padding: expected fractions in [0, 0.5), got {padding}")
    if not 0.0 <= blur <= 1.0:
        raise ValueError(f"blur: expected a fraction in [0, 1], got {blur}")
    blur_px = int(crop_size * 0.5 * blur)
    edge = max(blur_px // 2, 1)
    top, right, bottom, left = (int(round(p * crop_size)) for p in padding)
    mask = np.ones((crop_size, crop_size), dtype=np.float32)
    mask[: max(edge, top), :] = 0.0
    mask[crop_size - max(edge, bottom):, :] = 0.0
    mask[:, : max(edge, left)] = 0.0
    mask[:, crop_size - max(edge, right):] = 0.0
    if blur_px > 0:
        mask = np.asarray(cv2.GaussianBlur(mask, (0, 0), blur_px * 0.25), np.float32)
    return np.clip(mask, 0.0, 1.0).astype(np.float32)


def ellipse_mask(crop_size: int, *, scale_wh: tuple[float, float] = (0.42, 0.5),
                 center_xy: tuple[float, float] = (0.5, 0.55), blur: float = 0.15) -> Mask:
    """A feathered ellipse covering the inner face of an aligned crop (used by the classic swapper)."""
    if crop_size <= 0:
        raise ValueError(f"crop_size: expected a positive size, got {crop_size}")
    mask = np.zeros((crop_size, crop_size), dtype=np.float32)
    center = (int(round(center_xy[0] * crop_size)), int(round(center_xy[1] * crop_size)))
    axes = (max(int(round(scale_wh[0] * crop_size)), 1), max(int(round(scale_wh[1] * crop_size)), 1))
    cv2.ellipse(mask, center, axes, 0.0, 0.0, 360.0, 1.0, thickness=-1)
    blur_px = crop_size * 0.5 * blur
    if blur_px > 0:
        mask = np.asarray(cv2.GaussianBlur(mask, (0, 0), blur_px * 0.5), np.float32)
    return np.clip(mask, 0.0, 1.0).astype(np.float32)
