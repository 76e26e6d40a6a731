"""encode_segment() / join_segments(): segment files, exact timestamps, audio copy, atomicity."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from fusion_ray.errors import VideoError
from fusion_ray.video import (
    EncodeOptions,
    decode_all,
    decode_segment,
    encode,
    encode_segment,
    join_segments,
    make_corrupt_video,
    make_test_video,
    plan_segments,
    probe,
    resolve_codec,
)

from .helpers import psnr

NTSC = Fraction(30000, 1001)
N_FRAMES = 90
SIZE_WH = (320, 180)
COMMENT = "made by fusion_ray tests"


def _video_packets(path: Path) -> list[tuple[int, int, bool, int | None]]:
    """(pts, dts, keyframe, duration) of every video packet, in decode order."""
    with av.open(str(path)) as container:
        return [(p.pts, p.dts, p.is_keyframe, p.duration)
                for p in container.demux(video=0)
                if p.size and p.pts is not None and p.dts is not None]


def _ticks_per_frame(stream: Any, fps: Fraction) -> Fraction:
    return 1 / (fps * Fraction(stream.time_base))


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".part"))


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, face: np.ndarray) -> Path:
    path = tmp_path_factory.mktemp("encode") / "source.mp4"
    return make_test_video(path, face_image=face, n_frames=N_FRAMES, fps=NTSC, size_wh=SIZE_WH,
                           no_face_frames=(10, 11), gop=30)


@pytest.fixture(scope="module")
def segment_files(source: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """decode segment -> encode segment, as a pipeline worker does (3 segments of 30)."""
    info = probe(source)
    out_dir = tmp_path_factory.mktemp("segments")
    paths = []
    for seg in plan_segments(source, 1.0):
        path = out_dir / f"seg_{seg.index:05d}.mp4"
        written = encode_segment((f.frame for f in decode_segment(source, seg)), path,
                                 fps=info.fps, width=info.width, height=info.height)
        assert written == seg.frame_count
        paths.append(path)
    assert len(paths) == 3
    return paths


@pytest.fixture(scope="module")
def joined(source: Path, segment_files: list[Path],
           tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("joined") / "out.mp4"
    join_segments(segment_files, out, fps=probe(source).fps, audio_source=source,
                  metadata={"comment": COMMENT})
    return out


# --- encode_segment -------------------------------------------------------------------------

def test_encode_segment_starts_on_a_keyframe_with_frame_number_pts(
        segment_files: list[Path]) -> None:
    for path in segment_files:
        packets = _video_packets(path)
        assert len(packets) == 30
        first = min(packets, key=lambda p: p[0])
        assert first[2], "the segment's first frame must be a keyframe"
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            ticks = _ticks_per_frame(stream, NTSC)
            assert stream.average_rate == NTSC
        assert sorted(p[0] for p in packets) == [round(i * ticks) for i in range(30)]


def test_encode_segment_round_trips_the_pixels(tmp_path: Path, source: Path) -> None:
    frames = [f.frame for f in decode_all(source)][:12]
    out = tmp_path / "seg.mp4"
    assert encode_segment(iter(frames), out, fps=NTSC, width=320, height=180) == 12
    back = [f.frame for f in decode_all(out)]
    assert len(back) == 12
    assert min(psnr(a, b) for a, b in zip(frames, back, strict=True)) > 30.0


def test_encoded_frames_keep_bgr_channel_order(tmp_path: Path) -> None:
    blue = np.zeros((64, 64, 3), np.uint8)
    blue[..., 0] = 255  # B in BGR
    path = tmp_path / "blue.mp4"
    assert encode_segment([blue] * 3, path, fps=Fraction(25), width=64, height=64) == 3
    frames = list(decode_all(path))
    assert len(frames) == 3
    mean = frames[0].frame.reshape(-1, 3).mean(axis=0)
    assert mean[0] > 200 and mean[1] < 40 and mean[2] < 40


def test_encode_segment_rejects_a_wrong_frame_and_leaves_no_file(tmp_path: Path) -> None:
    out = tmp_path / "bad.mp4"
    good = np.zeros((96, 160, 3), np.uint8)
    wrong = np.zeros((90, 160, 3), np.uint8)
    with pytest.raises(VideoError, match=r"bad\.mp4.*frame 1"):
        encode_segment([good, wrong], out, fps=NTSC, width=160, height=96)
    assert not out.exists()
    assert _leftovers(tmp_path) == []


def test_encode_segment_leaves_no_file_when_the_frame_source_fails(tmp_path: Path) -> None:
    def frames() -> Iterator[np.ndarray]:
        yield np.zeros((96, 160, 3), np.uint8)
        raise RuntimeError("upstream stage failed")

    out = tmp_path / "partial.mp4"
    with pytest.raises(RuntimeError, match="upstream"):
        encode_segment(frames(), out, fps=NTSC, width=160, height=96)
    assert not out.exists()
    assert _leftovers(tmp_path) == []


def test_encode_segment_with_no_frames_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match="no frames"):
        encode_segment([], tmp_path / "empty.mp4", fps=NTSC, width=160, height=96)
    assert not (tmp_path / "empty.mp4").exists()


def test_hardware_option_falls_back_to_software(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setattr(encode, "nvenc_usable", lambda: False)
    name, options = resolve_codec(EncodeOptions(hardware=True, crf=21))
    assert name == "libx264"
    assert options == {"crf": "21", "preset": "veryfast"}
    monkeypatch.setattr(encode, "nvenc_usable", lambda: True)
    name, options = resolve_codec(EncodeOptions(hardware=True, crf=21))
    assert name == "h264_nvenc"
    assert options["cq"] == "21" and options["preset"] == "p2"
    monkeypatch.undo()
    # The real check, whatever this machine has: hardware=True always produces a file.
    out = tmp_path / "hw.mp4"
    frames = [np.full((96, 160, 3), 128, np.uint8)] * 4
    assert encode_segment(frames, out, fps=NTSC, width=160, height=96,
                          options=EncodeOptions(hardware=True)) == 4
    assert probe(out).frame_count == 4


def test_encode_options_are_validated() -> None:
    with pytest.raises(ValueError):
        EncodeOptions(crf=99)
    with pytest.raises(ValueError):
        EncodeOptions(bogus=1)  # type: ignore[call-arg]


# --- join_segments --------------------------------------------------------------------------

def test_join_keeps_frame_count_and_exact_frame_rate(source: Path, joined: Path) -> None:
    src, out = probe(source), probe(joined)
    assert out.frame_count == src.frame_count == N_FRAMES
    assert out.fps == src.fps == Fraction(30000, 1001)
    assert out.duration_s == pytest.approx(src.duration_s, abs=1e-6)
    with av.open(str(joined)) as container:
        stream = container.streams.video[0]
        assert stream.average_rate == NTSC
        assert stream.guessed_rate == NTSC
        assert stream.frames == N_FRAMES
        ticks = _ticks_per_frame(stream, NTSC)
    # Continuous timestamps: exactly one frame every 1/fps, keyframes at segment starts.
    packets = _video_packets(joined)
    assert sorted(p[0] for p in packets) == [round(i * ticks) for i in range(N_FRAMES)]
    assert {p[0] for p in packets if p[2]} == {0, round(30 * ticks), round(60 * ticks)}
    dts = [p[1] for p in packets]
    assert dts == sorted(dts) and len(set(dts)) == len(dts)
    assert all(p[1] <= p[0] for p in packets)


def test_join_copies_the_audio_without_reencoding(source: Path, joined: Path) -> None:
    src, out = probe(source), probe(joined)
    assert out.has_audio and out.audio_codec == "aac"
    assert src.audio_duration_s is not None and out.audio_duration_s is not None
    assert abs(out.audio_duration_s - src.audio_duration_s) <= 0.05
    with av.open(str(source)) as a, av.open(str(joined)) as b:
        src_audio = [bytes(p) for p in a.demux(audio=0) if p.size]
        out_audio = [bytes(p) for p in b.demux(audio=0) if p.size]
    assert out_audio == src_audio  # the very same AAC packets


def test_join_interleaves_audio_and_video(tmp_path: Path) -> None:
    # Packets go to the muxer in time order, not all video then all audio (the muxer would
    # then buffer up to 10 s of packets and write long runs of one stream).
    fps = Fraction(25)
    # 24 s: longer than the muxer's 10 s interleaving window.
    src = make_test_video(tmp_path / "long.mp4", face_image=None, n_frames=600, fps=fps,
                          size_wh=(64, 64), gop=200)
    paths = []
    for k in range(3):
        path = tmp_path / f"seg_{k}.mp4"
        frames = (np.full((64, 64, 3), (k * 80 + i) % 256, np.uint8) for i in range(200))
        encode_segment(frames, path, fps=fps, width=64, height=64)
        paths.append(path)
    out = tmp_path / "out.mp4"
    join_segments(paths, out, fps=fps, audio_source=src, metadata={})
    with av.open(str(out)) as container:
        in_file_order = sorted((p.pos, float(p.dts * p.time_base))
                               for p in container.demux()
                               if p.size and p.pos is not None and p.dts is not None)
    times = [t for _, t in in_file_order]
    skew = max(max(times[: i + 1]) - t for i, t in enumerate(times))
    assert len(times) > 600
    assert skew < 1.5


def test_join_sets_the_metadata_comment(joined: Path) -> None:
    assert probe(joined).metadata.get("comment") == COMMENT


def test_join_frames_match_the_source(source: Path, joined: Path) -> None:
    src_frames = decode_all(source)
    out_frames = decode_all(joined)
    scores = [psnr(a.frame, b.frame) for a, b in zip(src_frames, out_frames, strict=True)]
    assert len(scores) == N_FRAMES
    assert min(scores) > 30.0


def test_join_with_a_one_frame_last_segment_keeps_the_rate(tmp_path: Path) -> None:
    # A 1-frame segment has no B-frame delay; the join must not leave a gap in decode time.
    src = make_test_video(tmp_path / "src.mp4", face_image=None, n_frames=61, fps=Fraction(25),
                          size_wh=(160, 96), audio=False, gop=30)
    segments = plan_segments(src, 1.0)
    assert [s.frame_count for s in segments] == [30, 30, 1]
    paths = []
    for seg in segments:
        path = tmp_path / f"seg_{seg.index}.mp4"
        encode_segment((f.frame for f in decode_segment(src, seg)), path, fps=Fraction(25),
                       width=160, height=96)
        paths.append(path)
    out = tmp_path / "out.mp4"
    join_segments(paths, out, fps=Fraction(25), audio_source=src, metadata={})
    info = probe(out)
    assert (info.fps, info.frame_count, info.has_audio) == (Fraction(25), 61, False)
    assert info.duration_s == pytest.approx(61 / 25)
    with av.open(str(out)) as container:
        assert container.streams.video[0].average_rate == Fraction(25)


def test_join_without_audio_source_has_no_audio(segment_files: list[Path],
                                                tmp_path: Path) -> None:
    out = tmp_path / "silent.mp4"
    join_segments(segment_files, out, fps=NTSC, audio_source=None, metadata={})
    info = probe(out)
    assert not info.has_audio
    assert info.frame_count == N_FRAMES


def test_join_skips_audio_mp4_cannot_hold(segment_files: list[Path], tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    # A-law PCM is not allowed in MP4: warn and write the video without audio.
    alaw = tmp_path / "alaw.wav"
    with av.open(str(alaw), "w") as container:
        stream = container.add_stream("pcm_alaw", rate=8000, layout="mono")
        samples = np.zeros((1, 8000), np.int16)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = 8000
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    out = tmp_path / "no_alaw.mp4"
    with caplog.at_level(logging.WARNING, logger="fusion_ray.video.encode"):
        join_segments(segment_files, out, fps=NTSC, audio_source=alaw, metadata={})
    assert not probe(out).has_audio
    assert any("pcm_alaw" in r.getMessage() and "alaw.wav" in r.getMessage()
               for r in caplog.records)


def test_join_with_a_missing_segment_writes_nothing(segment_files: list[Path],
                                                    tmp_path: Path, source: Path) -> None:
    out = tmp_path / "out.mp4"
    missing = tmp_path / "seg_missing.mp4"
    with pytest.raises(VideoError, match="seg_missing.mp4"):
        join_segments([segment_files[0], missing, segment_files[2]], out, fps=NTSC,
                      audio_source=source, metadata={"comment": COMMENT})
    assert not out.exists()
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("name", ["out.mkv", "out.webm", "out.avi", "out.png"])
def test_join_refuses_an_output_that_is_not_mp4_or_mov(segment_files: list[Path], tmp_path: Path,
                                                       name: str) -> None:
    with pytest.raises(VideoError, match=r"must end in \.mp4, \.m4v or \.mov"):
        join_segments(segment_files, tmp_path / name, fps=NTSC, audio_source=None, metadata={})
    assert not (tmp_path / name).exists()


def test_join_writes_m4v_and_upper_case_suffixes(segment_files: list[Path], tmp_path: Path) -> None:
    for name in ("out.m4v", "OUT.MOV"):
        join_segments(segment_files, tmp_path / name, fps=NTSC, audio_source=None, metadata={})
        assert probe(tmp_path / name).frame_count == sum(probe(p).frame_count for p in segment_files)


def test_join_with_a_corrupt_segment_keeps_the_old_output(segment_files: list[Path],
                                                          tmp_path: Path) -> None:
    out = tmp_path / "out.mp4"
    out.write_bytes(b"previous result")
    bad = make_corrupt_video(tmp_path / "seg_bad.mp4")
    with pytest.raises(VideoError, match="seg_bad.mp4"):
        join_segments([segment_files[0], bad], out, fps=NTSC, audio_source=None, metadata={})
    assert out.read_bytes() == b"previous result"
    assert _leftovers(tmp_path) == []


def test_join_rejects_segments_at_another_frame_rate(segment_files: list[Path],
                                                     tmp_path: Path) -> None:
    out = tmp_path / "out.mp4"
    with pytest.raises(VideoError, match="frame rate"):
        join_segments(segment_files, out, fps=Fraction(25), audio_source=None, metadata={})
    assert not out.exists()


def test_join_carries_differing_parameter_sets_in_band(source: Path, tmp_path: Path) -> None:
    # Segments from workers with different settings (e.g. a GPU worker and a CPU one).
    info = probe(source)
    paths = []
    for seg, preset in zip(plan_segments(source, 1.0), ["veryfast", "ultrafast", "medium"],
                           strict=True):
        path = tmp_path / f"seg_{seg.index}.mp4"
        encode_segment((f.frame for f in decode_segment(source, seg)), path, fps=info.fps,
                       width=info.width, height=info.height,
                       options=EncodeOptions(preset=preset))
        paths.append(path)
    out = tmp_path / "mixed.mp4"
    join_segments(paths, out, fps=info.fps, audio_source=None, metadata={})
    scores = [psnr(a.frame, b.frame)
              for a, b in zip(decode_all(source), decode_all(out), strict=True)]
    assert len(scores) == N_FRAMES and min(scores) > 30.0


def test_join_failing_after_it_started_writing_leaves_nothing(segment_files: list[Path],
                                                              tmp_path: Path) -> None:
    # The audio source is opened once the temporary output exists.
    out = tmp_path / "out.mp4"
    bad_audio = make_corrupt_video(tmp_path / "bad_audio.mp4")
    with pytest.raises(VideoError, match="bad_audio.mp4"):
        join_segments(segment_files, out, fps=NTSC, audio_source=bad_audio, metadata={})
    assert not out.exists()
    assert _leftovers(tmp_path) == []
