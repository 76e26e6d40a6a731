import numpy as np
import pytest

from fusion_ray.ops.mask import box_mask, ellipse_mask


@pytest.mark.parametrize("size,padding,blur", [
    (128, (0, 0, 0, 0), 0.0),
    (128, (0, 0, 0, 0), 0.3),
    (512, (0.1, 0.0, 0.2, 0.0), 0.3),
    (64, (0.25, 0.25, 0.25, 0.25), 1.0),
])
def test_box_mask_range_and_shape(size, padding, blur):
    mask = box_mask(size, padding=padding, blur=blur)
    assert mask.shape == (size, size) and mask.dtype == np.float32
    assert mask.min() >= 0.0 and mask.max() <= 1.0
    assert mask[size // 2, size // 2] > 0.9  # the centre is kept
    assert mask[0, 0] < 0.05 and mask[-1, -1] < 0.05  # corners are feathered away


def test_box_mask_padding_cuts_the_edges():
    mask = box_mask(100, padding=(0.2, 0.0, 0.0, 0.0), blur=0.0)
    assert mask[:20].max() == 0.0
    assert mask[50, 50] == 1.0


def test_hard_box_mask_is_binary():
    mask = box_mask(64, blur=0.0)
    assert set(np.unique(mask).tolist()) == {0.0, 1.0}


@pytest.mark.parametrize("kwargs,err", [
    ({"crop_size": 0}, "crop_size"),
    ({"crop_size": 64, "padding": (0.6, 0, 0, 0)}, "padding"),
    ({"crop_size": 64, "blur": 2.0}, "blur"),
])
def test_box_mask_rejects_bad_values(kwargs, err):
    with pytest.raises(ValueError, match=err):
        box_mask(**kwargs)


def test_ellipse_mask_covers_the_centre_not_the_corners():
    mask = ellipse_mask(128)
    assert mask[70, 64] > 0.9 and mask[0, 0] < 1e-3 and mask[127, 127] < 1e-3
