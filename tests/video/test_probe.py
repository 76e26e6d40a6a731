"""probe(): exact frame rate and frame count, audio facts, typed errors; is_video_file()."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from fusion_ray.errors import VideoError
from fusion_ray.video import (
    VideoInfo,
    choose_fps,
    is_video_file,
    make_corrupt_video,
    make_test_video,
    probe,
)

NTSC = Fraction(30000, 1001)


@pytest.fixture(scope="module")
def clip_2997(tmp_path_factory: pytest.TempPathFactory, face: np.ndarray) -> Path:
    path = tmp_path_factory.mktemp("probe") / "ntsc.mp4"
    return make_test_video(path, face_image=face, n_frames=75, fps=NTSC, size_wh=(320, 180))


def test_probe_2997_is_an_exact_fraction_with_exact_frame_count(clip_2997: Path) -> None:
    info = probe(clip_2997)
    assert isinstance(info, VideoInfo)
    assert isinstance(info.fps, Fraction)
    assert info.fps == Fraction(30000, 1001)
    assert info.frame_count == 75
    assert (info.width, info.height) == (320, 180)
    assert info.size_wh == (320, 180)
    assert info.video_codec == "h264"
    assert info.pix_fmt == "yuv420p"
    assert info.duration_s == pytest.approx(75 * 1001 / 30000, abs=1e-6)
    assert info.path == clip_2997


def test_probe_reports_audio_of_the_same_duration(clip_2997: Path) -> None:
    info = probe(clip_2997)
    assert info.has_audio
    assert info.audio_codec == "aac"
    assert info.audio_duration_s == pytest.approx(75 * 1001 / 30000, abs=0.03)


@pytest.mark.parametrize(
    ("fps", "n_frames", "suffix"),
    [
        (Fraction(25), 60, ".mp4"),
        (Fraction(24000, 1001), 61, ".mp4"),
        # Matroska stores millisecond timestamps and no frame count: the count comes from
        # the packets and the rate must still come out exact.
        (NTSC, 67, ".mkv"),
    ],
)
def test_probe_rates_and_counts(tmp_path: Path, fps: Fraction, n_frames: int,
                                suffix: str) -> None:
    path = make_test_video(tmp_path / f"clip{suffix}", face_image=None, n_frames=n_frames,
                           fps=fps, size_wh=(160, 96), audio=False)
    info = probe(path)
    assert info.fps == fps
    assert info.frame_count == n_frames
    assert not info.has_audio
    assert info.audio_codec is None
    assert info.audio_duration_s is None


@pytest.mark.parametrize(
    ("average", "guessed", "expected"),
    [
        (NTSC, NTSC, NTSC),
        # MKV: the average is off by millisecond rounding, the guessed rate is clean.
        (Fraction(1000000, 33367), NTSC, NTSC),
        (Fraction(2997, 100), None, NTSC),
        (Fraction(25), Fraction(25), Fraction(25)),
        (None, Fraction(24), Fraction(24)),
        # Variable frame rate: trust the average, not the guess.
        (Fraction(1800, 100), Fraction(30), Fraction(18)),
    ],
)
def test_choose_fps(average: Fraction | None, guessed: Fraction | None,
                    expected: Fraction) -> None:
    assert choose_fps(average, guessed) == expected


def test_choose_fps_without_any_rate_raises() -> None:
    with pytest.raises(VideoError, match="frame rate"):
        choose_fps(None, Fraction(0))


def test_probe_corrupt_file_raises_video_error_naming_it(tmp_path: Path) -> None:
    bad = make_corrupt_video(tmp_path / "broken.mp4")
    with pytest.raises(VideoError, match="broken.mp4"):
        probe(bad)


def test_probe_missing_file_raises_video_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match=r"nothere\.mp4"):
        probe(tmp_path / "nothere.mp4")


def test_probe_image_without_video_stream_is_an_error_or_single_frame(images_dir: Path) -> None:
    # A JPEG opens as a one-frame "video" in FFmpeg; probe must not invent a frame rate crash.
    try:
        info = probe(images_dir / "obama.jpg")
    except VideoError as exc:
        assert "obama.jpg" in str(exc)
    else:
        assert info.frame_count == 1


def test_is_video_file(tmp_path: Path, clip_2997: Path, images_dir: Path) -> None:
    assert is_video_file(clip_2997)
    assert not is_video_file(images_dir / "obama.jpg")
    assert not is_video_file(tmp_path / "missing.mp4")
    assert not is_video_file(tmp_path)
    # Unknown extensions are opened: a real video is recognised, an image is not.
    disguised_video = tmp_path / "clip.bin"
    disguised_video.write_bytes(clip_2997.read_bytes())
    assert is_video_file(disguised_video)
    disguised_image = tmp_path / "photo.bin"
    disguised_image.write_bytes((images_dir / "obama.jpg").read_bytes())
    assert not is_video_file(disguised_image)
    garbage = tmp_path / "noise.bin"
    garbage.write_bytes(b"\x00\x01garbage" * 50)
    assert not is_video_file(garbage)


def test_video_info_is_frozen(clip_2997: Path) -> None:
    info = probe(clip_2997)
    with pytest.raises(AttributeError):
        info.fps = Fraction(30)  # type: ignore[misc]
    assert hash(info) == hash(probe(clip_2997))
