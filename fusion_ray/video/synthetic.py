"""Synthetic test clips: a face moving over a background with a sine-tone track; corrupt files.

These are for tests and benchmarks; they write real H.264/AAC MP4 files with PyAV so that
the rest of the video layer is exercised on the same kind of input as production.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from fusion_ray.errors import VideoError

logger = logging.getLogger(__name__)

AUDIO_SAMPLE_RATE = 48_000
AUDIO_TONE_HZ = 440.0
_AAC_FRAME_SIZE = 1024


def _cartoon_face(height: int) -> np.ndarray:
    """A drawn face (skin ellipse, eyes, nose, mouth) for when no photo is given."""
    width = int(height * 0.8)
    img = np.full((height, width, 3), (200, 200, 200), np.uint8)
    centre = (width // 2, height // 2)
    cv2.ellipse(img, centre, (int(width * 0.42), int(height * 0.47)), 0, 0, 360,
                (140, 170, 220), -1, cv2.LINE_AA)
    eye_y = int(height * 0.42)
    for ex in (int(width * 0.33), int(width * 0.67)):
        cv2.circle(img, (ex, eye_y), max(2, height // 18), (60, 40, 30), -1, cv2.LINE_AA)
    cv2.line(img, (width // 2, int(height * 0.48)), (width // 2, int(height * 0.62)),
             (90, 110, 160), max(1, height // 60), cv2.LINE_AA)
    cv2.ellipse(img, (width // 2, int(height * 0.74)), (int(width * 0.16), int(height * 0.05)),
                0, 0, 180, (60, 60, 150), max(1, height // 50), cv2.LINE_AA)
    return img


def _background(size_wh: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A smooth colour gradient with mild noise (static, so it compresses well)."""
    width, height = size_wh
    xs = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]
    ys = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    bg = np.empty((height, width, 3), np.float32)
    bg[..., 0] = 90 + 60 * xs + 0 * ys
    bg[..., 1] = 110 + 40 * ys + 0 * xs
    bg[..., 2] = 70 + 50 * (1 - xs) * ys
    bg += rng.normal(0.0, 4.0, size=bg.shape).astype(np.float32)
    return np.clip(bg, 0, 255).astype(np.uint8)


def _fit_face(face: np.ndarray, size_wh: tuple[int, int]) -> np.ndarray:
    """Scale the face image to about 60% of the frame height (and at most 45% of its width)."""
    width, height = size_wh
    fh, fw = face.shape[:2]
    scale = min(0.6 * height / fh, 0.45 * width / fw)
    new_w = min(width, max(1, int(round(fw * scale))))
    new_h = min(height, max(1, int(round(fh * scale))))
    return cv2.resize(face, (new_w, new_h), interpolation=cv2.INTER_AREA)


def _face_position(i: int, n_frames: int, size_wh: tuple[int, int],
                   face_wh: tuple[int, int]) -> tuple[int, int]:
    """Top-left corner of the face at frame i: a smooth left-to-right sweep with a gentle bob."""
    width, height = size_wh
    fw, fh = face_wh
    t = i / max(1, n_frames - 1)
    x = int(round((width - fw) * (0.5 - 0.5 * math.cos(math.pi * t))))
    y = int(round((height - fh) * (0.5 + 0.25 * math.sin(2 * math.pi * t))))
    return x, y


def render_frame(i: int, *, n_frames: int, background: np.ndarray,
                 face: np.ndarray | None) -> np.ndarray:
    """One BGR frame of the synthetic clip (the face pasted at its position for frame i)."""
    frame = background.copy()
    if face is None:
        return frame
    height, width = background.shape[:2]
    fh, fw = face.shape[:2]
    x, y = _face_position(i, n_frames, (width, height), (fw, fh))
    frame[y:y + fh, x:x + fw] = face
    return frame


