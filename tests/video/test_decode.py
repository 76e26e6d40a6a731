"""decode_segment() / decode_all(): exact frames per segment, global indices, generators."""

from __future__ import annotations

import inspect
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.errors import VideoError
from fusion_ray.video import (
    DecodedFrame,
    Segment,
    decode_all,
    decode_segment,
    make_corrupt_video,
    make_test_video,
    plan_segments,
    probe,
)

NTSC = Fraction(30000, 1001)
N_FRAMES = 96
NO_FACE = (7, 50)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory, face: np.ndarray) -> Path:
    path = tmp_path_factory.mktemp("decode") / "clip.mp4"
    return make_test_video(path, face_image=face, n_frames=N_FRAMES, fps=NTSC,
                           size_wh=(320, 180), no_face_frames=NO_FACE, gop=24)


@pytest.fixture(scope="module")
def reference(clip: Path) -> list[DecodedFrame]:
    return list(decode_all(clip))


def test_decode_all_yields_every_frame_in_order(clip: Path,
                                                reference: list[DecodedFrame]) -> None:
    assert [f.index for f in reference] == list(range(N_FRAMES))
    pts = [f.pts for f in reference]
    assert pts == sorted(pts) and len(set(pts)) == N_FRAMES
    for f in reference:
        assert f.frame.shape == (180, 320, 3)
        assert f.frame.dtype == np.uint8
        assert f.time_s == pytest.approx(f.index * 1001 / 30000, abs=1e-6)


def _check_segments(path: Path, target_seconds: float, reference: list[DecodedFrame]) -> None:
    segments = plan_segments(path, target_seconds)
    assert len(segments) > 1
    seen: list[int] = []
    for seg in segments:
        frames = list(decode_segment(path, seg))
        assert [f.index for f in frames] == list(range(seg.start_frame, seg.end_frame))
        assert all(seg.contains_pts(f.pts) for f in frames)
        for f in frames:
            ref = reference[f.index]
            assert f.pts == ref.pts
            # Same decoder, same bitstream: identical pixels.
            np.testing.assert_array_equal(f.frame, ref.frame)
        seen.extend(f.index for f in frames)
    assert sorted(seen) == list(range(len(reference)))
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("target_seconds", [0.0, 1.0])
def test_segments_decode_to_exactly_the_straight_decode(
        clip: Path, reference: list[DecodedFrame], target_seconds: float) -> None:
    _check_segments(clip, target_seconds, reference)


def test_segments_of_mpeg_ts_decode_exactly(tmp_path: Path) -> None:
    # The MPEG-TS demuxer seeks by dts/byte position and can land after the keyframe;
    # decode_segment must still return exactly the planned frames.
    path = make_test_video(tmp_path / "clip.ts", face_image=None, n_frames=72, fps=NTSC,
                           size_wh=(160, 96), gop=24)
    _check_segments(path, 0.5, list(decode_all(path)))


def test_decode_segment_is_a_lazy_generator(clip: Path) -> None:
    seg = plan_segments(clip, 1.0)[1]
    gen = decode_segment(clip, seg)
    assert inspect.isgenerator(decode_segment(clip, seg))
    first = next(gen)
    assert first.index == seg.start_frame
    gen.close()  # releases the container; no list of frames was built
    assert inspect.isgenerator(decode_all(clip))
    # Opening a corrupt file fails on first use, with a typed error.
    assert inspect.isgenerator(decode_all(clip.parent / "does-not-exist.mp4"))


def test_no_face_frames_show_the_background_only(reference: list[DecodedFrame]) -> None:
    # A no-face frame matches the other no-face frame almost everywhere, and differs from
    # its neighbour (which shows the photo at about 60% of the height) over a large area.
    def changed(i: int, j: int) -> float:
        diff = np.abs(reference[i].frame.astype(np.int16) - reference[j].frame.astype(np.int16))
        return float((diff.max(axis=2) > 40).mean())

    a, b = NO_FACE
    assert changed(a, b) < 0.01
    assert changed(a, a + 1) > 0.08
    assert changed(b, b - 1) > 0.08


def test_decode_corrupt_file_raises_video_error_naming_it(tmp_path: Path) -> None:
    bad = make_corrupt_video(tmp_path / "corrupt.mp4")
    with pytest.raises(VideoError, match="corrupt.mp4"):
        next(decode_all(bad))
    with pytest.raises(VideoError, match="corrupt.mp4"):
        list(decode_segment(bad, Segment(0, 0, 10, 0, None)))


def test_decode_segment_detects_a_plan_that_does_not_match_the_file(clip: Path) -> None:
    seg = plan_segments(clip, 1.0)[0]
    wrong = replace(seg, frame_count=seg.frame_count + 1)
    with pytest.raises(VideoError, match=r"expected \d+ frames, decoded \d+"):
        list(decode_segment(clip, wrong))


def test_probe_and_plan_agree_on_the_frame_count(clip: Path) -> None:
    segments = plan_segments(clip, 1.0)
    assert sum(s.frame_count for s in segments) == probe(clip).frame_count == N_FRAMES
