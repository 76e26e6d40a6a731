"""Pixel boost (pure functions): swap at k x the model size through k^2 pixel-interleaved tiles.

FaceFusion 3.8.1 (``processors/pixel_boost.py``), read for facts: the face
is warped at ``k x model size`` (the template scaled), split so that tile ``i * k + j`` is
``crop[i::k, j::k]``, each tile is swapped in its own batch-1 call, and the swapped tiles are
interleaved back. Here every tile of every face goes to the model in one batched call
(:func:`boosted_call`); the model sees the same inputs either way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fusion_ray.ops.align import align_face
from fusion_ray.types import AffineMatrix, Crop, Frame, Landmarks5

PIXEL_BOOST_SIZES = (128, 256, 384, 512, 768, 1024)
"""The ``--face-swapper-pixel-boost`` sizes FaceFusion offers (each a multiple of the model size)."""


def boost_factor(boost_size: int, model_size: int) -> int:
    """k = boost size / model size; ValueError unless it is a positive whole number."""
    if model_size <= 0 or boost_size < model_size or boost_size % model_size:
        raise ValueError(f"pixel boost {boost_size}: expected a multiple of the model size {model_size}")
    return boost_size // model_size


def boosted_crop(frame: Frame, landmarks_5: Landmarks5, template: str,
                 boost_size: int) -> tuple[Crop, AffineMatrix]:
    """The face warped at the boosted size: the model's template scaled to ``boost_size``."""
    return align_face(frame, landmarks_5, template, boost_size)


def split_tiles(crops: np.ndarray, k: int) -> np.ndarray:
    """(N, k*s, k*s, C) crops -> (N*k*k, s, s, C) tiles; tile ``n*k*k + i*k + j`` = ``crops[n, i::k, j::k]``."""
    if crops.ndim != 4 or k < 1 or crops.shape[1] != crops.shape[2] or crops.shape[1] % k:
        raise ValueError(f"expected (N, k*s, k*s, C) crops for k={k}, got {crops.shape}")
    n, size, _, channels = crops.shape
    s = size // k
    tiles = crops.reshape(n, s, k, s, k, channels).transpose(0, 2, 4, 1, 3, 5)
    return np.ascontiguousarray(tiles.reshape(n * k * k, s, s, channels))


def merge_tiles(tiles: np.ndarray, k: int) -> np.ndarray:
    """Inverse of :func:`split_tiles`: (N*k*k, s, s, C) tiles -> (N, k*s, k*s, C) crops."""
    if tiles.ndim != 4 or k < 1 or len(tiles) % (k * k) or tiles.shape[1] != tiles.shape[2]:
        raise ValueError(f"expected (N*k*k, s, s, C) tiles for k={k}, got {tiles.shape}")
    total, s, _, channels = tiles.shape
    n = total // (k * k)
    crops = tiles.reshape(n, k, k, s, s, channels).transpose(0, 3, 1, 4, 2, 5)
    return np.ascontiguousarray(crops.reshape(n, k * s, k * s, channels))


def boosted_call(crops: np.ndarray, k: int, model: Callable[[np.ndarray, np.ndarray], np.ndarray],
                 per_face: np.ndarray) -> np.ndarray:
    """Run ``model(tiles, per_tile)`` once on every tile of every face and merge the results.

    ``crops``: (N, k*s, k*s, 3) faces at the boosted size; ``per_face``: (N, ...) rows that go
    with each face (the source latents), repeated for its k^2 tiles. The model gets
    (N*k^2, s, s, 3) tiles in one call (batch it further inside if its export is fixed-size).
    """
    if len(per_face) != len(crops):
        raise ValueError(f"expected one per-face row per crop, got {len(per_face)} for {len(crops)}")
    tiles = split_tiles(crops, k)
    swapped = model(tiles, np.repeat(np.asarray(per_face), k * k, axis=0))
    if swapped.shape != tiles.shape:
        raise ValueError(f"the model returned {swapped.shape} for tiles of shape {tiles.shape}")
    return merge_tiles(swapped, k)


def per_tile_calls(crops: np.ndarray, k: int, model: Callable[[np.ndarray, np.ndarray], np.ndarray],
                   per_face: np.ndarray) -> np.ndarray:
    """FaceFusion's way, for comparison: one batch-1 call per tile (k^2 calls per face)."""
    tiles = split_tiles(crops, k)
    rows = np.repeat(np.asarray(per_face), k * k, axis=0)
    swapped = np.concatenate([model(tiles[i:i + 1], rows[i:i + 1]) for i in range(len(tiles))])
    return merge_tiles(swapped, k)