def make_test_video(
    path: str | Path,
    *,
    face_image: np.ndarray | None,
    n_frames: int,
    fps: Fraction = Fraction(30000, 1001),
    size_wh: tuple[int, int] = (640, 360),
    audio: bool = True,
    no_face_frames: Sequence[int] = (),
    gop: int | None = None,
    seed: int = 0,
    frame_times: Sequence[Fraction] | None = None,
) -> Path:
    """Write an H.264 (+ AAC sine tone) MP4 where a face sweeps smoothly across a background.

    Args:
        path: output file (.mp4, .mov or .mkv; the format follows the extension).
        face_image: BGR uint8 face photo; None draws a cartoon face.
        n_frames: number of video frames.
        fps: exact frame rate (a Fraction; 30000/1001 by default).
        size_wh: frame size; even sizes are yuv420p, odd ones yuv444p (4:2:0 needs even sizes).
        audio: add a 440 Hz AAC tone lasting exactly n_frames / fps seconds (see frame_times).
        no_face_frames: frame indices that show the background only.
        gop: keyframe interval in frames; None means about one second (round(fps)).
        seed: seed of the background noise.
        frame_times: each frame's presentation time in seconds (increasing, from 0), for a
            variable-frame-rate clip (time base 1/90000); None: frame i at i / fps. The
            audio then lasts until the last frame's time + 1 / fps.

    Returns:
        The path written.
    """
    path = Path(path)
    fps = Fraction(fps)
    width, height = size_wh
    if n_frames <= 0:
        raise ValueError(f"n_frames must be positive, got {n_frames}")
    if width <= 0 or height <= 0:
        raise ValueError(f"size_wh must be positive, got {size_wh}")
    gop = gop if gop is not None else max(1, round(fps))
    times, time_base = _clip_times(n_frames, fps, frame_times)
    background = _background(size_wh, np.random.default_rng(seed))
    face = _fit_face(_face_source(face_image, height), size_wh)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with av.open(str(path), mode="w") as out:
            _encode_clip(out, background=background, face=face, hidden=set(no_face_frames),
                         times=times, time_base=time_base, fps=fps, gop=gop, audio=audio)
    except (av.FFmpegError, OSError) as exc:
        raise VideoError(f"cannot write test video {path}: {exc}") from exc
    logger.debug("wrote synthetic clip %s (%d frames at %s fps)", path, n_frames, fps)
    return path


def write_frames_video(path: str | Path, frames: Sequence[np.ndarray], *, fps: Fraction,
                       audio_lead_s: float = 0.0, crf: int = 20) -> Path:
    """Write ``frames`` (BGR uint8, one size) as an H.264 (+ AAC tone) MP4 with a keyframe every
    second; the tone starts ``audio_lead_s`` (rounded to whole frames) before the first frame, as
    phone and camera files often have it."""
    path = Path(path)
    fps = Fraction(fps)
    if not frames:
        raise ValueError("no frames to write")
    lead = round(audio_lead_s * fps)
    times = [(i + lead) / fps for i in range(len(frames))]
    height, width = frames[0].shape[:2]
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with av.open(str(path), mode="w") as out:
            _encode_frames(out, frames, (width, height), times=times, time_base=1 / fps, fps=fps,
                           gop=max(1, round(fps)), audio=True, crf=crf)
    except (av.FFmpegError, OSError) as exc:
        raise VideoError(f"cannot write video {path}: {exc}") from exc
    return path


def _encode_clip(out: Any, *, background: np.ndarray, face: np.ndarray, hidden: set[int],
                 times: Sequence[Fraction], time_base: Fraction, fps: Fraction, gop: int,
                 audio: bool) -> None:
    """Encode and mux every rendered frame (each at its time) and, with ``audio``, the tone beside it."""
    height, width = background.shape[:2]
    n_frames = len(times)
    images = (render_frame(i, n_frames=n_frames, background=background, face=None if i in hidden else face)
              for i in range(n_frames))
    _encode_frames(out, images, (width, height), times=times, time_base=time_base, fps=fps, gop=gop, audio=audio)


def _encode_frames(out: Any, images: Iterable[np.ndarray], size_wh: tuple[int, int], *,
                   times: Sequence[Fraction], time_base: Fraction, fps: Fraction, gop: int, audio: bool,
                   crf: int = 20) -> None:
    """Encode and mux ``images`` (each at its time) and, with ``audio``, the tone from time 0 beside them."""
    n_frames = len(times)
    vstream = _add_video_stream(out, fps, gop, size_wh, time_base, crf)
    astream = out.add_stream("aac", rate=AUDIO_SAMPLE_RATE, layout="mono") if audio else None
    total_samples = int(round((times[-1] + 1 / fps) * AUDIO_SAMPLE_RATE))
    samples_done = 0
    for i, img in enumerate(images):
        vframe = av.VideoFrame.from_ndarray(img, format="bgr24")
        vframe.pts = round(times[i] / time_base)
        vframe.time_base = time_base
        out.mux(vstream.encode(vframe))
        if astream is not None:
            last = i == n_frames - 1
            until = total_samples if last else int(times[i + 1] * AUDIO_SAMPLE_RATE)
            samples_done = _mux_tone(out, astream, samples_done, until, total_samples, last)
    out.mux(vstream.encode(None))
    if astream is not None:
        out.mux(astream.encode(None))


def _clip_times(n_frames: int, fps: Fraction, frame_times: Sequence[Fraction] | None
                ) -> tuple[list[Fraction], Fraction]:
    """Each frame's time in seconds (validated) and the video time base (1/90000 or 1/fps)."""
    times = [Fraction(t) for t in frame_times] if frame_times is not None else [i / fps for i in range(n_frames)]
    if len(times) != n_frames or any(b <= a for a, b in zip(times, times[1:], strict=False)) or times[0] < 0:
        raise ValueError("frame_times must be n_frames increasing times from 0")
    time_base = Fraction(1, 90000) if frame_times is not None else 1 / fps
    return times, time_base


