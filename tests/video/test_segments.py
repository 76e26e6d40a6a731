"""plan_segments(): keyframe-aligned segments covering every frame exactly once."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from fusion_ray.errors import VideoError
from fusion_ray.video import Segment, make_corrupt_video, make_test_video, plan_segments, probe

NTSC = Fraction(30000, 1001)


def _keyframe_pts(path: Path) -> tuple[set[int], list[int]]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        packets = [(p.pts, p.is_keyframe) for p in container.demux(stream)
                   if p.size and p.pts is not None]
        return {pts for pts, key in packets if key}, sorted(pts for pts, _ in packets)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 100 frames, a keyframe every 15 frames (about 0.5 s): keyframes at 0, 15, ..., 90.
    path = tmp_path_factory.mktemp("segments") / "clip.mp4"
    return make_test_video(path, face_image=None, n_frames=100, fps=NTSC, size_wh=(160, 96),
                           audio=False, gop=15)


@pytest.mark.parametrize("target_seconds", [0.0, 0.4, 1.0, 1.2, 4.0])
def test_segments_cover_every_frame_once_and_start_at_keyframes(
        clip: Path, target_seconds: float) -> None:
    segments = plan_segments(clip, target_seconds)
    keyframes, all_pts = _keyframe_pts(clip)
    info = probe(clip)

    covered = [i for s in segments for i in range(s.start_frame, s.end_frame)]
    assert covered == list(range(info.frame_count))
    assert [s.index for s in segments] == list(range(len(segments)))
    for seg in segments:
        assert isinstance(seg, Segment)
        assert seg.start_pts in keyframes
        assert seg.start_pts == all_pts[seg.start_frame]
        assert seg.frame_count > 0
    for seg, nxt in zip(segments, segments[1:], strict=False):
        assert seg.end_pts == nxt.start_pts
        # Every segment but the last lasts at least the target.
        assert (seg.end_pts - seg.start_pts) * info.time_base >= target_seconds
    assert segments[-1].end_pts is None
    # The pts ranges hold exactly the frames the indices say.
    for seg in segments:
        inside = [p for p in all_pts if seg.contains_pts(p)]
        assert len(inside) == seg.frame_count


def test_segment_boundaries_follow_the_gop(clip: Path) -> None:
    # Zero target: one segment per keyframe.
    assert [s.start_frame for s in plan_segments(clip, 0.0)] == [0, 15, 30, 45, 60, 75, 90]
    # 1.0 s = 29.97 frames: the first keyframe at or after 30 frames is frame 30.
    assert [(s.start_frame, s.frame_count) for s in plan_segments(clip, 1.0)] == [
        (0, 30), (30, 30), (60, 30), (90, 10)]
    # Longer than the clip: one segment.
    only = plan_segments(clip, 60.0)
    assert [(s.start_frame, s.frame_count, s.end_pts) for s in only] == [(0, 100, None)]


def test_segments_of_mpeg_ts_start_at_keyframes(tmp_path: Path) -> None:
    # MPEG-TS starts its timestamps at an offset and stores frames in decode order.
    path = make_test_video(tmp_path / "clip.ts", face_image=None, n_frames=60, fps=NTSC,
                           size_wh=(160, 96), audio=False, gop=20)
    segments = plan_segments(path, 0.5)
    keyframes, all_pts = _keyframe_pts(path)
    assert [s.start_frame for s in segments] == [0, 20, 40]
    assert all(s.start_pts in keyframes for s in segments)
    assert segments[0].start_pts == all_pts[0] > 0


def test_plan_segments_corrupt_file_raises_video_error(tmp_path: Path) -> None:
    bad = make_corrupt_video(tmp_path / "garbage.mkv")
    with pytest.raises(VideoError, match="garbage.mkv"):
        plan_segments(bad)


TRUNCATION_CLIP = {"face_image": None, "fps": Fraction(25), "size_wh": (160, 96), "audio": True, "gop": 10}


@pytest.mark.parametrize("suffix", [".mp4", ".mkv"])
def test_a_complete_video_has_no_shortfall(tmp_path: Path, suffix: str) -> None:
    from fusion_ray.video.segments import find_shortfall, index_packets

    clip = make_test_video(tmp_path / f"clip{suffix}", n_frames=50, **TRUNCATION_CLIP)
    index = index_packets(clip)
    assert len(index.pts) == 50 and index.hidden == 0
    assert index.shown_s == pytest.approx(2.0, abs=0.002)
    assert find_shortfall(probe(clip), index) is None


def test_frames_an_edit_list_hides_are_no_shortfall(tmp_path: Path) -> None:
    from fusion_ray.video.segments import find_shortfall, index_packets
    from fusion_ray.video.synthetic import make_edit_list_video

    clip = make_edit_list_video(tmp_path / "edit.mp4", hidden=4, n_frames=50, **TRUNCATION_CLIP)
    info, index = probe(clip), index_packets(clip)
    assert info.declared_frames == 50 and len(index.pts) == 46 and index.hidden == 4
    assert find_shortfall(info, index) is None
    assert sum(s.frame_count for s in plan_segments(clip, 0.5)) == 46


@pytest.mark.parametrize("keep", [0.4, 0.37, 0.6])
def test_a_truncated_faststart_mp4_falls_short_of_what_it_declares(tmp_path: Path, face: np.ndarray,
                                                                    keep: float) -> None:
    """The sample table (before the data) declares 100 frames; the bytes kept hold fewer. A packet
    the cut went through is incomplete: it is not present, and every present frame decodes."""
    from fusion_ray.video import decode_all
    from fusion_ray.video.segments import find_shortfall, index_packets
    from fusion_ray.video.synthetic import make_truncated_video

    clip = make_truncated_video(tmp_path / "cut.mp4", keep=keep, n_frames=100, **{**TRUNCATION_CLIP,
                                                                                    "face_image": face})
    info, index = probe(clip), index_packets(clip)
    assert info.declared_frames == info.frame_count == 100 and info.declared_duration_s == pytest.approx(4.0)
    shortfall = find_shortfall(info, index)
    assert shortfall is not None
    present = len(index.pts)
    assert 0 < present < 100 and shortfall.present_frames == present
    assert shortfall.declared_frames == 100 and shortfall.frames_missing == 100 - present
    assert shortfall.missing_from_s == pytest.approx(present / 25, abs=1e-6)
    assert "declares 100 frames (4.00 s) but only" in shortfall.describe(clip)
    assert len(list(decode_all(clip))) == present


def test_a_truncated_matroska_file_falls_short_of_its_duration(tmp_path: Path) -> None:
    """Matroska declares no sample count, only a duration: the shortfall comes from the duration."""
    from fusion_ray.video.segments import find_shortfall, index_packets

    clip = make_test_video(tmp_path / "clip.mkv", n_frames=100, **TRUNCATION_CLIP)
    data = clip.read_bytes()
    clip.write_bytes(data[: int(len(data) * 0.5)])
    info, index = probe(clip), index_packets(clip)
    assert info.declared_frames == 0 and info.declared_duration_s == pytest.approx(4.0)
    shortfall = find_shortfall(info, index)
    assert shortfall is not None and shortfall.declared_frames == 100
    assert shortfall.frames_missing == 100 - len(index.pts)


def test_a_cut_between_b_frames_and_their_reference_leaves_a_gap(tmp_path: Path) -> None:
    """Cut after a P-frame but before the B-frames shown before it: frames are missing before
    the last present one, and the shortfall starts at the first frame absent, not at the end."""
    from fusion_ray.video import decode_all
    from fusion_ray.video.segments import find_shortfall, index_packets
    from fusion_ray.video.synthetic import make_truncated_video

    clip = make_truncated_video(tmp_path / "cut.mp4", keep=0.4, n_frames=60, **{**TRUNCATION_CLIP, "gop": None})
    index = index_packets(clip)
    step = 512  # 1/25 s in the 1/12800 time base
    frames = [pts // step for pts in index.pts]
    assert frames[-2:] == [21, 24] and index.gap_pts == 22 * step
    shortfall = find_shortfall(probe(clip), index)
    assert shortfall is not None and shortfall.frames_missing == 60 - 23
    assert shortfall.missing_from_s == pytest.approx(22 / 25)
    assert [f.pts // step for f in decode_all(clip)] == frames
