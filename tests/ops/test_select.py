import numpy as np
import pytest

from fusion_ray.ops.select import (
    cosine_distance,
    order_faces,
    select_faces,
    select_indices,
    sorted_positions,
)
from fusion_ray.types import Face


def face(x, size, embedding=None):
    landmarks = np.array([[x + 3, 3], [x + 7, 3], [x + 5, 5], [x + 3, 7], [x + 7, 7]], np.float32)
    return Face(np.array([x, 0, x + size, size], np.float32), landmarks, 0.9, embedding)


A = face(300, 10, np.array([1, 0, 0], np.float32))
B = face(100, 50, np.array([0, 1, 0], np.float32))
C = face(200, 20, np.array([0.9, 0.1, 0], np.float32))


@pytest.mark.parametrize("mode,kwargs,expected", [
    ("all", {}, [B, C, A]),
    ("largest", {}, [B]),
    ("index", {"index": 0}, [B]),
    ("index", {"index": 2}, [A]),
    ("index", {"index": 3}, []),
    ("reference", {"reference": np.array([1, 0, 0], np.float32), "max_distance": 0.1}, [C, A]),
    ("reference", {"reference": np.array([0, 0, 1], np.float32), "max_distance": 0.5}, []),
])
def test_select_faces(mode, kwargs, expected):
    assert select_faces([A, B, C], mode, **kwargs) == expected


@pytest.mark.parametrize("mode", ["all", "largest", "index", "reference"])
def test_no_face_is_an_empty_selection(mode):
    assert select_faces([], mode, reference=np.ones(3, np.float32)) == []


def test_bad_selection_arguments():
    with pytest.raises(ValueError, match="unknown selection"):
        select_faces([A], "random")
    with pytest.raises(ValueError, match="reference embedding"):
        select_faces([A], "reference")
    with pytest.raises(ValueError, match="non-negative"):
        select_faces([A], "index", index=-1)
    with pytest.raises(ValueError, match="embedding of every"):
        select_faces([face(0, 5)], "reference", reference=np.ones(3, np.float32))


def test_order_and_distance():
    assert order_faces([A, B, C]) == [B, C, A]
    assert cosine_distance(np.array([1.0, 0.0]), np.array([2.0, 0.0])) == pytest.approx(0.0)
    assert cosine_distance(np.array([1.0, 0.0]), np.array([-1.0, 0.0])) == pytest.approx(2.0)


@pytest.mark.parametrize("mode,kwargs,expected", [
    ("all", {}, [1, 2, 0]),
    ("largest", {}, [1]),
    ("index", {"index": 1}, [2]),
    ("index", {"index": 5}, []),
    ("reference", {"reference": np.array([1, 0, 0], np.float32), "max_distance": 0.1}, [2, 0]),
])
def test_select_indices_are_positions_in_reading_order(mode, kwargs, expected):
    boxes = np.asarray([f.bbox_xyxy for f in (A, B, C)])
    got = select_indices(boxes, mode, embeddings=[A.embedding, B.embedding, C.embedding], **kwargs)
    assert got == expected
    assert select_faces([A, B, C], mode, **kwargs) == [[A, B, C][i] for i in got]


def test_largest_tie_goes_to_the_first_face_in_reading_order():
    right, left = face(300, 20), face(100, 20)
    assert select_faces([right, left], "largest") == [left]
    assert select_indices(np.asarray([right.bbox_xyxy, left.bbox_xyxy]), "largest") == [1]


def test_no_face_is_empty_even_for_a_mode_that_could_not_run():
    # A per-row 'reference' without a reference embedding fails only on a frame with faces.
    assert select_indices(np.zeros((0, 4), np.float32), "reference") == []
    with pytest.raises(ValueError, match="reference embedding"):
        select_indices(np.zeros((1, 4), np.float32), "reference")


# FaceFusion's --face-selector-order: boxes at (x, y, size) with detector scores.
ORDER_BOXES = np.asarray([[300, 50, 310, 60], [100, 0, 150, 50], [200, 90, 220, 110]], np.float32)
ORDER_SCORES = np.asarray([0.9, 0.6, 0.7], np.float32)


@pytest.mark.parametrize("order,expected", [
    (None, [1, 2, 0]),
    ("left-right", [1, 2, 0]), ("right-left", [0, 2, 1]),
    ("top-bottom", [1, 0, 2]), ("bottom-top", [2, 0, 1]),
    ("small-large", [0, 2, 1]), ("large-small", [1, 2, 0]),
    ("best-worst", [0, 2, 1]), ("worst-best", [1, 2, 0]),
])
def test_sorted_positions_follow_facefusions_orders(order, expected):
    assert sorted_positions(ORDER_BOXES, order, ORDER_SCORES) == expected
    assert select_indices(ORDER_BOXES, "all", order=order, scores=ORDER_SCORES) == expected


def test_index_counts_in_the_order_and_largest_ignores_it():
    assert select_indices(ORDER_BOXES, "index", index=0, order="right-left") == [0]
    assert select_indices(ORDER_BOXES, "index", index=0, order="best-worst", scores=ORDER_SCORES) == [0]
    assert select_indices(ORDER_BOXES, "index", index=5, order="top-bottom") == []
    for order in (None, "small-large", "worst-best"):
        assert select_indices(ORDER_BOXES, "largest", order=order, scores=ORDER_SCORES) == [1]


def test_no_order_is_todays_reading_order():
    for mode in ("all", "largest", "index"):
        assert select_indices(ORDER_BOXES, mode, index=1, order=None) == select_indices(ORDER_BOXES, mode, index=1)


def test_order_by_score_needs_the_scores_and_an_unknown_order_is_refused():
    with pytest.raises(ValueError, match="score"):
        sorted_positions(ORDER_BOXES, "best-worst")
    with pytest.raises(ValueError, match="unknown face selector order"):
        sorted_positions(ORDER_BOXES, "biggest")


def test_select_faces_orders_by_the_faces_scores():
    low, high = Face(ORDER_BOXES[1], np.zeros((5, 2)), 0.6), Face(ORDER_BOXES[0], np.zeros((5, 2)), 0.9)
    assert select_faces([low, high], "all", order="best-worst") == [high, low]
    assert select_faces([low, high], "index", index=0, order="worst-best") == [low]
