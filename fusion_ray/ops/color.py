"""Colour transfer between face crops (pure functions).

:func:`color_transfer` recolours one crop to another's Lab statistics. A caller that recolours
one source to many targets through one mask (the classic swapper: the same source face on every
face of every frame) prepares the mask once (:class:`StatsWeight`) and the source once
(:func:`lab_source`), then calls :func:`transfer_lab` per target: the same pixels as
:func:`color_transfer`, without redoing the source's conversion and statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from fusion_ray.types import Crop, Mask


@dataclass(frozen=True)
class StatsWeight:
    """A mask prepared for masked statistics: its weights, repeated for the three channels of
    each pixel (H, W, 3) float32, and their total. Below a total of 1 the statistics are
    unweighted."""

    shape_hw: tuple[int, int]
    pixels: np.ndarray
    total: float

    @classmethod
    def of(cls, mask: Mask | None, shape_hw: tuple[int, int]) -> StatsWeight:
        """The weights of ``mask`` (None: every pixel weighs 1) for crops of ``shape_hw``."""
        weight = np.ones(shape_hw, np.float32) if mask is None else mask.astype(np.float32)
        if weight.shape != shape_hw:
            raise ValueError(f"expected a mask of shape {shape_hw}, got {weight.shape}")
        return cls(shape_hw, np.repeat(weight[..., None], 3, axis=2), float(weight.sum()))


@dataclass(frozen=True)
class LabSource:
    """A source crop in Lab (uint8, as OpenCV converts it) with its masked mean and spread."""

    lab: np.ndarray
    mean: np.ndarray
    std: np.ndarray


def ordered_sums(rows: np.ndarray) -> np.ndarray:
    """The column sums of ``rows`` (N, 3) float32, added in row order in float32: the values of
    ``rows.sum(axis=0)``, in a quarter of its time (the last entry of OpenCV's integral image of
    the rows as one image row: a running float32 sum per channel)."""
    line = np.ascontiguousarray(rows, np.float32).reshape(1, -1, 3)
    return np.asarray(cv2.integral(line, sdepth=cv2.CV_32F)[-1, -1], np.float32)


def _masked_stats(lab: np.ndarray, weight: StatsWeight) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of each channel of ``lab`` (H, W, 3) float32 under ``weight``:
    float32 throughout, the weighted sums in pixel order (:func:`ordered_sums`), the element-wise
    steps by OpenCV (the same float32 operations as NumPy's, in less than half the time)."""
    if weight.total < 1.0:
        flat = lab.reshape(-1, 3)
        return flat.mean(axis=0), flat.std(axis=0)
    mean = ordered_sums(cv2.multiply(lab, weight.pixels).reshape(-1, 3)) / weight.total
    # A float32 mean is exact as OpenCV's Scalar (its stubs lack the Scalar form of subtract).
    centred = cv2.subtract(lab, (float(mean[0]), float(mean[1]), float(mean[2]), 0.0))  # type: ignore[call-overload]
    spread = cv2.multiply(cv2.multiply(centred, centred), weight.pixels)
    return mean, np.sqrt(ordered_sums(spread.reshape(-1, 3)) / weight.total)


def _lab_of(crop: Crop, weight: StatsWeight) -> np.ndarray:
    if crop.shape[:2] != weight.shape_hw:
        raise ValueError(f"expected crops of the same shape, got {crop.shape} and a mask of {weight.shape_hw}")
    return np.asarray(cv2.cvtColor(crop, cv2.COLOR_BGR2LAB))


def lab_source(source: Crop, weight: StatsWeight) -> LabSource:
    """``source`` (BGR uint8) in Lab with its statistics under ``weight``."""
    lab = _lab_of(source, weight)
    mean, std = _masked_stats(lab.astype(np.float32), weight)
    return LabSource(lab, mean, std)


def transfer_lab(source: LabSource, target: Crop, weight: StatsWeight) -> Crop:
    """The source recoloured to ``target``'s Lab statistics under ``weight`` (see :func:`color_transfer`).

    Every Lab channel of the source is a uint8 value, so each channel's new values are a table of
    256 entries, computed with the float32 arithmetic of the whole-crop formula (the same pixels).
    """
    if source.lab.shape != target.shape:
        raise ValueError(f"expected crops of the same shape, got {source.lab.shape} and {target.shape}")
    dst_mean, dst_std = _masked_stats(_lab_of(target, weight).astype(np.float32), weight)
    ratio = np.clip(dst_std / np.maximum(source.std, 1e-3), 0.25, 4.0)
    levels = np.arange(256, dtype=np.float32)[:, None]
    table = np.clip(np.rint((levels - source.mean) * ratio + dst_mean), 0, 255).astype(np.uint8)
    recoloured = cv2.LUT(source.lab, table.reshape(1, 256, 3))
    return np.asarray(cv2.cvtColor(recoloured, cv2.COLOR_LAB2BGR))


def color_transfer(source: Crop, target: Crop, mask: Mask | None = None) -> Crop:
    """Recolour ``source`` so its Lab mean and spread match ``target`` (Reinhard et al. 2001).

    Statistics are taken inside ``mask`` (weights in [0, 1]) when given. Both crops are BGR
    uint8 of the same size.
    """
    if source.shape != target.shape:
        raise ValueError(f"expected crops of the same shape, got {source.shape} and {target.shape}")
    weight = StatsWeight.of(mask, source.shape[:2])
    return transfer_lab(lab_source(source, weight), target, weight)
