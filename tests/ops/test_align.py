import numpy as np
import pytest

from fusion_ray.ops.align import (
    TEMPLATES,
    align_face,
    align_matrix,
    estimate_similarity,
    invert_affine,
    template_points,
    transform_points,
)


def _similarity(angle_deg: float, scale: float, tx: float, ty: float) -> np.ndarray:
    a = np.deg2rad(angle_deg)
    r = scale * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return np.hstack([r, [[tx], [ty]]])


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("crop_size", [112, 128, 256, 512])
@pytest.mark.parametrize("angle,scale,tx,ty", [(0, 1, 0, 0), (17, 2.5, 300, 120), (-40, 0.4, 10, 900)])
def test_template_round_trip(template, crop_size, angle, scale, tx, ty):
    """Landmarks made by moving the template with a similarity map back onto the template exactly."""
    dst = template_points(template, crop_size)
    frame_to_crop = _similarity(angle, scale, tx, ty)
    landmarks = transform_points(dst, invert_affine(frame_to_crop))
    matrix = align_matrix(landmarks, template, crop_size)
    np.testing.assert_allclose(transform_points(landmarks, matrix), dst, atol=1e-6)
    np.testing.assert_allclose(matrix, frame_to_crop, atol=1e-6)


@pytest.mark.parametrize("src,dst,err", [
    (np.zeros((5, 2)), np.zeros((4, 2)), "point sets"),
    (np.zeros((5, 3)), np.zeros((5, 3)), "point sets"),
    (np.ones((5, 2)), np.zeros((5, 2)), "degenerate"),
])
def test_estimate_similarity_rejects_bad_points(src, dst, err):
    with pytest.raises(ValueError, match=err):
        estimate_similarity(src, dst)


def test_unknown_template_is_an_error():
    with pytest.raises(ValueError, match="unknown template"):
        template_points("nope", 112)


def test_align_face_crop_shows_the_landmark_region():
    frame = np.zeros((400, 400, 3), np.uint8)
    frame[150:250, 150:250] = 200  # a bright square around the "face"
    landmarks = template_points("arcface_112_v2", 100) + 150
    crop, matrix = align_face(frame, landmarks, "arcface_112_v2", 112)
    assert crop.shape == (112, 112, 3)
    assert crop[56, 56, 0] == 200  # the centre of the crop is inside the square
    assert matrix.shape == (2, 3)
