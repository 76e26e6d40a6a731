"""join_segments() with a variable-frame-rate source: each frame keeps its source timestamp."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from fusion_ray.errors import VideoError
from fusion_ray.video import (
    decode_all,
    decode_segment,
    encode_segment,
    join_segments,
    make_test_video,
    plan_segments,
    probe,
)
from fusion_ray.video.timing import FrameTimes, read_frame_times

# 10 frames at 30 frames/s, then 10 at 15 frames/s (a phone that slowed down in low light).
VFR_TIMES = [Fraction(i, 30) for i in range(10)] + [Fraction(10, 30) + Fraction(i, 15) for i in range(10)]


def _packets(path: Path) -> tuple[Fraction, list[tuple[int, int]]]:
    """The video time base and (pts, dts) of every video packet in decode order."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return Fraction(stream.time_base), [(p.pts, p.dts) for p in container.demux(stream) if p.size]


def _audio_pts(path: Path) -> list[float]:
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        return [float(p.pts * stream.time_base) for p in container.demux(stream) if p.size]


@pytest.fixture(scope="module")
def vfr_source(tmp_path_factory: pytest.TempPathFactory, face: np.ndarray) -> Path:
    path = tmp_path_factory.mktemp("vfr") / "vfr.mp4"
    return make_test_video(path, face_image=face, n_frames=20, fps=Fraction(30), size_wh=(160, 96), gop=5,
                           frame_times=VFR_TIMES)


def _segments(source: Path, out_dir: Path) -> list[Path]:
    """decode segment -> encode segment at the probe's (average) rate, as the pipeline does."""
    info = probe(source)
    paths = []
    for seg in plan_segments(source, 0.2):
        path = out_dir / f"seg_{seg.index:05d}.mp4"
        encode_segment((f.frame for f in decode_segment(source, seg)), path, fps=info.fps, width=info.width,
                       height=info.height)  # veryfast: B-frames, so dts < pts is exercised
        paths.append(path)
    assert len(paths) > 1
    return paths


def test_frame_times_tell_variable_from_constant_rates(vfr_source: Path, tmp_path: Path) -> None:
    times = read_frame_times(vfr_source)
    fps = probe(vfr_source).fps
    assert times.time_base == Fraction(1, 90000) and times.pts[0] == times.start == 0
    assert [Fraction(p) * times.time_base for p in times.pts] == VFR_TIMES
    assert not times.is_constant(fps) and times.rate_range() == (15.0, 30.0)
    assert times.note(fps) == "variable frame rate (15 to 30 frames/s): the output keeps the source's frame timestamps"
    cfr = make_test_video(tmp_path / "cfr.mp4", face_image=None, n_frames=12, fps=Fraction(30000, 1001),
                          size_wh=(64, 48), audio=False)
    assert read_frame_times(cfr).note(probe(cfr).fps) is None
    # Millisecond timestamps (Matroska) of 29.97 frames/s are still a constant rate.
    ms = FrameTimes(Fraction(1, 1000), tuple(round(i * 1001 / 30) for i in range(300)), 0)
    assert ms.is_constant(Fraction(30000, 1001))


def test_join_keeps_the_source_timestamps_of_a_variable_rate_video(vfr_source: Path, tmp_path: Path) -> None:
    segments = _segments(vfr_source, tmp_path)
    out = tmp_path / "out.mp4"
    join_segments(segments, out, fps=probe(vfr_source).fps, audio_source=vfr_source,
                  frame_times=read_frame_times(vfr_source))
    time_base, packets = _packets(out)
    assert sorted(Fraction(pts) * time_base for pts, _ in packets) == VFR_TIMES
    dts = [d for _, d in packets]
    assert dts == sorted(set(dts)) and all(d <= p for p, d in packets)  # decodable order
    assert any(d < p for p, d in packets)  # there were B-frames to reorder
    frames = list(decode_all(out))
    assert [Fraction(f.time_s).limit_denominator(1000) for f in frames] == VFR_TIMES
    source = [f.frame for f in decode_all(vfr_source)]
    assert all(np.mean(np.abs(a.astype(int) - b.frame.astype(int))) < 4 for a, b in zip(source, frames, strict=True))
    # The audio is copied unchanged, so it still starts with the first frame and covers the last.
    assert _audio_pts(out) == _audio_pts(vfr_source)
    assert probe(out).duration_s == pytest.approx(probe(vfr_source).duration_s, abs=0.04)


def test_without_frame_times_the_join_is_constant_rate(vfr_source: Path, tmp_path: Path) -> None:
    """What a variable-rate source became before frame_times: frames at 1/fps, out of sync."""
    segments = _segments(vfr_source, tmp_path)
    fps = probe(vfr_source).fps
    out = tmp_path / "cfr.mp4"
    join_segments(segments, out, fps=fps)
    time_base, packets = _packets(out)
    assert sorted(Fraction(p) * time_base for p, _ in packets) == [i / fps for i in range(20)]


def test_constant_frame_times_change_nothing(tmp_path: Path) -> None:
    source = make_test_video(tmp_path / "cfr.mp4", face_image=None, n_frames=12, fps=Fraction(25),
                             size_wh=(64, 48), audio=False, gop=6)
    segments = _segments(source, tmp_path)
    join_segments(segments, tmp_path / "a.mp4", fps=Fraction(25))
    join_segments(segments, tmp_path / "b.mp4", fps=Fraction(25), frame_times=read_frame_times(source))
    assert _packets(tmp_path / "a.mp4") == _packets(tmp_path / "b.mp4")


def test_frame_times_of_another_length_are_an_error(vfr_source: Path, tmp_path: Path) -> None:
    segments = _segments(vfr_source, tmp_path)
    times = read_frame_times(vfr_source)
    short = FrameTimes(times.time_base, times.pts[:-1], times.start)
    with pytest.raises(VideoError, match="19 source timestamps for 20 frames"):
        join_segments(segments, tmp_path / "out.mp4", fps=probe(vfr_source).fps, frame_times=short)
    assert not (tmp_path / "out.mp4").exists()
