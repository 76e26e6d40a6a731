"""The header reader's alpha and bit-depth fields (Pillow's plugins, no decoding)."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from fusion_ray.imageheader import read_image_header


def _cv(ext: str, shape: tuple[int, ...], dtype: type) -> bytes:
    ok, data = cv2.imencode(ext, np.zeros(shape, dtype))
    assert ok
    return data.tobytes()


def _pil_png(mode: str, **save: object) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, (4, 4)).save(buffer, "PNG", **save)
    return buffer.getvalue()


@pytest.mark.parametrize(("data", "alpha", "deep"), [
    (_cv(".png", (4, 4, 3), np.uint8), False, False),
    (_cv(".png", (4, 4), np.uint8), False, False),
    (_cv(".png", (4, 4, 3), np.uint16), False, True),   # 48-bit RGB: Pillow's mode says RGB
    (_cv(".png", (4, 4), np.uint16), False, True),
    (_cv(".png", (4, 4, 4), np.uint8), True, False),
    (_cv(".png", (4, 4, 4), np.uint16), True, True),
    (_pil_png("P", transparency=0), True, False),       # a tRNS chunk
    (_pil_png("RGB", transparency=(0, 0, 0)), True, False),
    (_cv(".jpg", (4, 4, 3), np.uint8), False, False),
    (_cv(".webp", (4, 4, 3), np.uint8), False, False),
    (_cv(".webp", (4, 4, 4), np.uint8), True, False),
], ids=["rgb8", "grey8", "rgb16", "grey16", "rgba8", "rgba16", "palette_trns", "rgb_trns", "jpeg", "webp",
        "webp_alpha"])
def test_alpha_and_deep_samples_come_from_the_header(data, alpha, deep):
    header = read_image_header(data)
    assert (header.alpha, header.deep) == (alpha, deep)
    assert header.may_lose_in_8_bit == (alpha or deep)
