import numpy as np
import pytest

from fusion_ray.types import Face, check_frame

LM = np.zeros((5, 2), np.float32)


@pytest.mark.parametrize("kwargs,message", [
    ({"bbox_xyxy": [0, 0, 1], "landmarks_5": LM, "score": 0.5}, "expected 4 values"),
    ({"bbox_xyxy": [5, 0, 1, 1], "landmarks_5": LM, "score": 0.5}, "x1<=x2"),
    ({"bbox_xyxy": [0, 0, 1, 1], "landmarks_5": np.zeros((4, 2)), "score": 0.5}, r"expected shape \(5, 2\)"),
    ({"bbox_xyxy": [0, 0, 1, 1], "landmarks_5": LM, "score": 1.5}, "expected a value in"),
    ({"bbox_xyxy": [0, 0, np.nan, 1], "landmarks_5": LM, "score": 0.5}, "finite"),
])
def test_face_validation_messages(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Face(**kwargs)


def test_face_is_frozen_and_converts():
    face = Face([0, 0, 10, 20], LM, 0.5)
    assert face.bbox_xyxy.dtype == np.float32 and face.area == 200
    with pytest.raises(AttributeError):
        face.score = 0.1  # type: ignore[misc]
    assert face.with_embedding(np.ones(4)).embedding.shape == (4,)


@pytest.mark.parametrize("value,message", [
    ([1, 2, 3], "numpy array"),
    (np.zeros((4, 4, 3), np.float32), "uint8"),
    (np.zeros((4, 4), np.uint8), r"\(H, W, 3\)"),
    (np.zeros((0, 4, 3), np.uint8), "non-empty"),
])
def test_check_frame(value, message):
    with pytest.raises(ValueError, match=message):
        check_frame(value)
