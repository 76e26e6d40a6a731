"""The tracker on synthetic landmark sequences: matching, entering/leaving/crossing, gaps."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.tracks import (
    NO_TRACK,
    FrameFaces,
    Linker,
    Tracker,
    fill_gaps,
    track_segment,
)
from fusion_ray.types import Face

# A face's points in eye distances from its centre: 5 landmarks, then the box corners.
SHAPE = np.asarray([[-0.5, -0.3], [0.5, -0.3], [0.0, 0.2], [-0.4, 0.7], [0.4, 0.7],
                    [-1.1, -1.3], [1.1, 1.2]])


def face_points(cx: float, cy: float, eye: float = 40.0) -> np.ndarray:
    return SHAPE * eye + np.asarray([cx, cy])


def frame(*centres: tuple[float, float], eye: float = 40.0, order: list[int] | None = None) -> FrameFaces:
    if not centres:
        return FrameFaces.empty()
    pts = np.stack([face_points(cx, cy, eye) for cx, cy in centres])
    if order is not None:
        pts = pts[order]
    return FrameFaces.from_points(pts, np.full(len(pts), 0.9), np.full(len(pts), NO_TRACK), np.zeros(len(pts), bool))


def centre_of(faces: FrameFaces, tid: int) -> np.ndarray:
    row = int(np.flatnonzero(faces.track_id == tid)[0])
    return faces.landmarks_5[row, :3].mean(axis=0)


CFG = TrackingConfig(smoothing="off")


def test_frame_faces_validates_and_converts():
    faces = FrameFaces.from_faces([Face([0, 0, 10, 10], np.ones((5, 2)), 0.8)])
    assert len(faces) == 1 and faces.track_id.tolist() == [NO_TRACK] and faces.interpolated.tolist() == [False]
    assert faces.to_faces()[0].score == pytest.approx(0.8)
    with pytest.raises(ValueError, match=r"expected shape \(1, 5, 2\)"):
        FrameFaces(np.zeros((1, 4), np.float32), np.zeros((2, 5, 2), np.float32), np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="score: expected 1 values, got 2"):
        FrameFaces(np.zeros((1, 4), np.float32), np.zeros((1, 5, 2), np.float32), np.zeros(2, np.float32))
    points = frame((100, 100)).points()
    assert np.allclose(points, face_points(100, 100)[None], atol=1e-4)


def test_ids_follow_faces_whatever_the_detection_order():
    linker = Linker(CFG)
    first = linker.link(0, frame((100, 100), (300, 100)))
    assert first.tolist() == [0, 1]
    for f in range(1, 10):
        order = [1, 0] if f % 2 else [0, 1]
        ids = linker.link(f, frame((100 + 3 * f, 100), (300 - 2 * f, 100), order=order))
        assert ids.tolist() == [order[0], order[1]]


@pytest.mark.parametrize("frames,expected", [
    # a face entering on frame 3 gets a new id; the first keeps its own
    ([[(100, 100)]] * 3 + [[(100, 100), (400, 100)]] * 2, [[0]] * 3 + [[0, 1]] * 2),
    # a face leaving: the other keeps its id
    ([[(100, 100), (400, 100)]] * 2 + [[(400, 100)]] * 2, [[0, 1]] * 2 + [[1]] * 2),
    # a far jump is a different face, not the same track
    ([[(100, 100)], [(400, 300)]], [[0], [1]]),
])
def test_entering_leaving(frames, expected):
    linker = Linker(CFG)
    got = [linker.link(i, frame(*centres)).tolist() for i, centres in enumerate(frames)]
    assert got == expected


def test_face_back_within_keep_lost_keeps_its_id_and_later_gets_a_new_one():
    cfg = TrackingConfig(smoothing="off", keep_lost=5)
    linker = Linker(cfg)
    assert linker.link(0, frame((100, 100))).tolist() == [0]
    for f in range(1, 5):
        linker.link(f, frame())
    assert linker.link(5, frame((100, 100))).tolist() == [0]   # missed 4 frames <= keep_lost
    for f in range(6, 13):
        linker.link(f, frame())
    assert linker.link(13, frame((100, 100))).tolist() == [1]  # missed 7 frames: a new track


def test_track_predicted_outside_the_frame_ends():
    linker = Linker(CFG)
    for f in range(4):
        linker.link(f, frame((560 + 30 * f, 100)), frame_hw=(360, 640))
    linker.link(4, frame(), frame_hw=(360, 640))
    assert not linker.predict(5)  # its prediction left the frame: ended


def crossing(hide_overlap: bool) -> list[FrameFaces]:
    """Face A moves right, B moves left on the same line; while they overlap only A shows."""
    out = []
    for f in range(30):
        a, b = (100 + 10 * f, 200), (390 - 10 * f, 200)
        overlap = abs(a[0] - b[0]) < 90
        out.append(frame(a) if hide_overlap and overlap else frame(a, b))
    return out


@pytest.mark.parametrize("hide_overlap", [True, False])
def test_crossing_faces_keep_their_ids(hide_overlap):
    result = track_segment(crossing(hide_overlap), TrackingConfig(smoothing="off", max_gap=0))
    assert [sorted(f.track_id.tolist()) for f in (result[0], result[-1])] == [[0, 1], [0, 1]]
    assert centre_of(result[0], 0)[0] < centre_of(result[0], 1)[0]
    assert centre_of(result[-1], 0)[0] > centre_of(result[-1], 1)[0]  # A (id 0) ends on the right


def test_without_motion_prediction_crossing_would_swap_ids():
    # The check above can fail: linking to the last position instead swaps the ids.
    frames = crossing(hide_overlap=True)
    last_b = None
    for f, faces in enumerate(frames):
        if len(faces) == 2:
            if last_b is not None and f > 15:
                right = faces.landmarks_5[:, 0, 0].argmax()
                nearest = int(np.argmin(np.abs(faces.landmarks_5[:, 0, 0] - last_b)))
                assert nearest == right  # B's last seen position is nearer to A when they reappear
                return
            last_b = float(faces.landmarks_5[1, 0, 0])
    pytest.fail("the clip has no reappearance")


@pytest.mark.parametrize("frames,points,max_gap,expected_frames,expected_interp", [
    ([0, 1, 2], [0.0, 1.0, 2.0], 3, [0, 1, 2], [False] * 3),
    ([0, 4], [0.0, 4.0], 3, [0, 1, 2, 3, 4], [False, True, True, True, False]),
    ([0, 5], [0.0, 5.0], 3, [0, 5], [False, False]),                   # gap 4 > G: stays a gap
    ([0, 2, 7, 8], [0.0, 2.0, 7.0, 8.0], 3, [0, 1, 2, 7, 8], [False, True, False, False, False]),
    ([3], [3.0], 3, [3], [False]),
    ([0, 2], [0.0, 2.0], 0, [0, 2], [False, False]),
])
def test_fill_gaps(frames, points, max_gap, expected_frames, expected_interp):
    f, p, s, interp = fill_gaps(frames, np.asarray(points)[:, None], np.ones(len(frames)), max_gap)
    assert f.tolist() == expected_frames and interp.tolist() == expected_interp
    assert np.allclose(p[:, 0], f)  # linear points on a linear sequence


def moving_with_gap(hidden: set[int], n: int = 20) -> list[FrameFaces]:
    return [frame() if f in hidden else frame((100 + 5 * f, 150 + 2 * f)) for f in range(n)]


@pytest.mark.parametrize("hidden,max_gap,filled", [
    ({8}, 3, {8}),
    ({8, 9, 10}, 3, {8, 9, 10}),
    ({8, 9, 10, 11}, 3, set()),         # beyond G: not filled
    ({17, 18, 19}, 3, set()),           # the track ends for good: not extrapolated
    ({0, 1}, 3, set()),                 # nothing before a track's first detection
])
def test_track_segment_interpolates_gaps_up_to_g(hidden, max_gap, filled):
    result = track_segment(moving_with_gap(hidden), TrackingConfig(smoothing="off", max_gap=max_gap))
    for f, faces in enumerate(result):
        if f in hidden:
            assert len(faces) == (1 if f in filled else 0)
            if f in filled:
                assert faces.interpolated.tolist() == [True] and faces.track_id.tolist() == [0]
                assert np.allclose(centre_of(faces, 0), face_points(100 + 5 * f, 150 + 2 * f)[:3].mean(0), atol=1e-3)
        else:
            assert len(faces) == 1 and not faces.interpolated[0] and faces.track_id[0] == 0


def test_track_segment_smooths_jitter_and_keeps_motion():
    rng = np.random.default_rng(0)
    truth = np.stack([face_points(100 + 1.0 * f, 200) for f in range(40)])
    noisy = [FrameFaces.from_points((t + rng.normal(0, 1.0, t.shape))[None], [0.9], [NO_TRACK], [False])
             for t in truth]
    error, jitter = {}, {}
    for mode in ("off", "window", "one_euro"):
        result = np.stack([r.landmarks_5[0] for r in track_segment(noisy, TrackingConfig(smoothing=mode, one_euro_beta=2.0))])
        error[mode] = np.abs(result - truth[:, :5]).mean()
        jitter[mode] = np.abs(np.diff(result, 2, axis=0)).mean()
    assert error["window"] < 0.7 * error["off"] and jitter["window"] < 0.5 * jitter["off"]
    assert jitter["one_euro"] < 0.5 * jitter["off"] and error["one_euro"] < 1.5 * error["off"]


def test_online_tracker_holds_a_missed_face_for_at_most_g_frames():
    tracker = Tracker(TrackingConfig(max_gap=2, smoothing="off"))
    seen = []
    for f in range(10):
        faces = frame() if 4 <= f <= 7 else frame((100 + 5 * f, 100))
        out = tracker.update(f, faces)
        seen.append((len(out), out.interpolated.tolist()))
        if len(out):
            assert out.track_id.tolist() == [0]
            assert np.allclose(centre_of(out, 0), face_points(100 + 5 * f, 100)[:3].mean(0), atol=1e-3)
    assert seen[3:9] == [(1, [False]), (1, [True]), (1, [True]), (0, []), (0, []), (1, [False])]


def test_online_tracker_smooths_a_static_face():
    rng = np.random.default_rng(1)
    tracker = Tracker(TrackingConfig(smoothing="one_euro"), fps=30.0)
    truth = face_points(200, 200, eye=50)
    raw_err, out_err = [], []
    for f in range(60):
        noisy = truth + rng.normal(0, 1.0, truth.shape)
        out = tracker.update(f, FrameFaces.from_points(noisy[None], [0.9], [NO_TRACK], [False]))
        if f >= 20:
            raw_err.append(np.abs(noisy[:5] - truth[:5]).mean())
            out_err.append(np.abs(out.landmarks_5[0] - truth[:5]).mean())
    assert np.mean(out_err) < 0.5 * np.mean(raw_err)


def test_frames_must_come_in_order():
    linker = Linker(CFG)
    linker.link(3, frame((1, 1)))
    with pytest.raises(ValueError, match="increasing order"):
        linker.link(3, frame((1, 1)))
