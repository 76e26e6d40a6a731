"""Pixel boost: pixel-interleaved tiles, split then merge, and one batched call for every tile."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.ops.align import template_points, transform_points
from fusion_ray.ops.pixel_boost import (
    boost_factor,
    boosted_call,
    boosted_crop,
    merge_tiles,
    per_tile_calls,
    split_tiles,
)


@pytest.mark.parametrize(("boost", "model", "k"), [(128, 128, 1), (256, 128, 2), (512, 128, 4), (1024, 128, 8),
                                                   (512, 256, 2), (1024, 256, 4)])
def test_boost_factor(boost: int, model: int, k: int) -> None:
    assert boost_factor(boost, model) == k


@pytest.mark.parametrize(("boost", "model"), [(64, 128), (300, 128), (512, 0)])
def test_boost_factor_rejects_sizes_that_are_not_multiples(boost: int, model: int) -> None:
    with pytest.raises(ValueError, match="multiple of the model size"):
        boost_factor(boost, model)


def test_tiles_are_pixel_interleaved_in_facefusion_order() -> None:
    rng = np.random.default_rng(0)
    crops = rng.integers(0, 256, (2, 12, 12, 3), dtype=np.uint8)
    tiles = split_tiles(crops, 3)
    assert tiles.shape == (18, 4, 4, 3)
    for n in range(2):
        for i in range(3):
            for j in range(3):
                np.testing.assert_array_equal(tiles[n * 9 + i * 3 + j], crops[n, i::3, j::3])


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("n", [1, 3])
def test_split_then_merge_is_the_identity(k: int, n: int) -> None:
    rng = np.random.default_rng(k * 10 + n)
    crops = rng.integers(0, 256, (n, 8 * k, 8 * k, 3), dtype=np.uint8)
    np.testing.assert_array_equal(merge_tiles(split_tiles(crops, k), k), crops)
    tiles = rng.random((n * k * k, 5, 5, 1)).astype(np.float32)
    np.testing.assert_array_equal(split_tiles(merge_tiles(tiles, k), k), tiles)


def test_split_rejects_a_size_that_k_does_not_divide() -> None:
    with pytest.raises(ValueError, match="k=3"):
        split_tiles(np.zeros((1, 10, 10, 3), np.uint8), 3)
    with pytest.raises(ValueError, match="k=2"):
        merge_tiles(np.zeros((3, 4, 4, 3), np.uint8), 2)


def _model(calls: list[int]):  # type: ignore[no-untyped-def]
    def run(tiles: np.ndarray, rows: np.ndarray) -> np.ndarray:
        calls.append(len(tiles))
        return (tiles.astype(np.int64) + rows[:, None, None, :1].astype(np.int64)) % 256
    return run


def test_one_batched_call_equals_facefusions_batch_1_calls() -> None:
    rng = np.random.default_rng(1)
    crops = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    per_face = np.array([[1], [2], [3]])
    batched_calls: list[int] = []
    single_calls: list[int] = []
    batched = boosted_call(crops, 4, _model(batched_calls), per_face)
    single = per_tile_calls(crops, 4, _model(single_calls), per_face)
    assert batched_calls == [48]  # every tile of every face at once
    assert single_calls == [1] * 48  # k^2 batch-1 calls per face
    np.testing.assert_array_equal(batched, single)
    np.testing.assert_array_equal(batched[1], (crops[1].astype(np.int64) + 2) % 256)  # each face's own row


def test_boosted_crop_scales_the_template() -> None:
    frame = np.zeros((400, 400, 3), np.uint8)
    landmarks = np.array([[150, 180], [250, 180], [200, 240], [160, 290], [240, 290]], np.float32)
    _, matrix = boosted_crop(frame, landmarks, "arcface_128", 512)
    mapped = transform_points(landmarks, matrix)
    assert np.abs(mapped - template_points("arcface_128", 512)).max() < 0.05 * 512