def _face_source(face_image: np.ndarray | None, height: int) -> np.ndarray:
    """The face photo (checked to be BGR uint8), or a cartoon face when None."""
    face_src = face_image if face_image is not None else _cartoon_face(height)
    if face_src.ndim != 3 or face_src.shape[2] != 3 or face_src.dtype != np.uint8:
        raise ValueError(
            f"face_image must be BGR uint8 HxWx3, got {face_src.dtype} {face_src.shape}")
    return face_src


def _add_video_stream(out: Any, fps: Fraction, gop: int, size_wh: tuple[int, int],
                      time_base: Fraction, crf: int = 20) -> Any:
    """An H.264 stream with a fixed keyframe interval (gop frames) and the given time base."""
    width, height = size_wh
    vstream = out.add_stream(
        "libx264", rate=fps,
        options={"crf": str(crf), "preset": "veryfast", "g": str(gop),
                 "keyint_min": str(gop), "sc_threshold": "0"},
    )
    vstream.width = width
    vstream.height = height
    vstream.pix_fmt = "yuv420p" if width % 2 == 0 and height % 2 == 0 else "yuv444p"
    vstream.time_base = time_base
    vstream.codec_context.time_base = time_base
    vstream.codec_context.thread_count = 2
    return vstream


def _mux_tone(out: Any, astream: Any, samples_done: int, until: int, total_samples: int,
              last: bool) -> int:
    """Encode and mux tone samples up to ``until``; returns the new number of samples done.

    Keeps audio level with video so the muxer interleaves without buffering: full
    1024-sample AAC frames, the remainder after the last video frame (``last``).
    """
    while samples_done < until and (last or samples_done + _AAC_FRAME_SIZE <= until):
        count = min(_AAC_FRAME_SIZE, total_samples - samples_done)
        out.mux(astream.encode(_tone(samples_done, count)))
        samples_done += count
    return samples_done


def _tone(start: int, count: int) -> av.AudioFrame:
    t = (np.arange(start, start + count, dtype=np.float64)) / AUDIO_SAMPLE_RATE
    samples = (0.3 * np.sin(2 * np.pi * AUDIO_TONE_HZ * t)).astype(np.float32)[None, :]
    frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
    frame.sample_rate = AUDIO_SAMPLE_RATE
    frame.pts = start
    frame.time_base = Fraction(1, AUDIO_SAMPLE_RATE)
    return frame


def _remux(source: Path, path: Path, *, options: dict[str, str] | None = None, video_shift: int = 0) -> None:
    """Copy every packet of ``source`` into ``path``; video timestamps moved by ``video_shift``."""
    try:
        with av.open(str(source)) as src, av.open(str(path), mode="w", options=options or {}) as out:
            streams = {s.index: out.add_stream_from_template(s) for s in src.streams}
            for packet in src.demux():
                if packet.dts is None:
                    continue  # the demuxer's flush packet
                if packet.stream.type == "video" and video_shift and packet.pts is not None:
                    packet.pts -= video_shift
                    packet.dts -= video_shift
                packet.stream = streams[packet.stream.index]
                out.mux(packet)
    except (av.FFmpegError, OSError) as exc:
        raise VideoError(f"cannot write test video {path}: {exc}") from exc


def make_truncated_video(path: str | Path, *, keep: float = 0.4, **clip: object) -> Path:
    """A faststart MP4 (the sample table before the data) cut to its first ``keep`` of bytes.

    Its container still declares every frame of the clip that ``make_test_video(**clip)``
    writes; only the frames in the bytes kept are present. Like a download that stopped.
    """
    path = Path(path)
    full = path.with_name(path.stem + ".full.mp4")
    make_test_video(full, **clip)  # type: ignore[arg-type]
    _remux(full, path, options={"movflags": "faststart"})
    full.unlink()
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def make_edit_list_video(path: str | Path, *, hidden: int, **clip: object) -> Path:
    """An MP4 whose edit list hides its first ``hidden`` frames (as a ``-c copy`` trim does):
    the container counts every frame, the decoder shows all but the hidden ones."""
    path = Path(path)
    full = path.with_name(path.stem + ".full.mp4")
    make_test_video(full, **clip)  # type: ignore[arg-type]
    with av.open(str(full)) as src:
        stream = src.streams.video[0]
        rate, time_base = stream.average_rate, stream.time_base
        if rate is None or time_base is None:
            raise VideoError(f"cannot write test video {path}: {full} has no frame rate")
        frame_ticks = round(1 / (Fraction(rate) * Fraction(time_base)))
    _remux(full, path, video_shift=hidden * frame_ticks)
    full.unlink()
    return path


def make_corrupt_video(path: str | Path, *, seed: int = 0) -> Path:
    """Write a file with a video extension holding a truncated MP4 header and random bytes."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    # A plausible 'ftyp' box start followed by garbage: demuxers recognise nothing usable.
    header = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + rng.integers(0, 256, size=4096, dtype=np.uint8).tobytes())
    return path
