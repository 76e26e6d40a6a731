"""The streaming offline tracker gives track_segment's faces with a bounded lookahead."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.config import TrackingConfig
from fusion_ray.core.tracking.redetect import merge
from fusion_ray.core.tracking.stream import SegmentTracks, lookahead
from fusion_ray.core.tracking.tracks import NO_TRACK, FrameFaces, track_segment

SHAPE = np.asarray([[-0.5, -0.3], [0.5, -0.3], [0.0, 0.2], [-0.4, 0.7], [0.4, 0.7],
                    [-1.1, -1.3], [1.1, 1.2]])
HW = (360, 640)


def faces_at(centres: list[tuple[float, float]], rng: np.random.Generator, eye: float = 40.0) -> FrameFaces:
    if not centres:
        return FrameFaces.empty()
    pts = np.stack([SHAPE * eye + np.asarray(c) + rng.normal(0, 0.8, SHAPE.shape) for c in centres])
    return FrameFaces.from_points(pts, rng.uniform(0.6, 0.95, len(pts)), np.full(len(pts), NO_TRACK),
                                  np.zeros(len(pts), bool))


def scene(n: int, seed: int) -> list[FrameFaces]:
    """A face sweeping right with 1-, 3- and 5-frame misses; a second one entering at frame 12
    and crossing the first; one frame with nobody."""
    rng = np.random.default_rng(seed)
    frames = []
    for f in range(n):
        centres = []
        if f not in (7, 20, 21, 22, 30, 31, 32, 33, 34, 40):
            centres.append((120 + 6 * f, 180 + 10 * np.sin(f / 5)))
        if f >= 12 and f != 40:
            centres.append((520 - 5 * (f - 12), 200))
        frames.append(faces_at(centres, rng))
    return frames


def stream(cfg: TrackingConfig, raw: list[FrameFaces], backfill: dict[int, dict[int, FrameFaces]], *,
           lookback: bool) -> tuple[list[tuple[int, FrameFaces]], int]:
    tracks = SegmentTracks(cfg, lookback=lookback, frame_hw=HW)
    out, peak = [], 0
    for f, faces in enumerate(raw):
        out += tracks.add(f, faces, backfill.get(f))
        peak = max(peak, tracks.pending)
    return out + tracks.finish(), peak


@pytest.mark.parametrize("cfg", [TrackingConfig(), TrackingConfig(smoothing="off"),
                                 TrackingConfig(smoothing="one_euro"),
                                 TrackingConfig(window_radius=4, window_order=2, max_gap=5),
                                 TrackingConfig(max_gap=0, full_every=3)])
@pytest.mark.parametrize("lookback", [True, False])
def test_the_stream_gives_the_whole_segments_faces(cfg, lookback):
    raw = scene(60, seed=1)
    # a face "found back" on frames 9-11 by a full detection at frame 12 (it entered earlier)
    rng = np.random.default_rng(5)
    found = {idx: faces_at([(520 + 5 * (12 - idx), 200)], rng) for idx in (9, 10, 11)}
    backfill = {12: found} if lookback and cfg.full_every >= 3 else {}
    expected_raw = [merge(r, found[f]) if backfill and f in found else r for f, r in enumerate(raw)]
    expected = track_segment(expected_raw, cfg, frame_hw=HW)
    got, peak = stream(cfg, raw, backfill, lookback=lookback)
    assert [f for f, _ in got] == list(range(60))
    assert peak == lookahead(cfg, lookback=lookback)  # bounded: this many frames held between calls
    for f, (want, (_, have)) in enumerate(zip(expected, got, strict=True)):
        assert have.track_id.tolist() == want.track_id.tolist(), f"frame {f}"
        assert have.interpolated.tolist() == want.interpolated.tolist(), f"frame {f}"
        assert np.allclose(have.landmarks_5, want.landmarks_5, atol=1e-3), f"frame {f}"
        assert np.allclose(have.bbox_xyxy, want.bbox_xyxy, atol=1e-3), f"frame {f}"
        assert np.allclose(have.score, want.score), f"frame {f}"


def test_gaps_are_filled_and_the_lookahead_is_what_the_settings_need():
    cfg = TrackingConfig(max_gap=3)
    assert lookahead(cfg, lookback=True) == 10 + 3 + 2
    assert lookahead(cfg, lookback=False) == 5
    assert lookahead(TrackingConfig(smoothing="off"), lookback=False) == 3
    got, _ = stream(cfg, scene(45, seed=2), {}, lookback=True)
    first = {f: faces for f, faces in got}
    assert first[7].interpolated.tolist() == [True]  # one frame missed: filled
    assert first[21].interpolated.tolist() == [True, False]  # three frames: filled
    assert 0 not in first[32].track_id.tolist()  # five frames: a gap, not filled
    assert first[33].track_id.tolist() == [1]


def test_frames_must_come_in_order_and_a_backfill_cannot_reach_linked_frames():
    cfg = TrackingConfig(full_every=2)
    tracks = SegmentTracks(cfg, lookback=True)
    rng = np.random.default_rng(0)
    for f in range(5):
        tracks.add(f, faces_at([(100, 100)], rng))
    with pytest.raises(ValueError, match="expected frame 5, got 7"):
        tracks.add(7, FrameFaces.empty())
    with pytest.raises(ValueError, match="frame 1 is already linked"):
        tracks.add(5, FrameFaces.empty(), {1: faces_at([(300, 100)], rng)})


def test_the_last_frames_faces_found_when_the_segment_ends_are_tracked():
    cfg = TrackingConfig()
    raw = scene(20, seed=3)
    last = faces_at([(120 + 6 * 19, 180 + 10 * np.sin(19 / 5))], np.random.default_rng(7))
    lacking = [*raw[:19], FrameFaces.empty()]
    tracks = SegmentTracks(cfg, lookback=True, frame_hw=HW)
    got = [out for f, faces in enumerate(lacking) for out in tracks.add(f, faces)]
    got += tracks.finish({19: last})
    expected = track_segment([*raw[:19], last], cfg, frame_hw=HW)
    assert [f for f, _ in got] == list(range(20))
    assert all(np.allclose(have.landmarks_5, want.landmarks_5, atol=1e-3) and
               have.track_id.tolist() == want.track_id.tolist() for (_, have), want in zip(got, expected, strict=True))


def test_live_tracks_and_best_detection():
    cfg = TrackingConfig(smoothing="off", max_gap=1, keep_lost=2, full_every=1)
    tracks = SegmentTracks(cfg, lookback=False)
    rng = np.random.default_rng(0)
    for f in range(4):
        tracks.add(f, faces_at([(100 + f, 100)], rng))
    best = tracks.best_detection(0, since=0)
    assert best is not None and best[1].track_id.tolist() == [0]
    assert tracks.live(0) == {0}
    for f in range(4, 10):
        tracks.add(f, FrameFaces.empty())
    assert tracks.live(9) == set() and tracks.best_detection(0, since=5) is None
