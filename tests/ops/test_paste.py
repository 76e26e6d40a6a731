import numpy as np
import pytest

from fusion_ray.ops.align import align_face, template_points
from fusion_ray.ops.blend import poisson_paste
from fusion_ray.ops.mask import box_mask
from fusion_ray.ops.paste import crop_roi, paste_back


def _frame_and_matrix(size=128, offset=(200, 150), face=80):
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)
    landmarks = template_points("arcface_128", face) + np.array(offset)
    _, matrix = align_face(frame, landmarks, "arcface_128", size)
    return frame, matrix


@pytest.mark.parametrize("paste", [paste_back, poisson_paste])
def test_paste_changes_only_the_face_region(paste):
    frame, matrix = _frame_and_matrix()
    crop = np.full((128, 128, 3), 255, np.uint8)
    out = paste(frame, crop, matrix, box_mask(128, blur=0.3))
    roi = crop_roi(matrix, 128, frame.shape[:2])
    outside = np.ones(frame.shape[:2], bool)
    outside[roi.y0:roi.y1, roi.x0:roi.x1] = False
    assert np.array_equal(out[outside], frame[outside])
    assert not np.array_equal(out[roi.y0:roi.y1, roi.x0:roi.x1], frame[roi.y0:roi.y1, roi.x0:roi.x1])
    assert out is not frame and np.array_equal(frame, _frame_and_matrix()[0])  # input untouched


def test_paste_with_zero_mask_is_identity():
    frame, matrix = _frame_and_matrix()
    out = paste_back(frame, np.zeros((128, 128, 3), np.uint8), matrix, np.zeros((128, 128), np.float32))
    assert np.array_equal(out, frame)


def test_paste_with_full_mask_puts_the_crop_in_the_middle():
    frame, matrix = _frame_and_matrix()
    crop = np.full((128, 128, 3), 7, np.uint8)
    out = paste_back(frame, crop, matrix, np.ones((128, 128), np.float32))
    centre = np.linalg.solve(matrix[:, :2], np.array([64, 64]) - matrix[:, 2]).round().astype(int)
    assert (out[centre[1], centre[0]] == 7).all()


def test_face_partly_outside_the_frame_is_clipped():
    frame, matrix = _frame_and_matrix(offset=(-40, -30))
    out = paste_back(frame, np.full((128, 128, 3), 255, np.uint8), matrix, box_mask(128))
    assert out.shape == frame.shape
    roi = crop_roi(matrix, 128, frame.shape[:2])
    assert roi.x0 == 0 and roi.y0 == 0


def test_face_fully_outside_the_frame_changes_nothing():
    frame, matrix = _frame_and_matrix(offset=(5000, 5000))
    out = paste_back(frame, np.full((128, 128, 3), 255, np.uint8), matrix, box_mask(128))
    assert np.array_equal(out, frame)


def test_paste_rejects_mismatched_mask():
    frame, matrix = _frame_and_matrix()
    with pytest.raises(ValueError, match="mask"):
        paste_back(frame, np.zeros((128, 128, 3), np.uint8), matrix, np.ones((64, 64), np.float32))
