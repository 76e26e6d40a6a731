import cv2
import numpy as np
import pytest

from fusion_ray.ops.color import color_transfer


def test_color_transfer_matches_the_target_statistics():
    rng = np.random.default_rng(1)
    source = rng.integers(0, 120, (64, 64, 3), dtype=np.uint8)
    target = rng.integers(100, 255, (64, 64, 3), dtype=np.uint8)
    out = color_transfer(source, target)
    lab_out = cv2.cvtColor(out, cv2.COLOR_BGR2LAB).reshape(-1, 3).astype(float)
    lab_tgt = cv2.cvtColor(target, cv2.COLOR_BGR2LAB).reshape(-1, 3).astype(float)
    np.testing.assert_allclose(lab_out.mean(0), lab_tgt.mean(0), atol=3.0)


def test_color_transfer_keeps_structure():
    source = np.zeros((32, 32, 3), np.uint8)
    source[:, 16:] = 100
    target = np.full((32, 32, 3), 180, np.uint8)
    target[::2] = 160
    out = color_transfer(source, target)
    assert out[:, 20].mean() > out[:, 4].mean()  # the bright half stays brighter


def test_color_transfer_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="same shape"):
        color_transfer(np.zeros((8, 8, 3), np.uint8), np.zeros((4, 4, 3), np.uint8))
