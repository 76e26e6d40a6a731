"""plan_segments(): keyframe-aligned segments covering every frame exactly once."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
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
