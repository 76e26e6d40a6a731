"""Colour transfer between face crops (pure functions)."""

from __future__ import annotations

import cv2
import numpy as np

from fusion_ray.types import Crop, Mask


def _masked_stats(lab: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    total = float(weight.sum())
    if total < 1.0:
        flat = lab.reshape(-1, 3)
        return flat.mean(axis=0), flat.std(axis=0)
    w = weight.reshape(-1, 1)
    flat = lab.reshape(-1, 3)
    mean = (flat * w).sum(axis=0) / total
    var = (((flat - mean) ** 2) * w).sum(axis=0) / total
    return mean, np.sqrt(var)


def color_transfer(source: Crop, target: Crop, mask: Mask | None = None) -> Crop:
    """Recolour ``source`` so its Lab mean and spread match ``target`` (Reinhard et al. 2001).

    Statistics are taken inside ``mask`` (weights in [0, 1]) when given. Both crops are BGR
    uint8 of the same size.
    """
    if source.shape != target.shape:
        raise ValueError(f"expected crops of the same shape, got {source.shape} and {target.shape}")
    weight = np.ones(source.shape[:2], np.float32) if mask is None else mask.astype(np.float32)
    src_lab = cv2.cvtColor(source, cv2.COLOR_BGR2LAB).astype(np.float32)
    dst_lab = cv2.cvtColor(target, cv2.COLOR_BGR2LAB).astype(np.float32)
    src_mean, src_std = _masked_stats(src_lab, weight)
    dst_mean, dst_std = _masked_stats(dst_lab, weight)
    ratio = dst_std / np.maximum(src_std, 1e-3)
    ratio = np.clip(ratio, 0.25, 4.0)
    out = (src_lab - src_mean) * ratio + dst_mean
    out_u8 = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    return cv2.cvtColor(out_u8, cv2.COLOR_LAB2BGR)
