"""FaceBatch: validation, building, merging and the Ray Data column round trip."""

import dataclasses

import numpy as np
import pytest

from fusion_ray.core.facebatch import FACE_COLUMNS, NO_TRACK, FaceBatch, FrameBatch
from fusion_ray.types import Face


def face(x: float, score: float = 0.9) -> Face:
    points = np.array([[x + 3, 4], [x + 7, 4], [x + 5, 6], [x + 3, 8], [x + 7, 8]], np.float32)
    return Face(np.array([x, 0, x + 10, 12], np.float32), points, score)


def test_empty_has_every_array_with_zero_rows():
    empty = FaceBatch.empty()
    assert len(empty) == 0 and empty.landmarks_5.shape == (0, 5, 2) and empty.crop is None
    assert empty.counts(3).tolist() == [0, 0, 0]


@pytest.mark.parametrize("field,value,expected", [
    ("bbox_xyxy", np.zeros((2, 3)), "expected shape (2, 4), got (2, 3)"),
    ("landmarks_5", np.zeros((2, 4, 2)), "expected shape (2, 5, 2), got (2, 4, 2)"),
    ("score", np.zeros(3), "expected shape (2), got (3,)"),
    ("track_id", np.zeros((2, 1)), "expected shape (2), got (2, 1)"),
])
def test_validators_say_what_was_expected(field, value, expected):
    values = {"frame_index": np.zeros(2), "bbox_xyxy": np.zeros((2, 4)), "landmarks_5": np.zeros((2, 5, 2)),
              "score": np.zeros(2), "source_id": np.array(["a", "b"], object), "track_id": np.zeros(2)}
    values[field] = value
    with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        FaceBatch(**values)


def test_from_faces_keeps_frames_and_sources():
    batch = FaceBatch.from_faces([[face(0), face(20)], [], [face(40)]], ["s0", "s1", "s2"])
    assert batch.frame_index.tolist() == [0, 0, 2]
    assert batch.source_id.tolist() == ["s0", "s0", "s2"]
    assert batch.track_id.tolist() == [NO_TRACK] * 3
    assert batch.counts(3).tolist() == [2, 0, 1]
    assert [f.bbox_xyxy[0] for f in batch.faces()] == [0, 20, 40]


def test_merge_offsets_frames_and_keeps_crops():
    a = FaceBatch.from_faces([[face(0)]]).with_crops(np.ones((1, 8, 8, 3), np.uint8), np.zeros((1, 2, 3)))
    b = FaceBatch.from_faces([[], [face(5)]]).with_crops(np.zeros((1, 8, 8, 3), np.uint8), np.zeros((1, 2, 3)))
    merged = FaceBatch.merge([a, b], [0, 1])
    assert merged.frame_index.tolist() == [0, 2]
    assert merged.crop is not None and merged.crop.shape == (2, 8, 8, 3) and merged.crop[0].all()
    assert len(FaceBatch.merge([])) == 0


def test_columns_round_trip_per_frame():
    faces = FaceBatch.from_faces([[face(0), face(20)], [], [face(40)]], ["a", "b", "c"])
    crops = np.arange(3 * 4 * 4 * 3, dtype=np.uint8).reshape(3, 4, 4, 3)
    faces = faces.with_crops(crops, np.tile(np.eye(2, 3), (3, 1, 1)))
    columns = faces.to_columns(3)
    assert set(columns) == set(FACE_COLUMNS)
    assert [len(columns["face_bbox"][r]) for r in range(3)] == [2, 0, 1]
    back = FaceBatch.from_columns(columns, ["a", "b", "c"])
    assert back.frame_index.tolist() == [0, 0, 2] and back.source_id.tolist() == ["a", "a", "c"]
    assert np.array_equal(back.crop, crops) and np.allclose(back.landmarks_5, faces.landmarks_5)


def test_no_faces_still_has_the_crop_columns():
    columns = FaceBatch.empty().to_columns(2)
    assert set(columns) == set(FACE_COLUMNS)
    assert len(FaceBatch.from_columns(columns)) == 0


def test_take_and_without_frames():
    faces = FaceBatch.from_faces([[face(0)], [face(10)], [face(20)]])
    assert faces.without_frames([1]).frame_index.tolist() == [0, 2]
    assert faces.of_frame(2).bbox_xyxy[0, 0] == 20
    with pytest.raises(ValueError, match="expected aligned crops"):
        faces.require_crops()


def test_one_frame_from_landmarks_alone():
    points = np.array([[[10, 10], [20, 10], [15, 15], [11, 20], [19, 20]]], np.float32)
    faces = FaceBatch.one_frame(points)
    assert faces.frame_index.tolist() == [0] and faces.track_id.tolist() == [NO_TRACK]
    assert faces.bbox_xyxy.tolist() == [[10, 10, 20, 20]] and faces.score.tolist() == [1.0]
    assert len(FaceBatch.one_frame(np.zeros((0, 5, 2)))) == 0


def test_a_frame_batch_holds_one_error_per_frame_and_faces_of_its_frames():
    frames = [np.zeros((8, 8, 3), np.uint8)] * 2
    faces = FaceBatch.one_frame(np.ones((1, 5, 2), np.float32))
    batch = FrameBatch.of(frames, faces)
    assert batch.errors == ["", ""] and batch.first_error == "" and len(batch.faces) == 1
    batch.errors[1] = "frame 1: broken"  # the chain marks failed frames in place
    assert batch.first_error == "frame 1: broken"
    assert len(FrameBatch.of(frames).faces) == 0
    with pytest.raises(ValueError, match=r"expected 2 error entries \(one per frame\), got 1"):
        FrameBatch(frames, [""], faces)
    with pytest.raises(ValueError, match="expected face frame indices below 1, got 1"):
        FrameBatch(frames[:1], [""], FaceBatch.merge([faces, faces], [0, 1]))


def test_68_points_and_embeddings_travel_in_the_ray_columns() -> None:
    faces = FaceBatch.one_frame(np.zeros((2, 5, 2), np.float32))
    faces = dataclasses.replace(faces, landmarks_68=np.arange(2 * 68 * 2, dtype=np.float32).reshape(2, 68, 2),
                                embedding=np.ones((2, 512), np.float32))
    back = FaceBatch.from_columns(faces.to_columns(1))
    assert back.landmarks_68 is not None and np.array_equal(back.landmarks_68, faces.landmarks_68)
    assert back.embedding is not None and np.array_equal(back.embedding, faces.embedding)
