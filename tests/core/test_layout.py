"""Crop layouts: geometry from config alone, no models."""

import numpy as np
import pytest

from fusion_ray.config import EngineConfig, SwapConfig
from fusion_ray.core.layout import (
    align_crops,
    embed_layout,
    enhance_layout,
    paste_crops,
    swap_layout,
)


@pytest.mark.parametrize("swapper,template,size", [("inswapper", "arcface_128", 128), ("classic", "arcface_128", 256)])
def test_swap_layout_follows_the_swapper(swapper, template, size):
    layout = swap_layout(EngineConfig(swap=SwapConfig(swapper=swapper)))
    assert (layout.template, layout.size, layout.mask.shape) == (template, size, (size, size))


def test_enhance_and_embed_layouts_come_from_the_registry():
    assert (enhance_layout(EngineConfig()).template, enhance_layout(EngineConfig()).size) == ("ffhq_512", 512)
    assert (embed_layout(EngineConfig()).template, embed_layout(EngineConfig()).size) == ("arcface_112_v2", 112)


def test_align_then_paste_an_unchanged_crop_keeps_the_frame_close():
    rng = np.random.default_rng(0)
    frame = np.asarray(rng.integers(0, 255, (200, 200, 3)), np.uint8)
    frame = np.asarray(np.clip(frame.astype(int) // 4 + 96, 0, 255), np.uint8)
    points = np.array([[[80, 90], [120, 90], [100, 110], [85, 130], [115, 130]]], np.float32)
    layout = swap_layout(EngineConfig())
    crops, affines = align_crops(frame, points, layout)
    assert crops.shape == (1, 128, 128, 3) and affines.shape == (1, 2, 3)
    out = paste_crops(frame, crops, affines, layout)
    assert out is not frame and np.abs(out.astype(int) - frame).mean() < 8
    empty, _ = align_crops(frame, np.zeros((0, 5, 2)), layout)
    assert empty.shape == (0, 128, 128, 3)
    assert np.array_equal(paste_crops(frame, empty, np.zeros((0, 2, 3)), layout), frame)
