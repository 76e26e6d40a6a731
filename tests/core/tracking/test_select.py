"""Selection decided per track: the chosen person stays chosen through a shot."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.core.tracking.select import (
    TrackSelection,
    last_frames,
    representative_faces,
    select_tracks,
)
from fusion_ray.core.tracking.tracks import FrameFaces


def faces(*rows: tuple[int, float, float]) -> FrameFaces:
    """Faces (track id, x, size): a square box at (x, 100) of side size."""
    if not rows:
        return FrameFaces.empty()
    boxes = np.asarray([[x, 100, x + s, 100 + s] for _, x, s in rows], np.float32)
    lm = np.repeat(boxes[:, None, :2], 5, axis=1) + np.asarray([[10, 10], [30, 10], [20, 20], [12, 30], [28, 30]], np.float32)
    return FrameFaces(boxes, lm, np.full(len(rows), 0.9, np.float32), np.asarray([r[0] for r in rows], np.int64))


def chosen(masks: list[np.ndarray], frames: list[FrameFaces]) -> list[list[int]]:
    return [f.track_id[m].tolist() for m, f in zip(masks, frames, strict=True)]


def test_index_choice_does_not_change_when_a_second_face_appears():
    # Person 7 alone, then person 3 appears on their left: per-frame 'index 0' would jump to 3.
    shot = [faces((7, 300, 80))] * 3 + [faces((3, 50, 80), (7, 300, 80))] * 3
    assert chosen(select_tracks(shot, "index", index=0), shot) == [[7]] * 6


def test_largest_choice_holds_while_its_track_lives_and_is_made_again_when_it_ends():
    shot = ([faces((1, 100, 120), (2, 400, 60))] * 2 + [faces((1, 100, 50), (2, 400, 90))] * 2
            + [faces((2, 400, 90), (4, 50, 140))] * 2)
    assert chosen(select_tracks(shot, "largest"), shot) == [[1]] * 4 + [[4]] * 2


def test_index_waits_for_enough_faces():
    shot = [faces((0, 100, 80))] * 2 + [faces((0, 100, 80), (1, 300, 80))] * 2 + [faces((1, 300, 80))]
    assert chosen(select_tracks(shot, "index", index=1), shot) == [[], [], [1], [1], [1]]


def test_reference_is_decided_once_per_track():
    ref = np.asarray([1.0, 0.0], np.float32)
    selection = TrackSelection("reference", reference=ref, max_distance=0.3)
    frame = faces((0, 100, 80), (1, 300, 80))
    assert selection.choose(frame).tolist() == [False, False]        # no embedding yet
    embeddings = {0: np.asarray([0.9, 0.1], np.float32), 1: np.asarray([0.0, 1.0], np.float32)}
    assert selection.choose(frame, embeddings=embeddings).tolist() == [True, False]
    flipped = {0: np.asarray([0.0, 1.0], np.float32), 1: np.asarray([1.0, 0.0], np.float32)}
    assert selection.choose(frame, embeddings=flipped).tolist() == [True, False]   # kept


def test_all_and_errors():
    assert TrackSelection("all").choose(faces((0, 1, 5), (1, 9, 5))).tolist() == [True, True]
    with pytest.raises(ValueError, match="unknown selection mode"):
        TrackSelection("biggest")
    with pytest.raises(ValueError, match="reference embedding"):
        TrackSelection("reference")


def test_last_frames_and_representative_faces():
    shot = [faces((0, 1, 5)), faces((0, 1, 5), (1, 9, 5)), faces((1, 9, 5))]
    shot[1] = FrameFaces(shot[1].bbox_xyxy, shot[1].landmarks_5, np.asarray([0.95, 0.6], np.float32),
                         shot[1].track_id, np.asarray([False, True]))
    assert last_frames(shot) == {0: 1, 1: 2}
    assert representative_faces(shot) == {0: (1, 0), 1: (2, 0)}   # interpolated faces are never taken


@pytest.mark.parametrize("mode", ["largest", "index"])
def test_a_tracks_first_choice_is_the_per_frame_choice(mode):
    # One selection function: on a shot's first frame a track choice is what select_faces picks.
    from fusion_ray.ops.select import select_faces

    rng = np.random.default_rng(7)
    for _ in range(20):
        rows = [(tid, float(rng.uniform(0, 600)), float(rng.uniform(20, 120))) for tid in range(int(rng.integers(1, 5)))]
        frame = faces(*rows)
        per_frame = select_faces(frame.to_faces(), mode, index=1)
        mask = TrackSelection(mode, index=1).choose(frame)
        assert frame.bbox_xyxy[mask].tolist() == [f.bbox_xyxy.tolist() for f in per_frame]


def test_index_counts_in_the_face_selector_order_and_the_choice_holds():
    # Person 3 (small, left) and person 7 (large, right): index 0 in order large-small is person 7,
    # in right-left too; a larger person appearing later does not take the choice over.
    shot = [faces((3, 50, 40), (7, 300, 80))] * 2 + [faces((3, 50, 40), (7, 300, 80), (9, 500, 120))] * 2
    for order in ("large-small", "right-left"):
        selection = TrackSelection("index", index=0, order=order)
        assert chosen([selection.choose(f) for f in shot], shot) == [[7]] * 4
    selection = TrackSelection("index", index=0)
    assert chosen([selection.choose(f) for f in shot], shot) == [[3]] * 4  # no order: reading order
