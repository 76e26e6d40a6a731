"""Probe a video file: size, exact frame rate, exact frame count, codecs, audio."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import IO, Any

import av

from fusion_ray.errors import VideoError

logger = logging.getLogger(__name__)

VIDEO_EXTENSIONS = frozenset({
    ".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".ts", ".mts", ".m2ts", ".mpg",
    ".mpeg", ".flv", ".wmv", ".3gp", ".ogv", ".mxf", ".y4m", ".h264", ".264", ".hevc",
})
IMAGE_EXTENSIONS = frozenset({
    ".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".jp2", ".pgm", ".ppm",
})
# Demuxers that open still images; a file they accept is an image, not a video.
_IMAGE_FORMATS = frozenset({"image2", "gif", "apng", "webp", "tiff"})

# Standard NTSC-style rates: a measured rate this close to one of them is snapped to it.
_STANDARD_RATES = tuple(
    [Fraction(n * 1000, 1001) for n in (24, 30, 48, 60, 120)]
    + [Fraction(n) for n in (10, 12, 15, 23, 24, 25, 30, 48, 50, 60, 90, 100, 120, 240)]
)


@dataclass(frozen=True)
class VideoInfo:
    """What the pipeline needs to know about a video before decoding it."""

    path: Path
    width: int
    height: int
    fps: Fraction
    """Exact frame rate (30000/1001 for 29.97, never rounded to an int)."""
    time_base: Fraction
    """Time base of the video stream's timestamps (pts * time_base = seconds)."""
    frame_count: int
    """Exact number of video frames (container's count, or video packets counted)."""
    duration_s: float
    video_codec: str
    pix_fmt: str
    has_audio: bool
    audio_codec: str | None
    audio_duration_s: float | None
    metadata: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)
    """Container-level metadata tags (e.g. 'comment', 'encoder')."""
    declared_frames: int = 0
    """The container's own sample count (0 when it declares none: Matroska, MPEG-TS). It
    includes the frames an edit list hides, and the frames a truncated file has lost."""
    declared_duration_s: float | None = None
    """The video stream's own duration (or its DURATION tag); None when it declares none.
    With an edit list it is the edited (shown) duration."""

    @property
    def size_wh(self) -> tuple[int, int]:
        return self.width, self.height


Media = str | Path | IO[bytes]
"""A video to open: a local path, or a seekable binary file (``Storage.open_media`` of an
object in a bucket; PyAV reads it through its own I/O)."""


def media_name(media: Media) -> Path:
    """What names ``media`` in messages: its path, or a file object's ``name``."""
    if isinstance(media, str | os.PathLike):
        return Path(media)
    return Path(str(getattr(media, "name", "<stream>")))


def open_input(path: Media, what: str = "video") -> Any:
    """Open a file (or a seekable binary file object, from its start) with PyAV for reading,
    turning every failure into a VideoError naming it."""
    if not isinstance(path, str | os.PathLike):
        try:
            path.seek(0)
            return av.open(path, mode="r")
        except (av.FFmpegError, OSError, UnicodeDecodeError) as exc:
            raise VideoError(f"cannot open {what} {media_name(path)}: {exc}") from exc
    path = Path(path)
    if not path.is_file():
        raise VideoError(f"cannot open {what} {path}: no such file")
    try:
        return av.open(str(path), mode="r")
    except (av.FFmpegError, OSError, UnicodeDecodeError) as exc:
        raise VideoError(f"cannot open {what} {path}: {exc}") from exc


def video_stream_of(container: Any, path: Path) -> Any:
    """The first video stream, or a VideoError naming the file."""
    if not container.streams.video:
        raise VideoError(f"no video stream in {path}")
    return container.streams.video[0]


def choose_fps(average: Fraction | None, guessed: Fraction | None,
               path: Path | str = "?") -> Fraction:
    """Pick the exact frame rate from a stream's average and guessed rates.

    The average rate (frames / duration) is right for variable frame rates; the guessed rate
    (from timestamps) is usually the clean value when the container rounds timestamps (MKV
    stores milliseconds). When both agree to 0.1%, the one with the smaller denominator wins,
    and a value within 0.01% of a standard rate (24000/1001, 30000/1001, 25, ...) snaps to it.
    """
    candidates = [Fraction(r) for r in (average, guessed) if r is not None and r > 0]
    if not candidates:
        raise VideoError(f"cannot determine the frame rate of {path}")
    fps = candidates[0]
    if len(candidates) == 2 and abs(candidates[0] - candidates[1]) <= candidates[1] / 1000:
        fps = min(candidates, key=lambda r: r.denominator)
    for standard in _STANDARD_RATES:
        if fps != standard and abs(fps - standard) <= standard / 10_000:
            return standard
    return fps


def count_video_packets(container: Any, stream: Any) -> int:
    """Count the video packets (= frames) by demuxing, without decoding."""
    count = 0
    for packet in container.demux(stream):
        if packet.size and not packet.is_discard:
            count += 1
    return count


def probe(path: Media) -> VideoInfo:
    """Read a video's properties (of a path or a seekable file object). Raises VideoError
    (naming the file) when it cannot be read."""
    media, path = path, media_name(path)
    container = open_input(media)
    try:
        stream = video_stream_of(container, path)
        ctx = stream.codec_context
        time_base = stream.time_base
        if time_base is None:
            raise VideoError(f"video stream of {path} has no time base")
        fps = choose_fps(stream.average_rate, stream.guessed_rate, path)
        if ctx.width <= 0 or ctx.height <= 0:
            raise VideoError(f"video stream of {path} has no frame size")
        declared_frames = frame_count = int(stream.frames or 0)
        if frame_count <= 0:
            try:
                frame_count = count_video_packets(container, stream)
            except av.FFmpegError as exc:
                raise VideoError(f"cannot read video packets of {path}: {exc}") from exc
        if frame_count <= 0:
            raise VideoError(f"no video frames in {path}")
        video_duration_s = _stream_duration_s(stream)
        if video_duration_s is not None:
            duration_s = video_duration_s
        elif container.duration:
            duration_s = container.duration / av.time_base
        else:
            duration_s = float(frame_count / fps)
        audio = container.streams.audio[0] if container.streams.audio else None
        audio_duration_s = _stream_duration_s(audio) if audio is not None else None
        pix_fmt = ctx.format.name if ctx.format is not None else (ctx.pix_fmt or "unknown")
        return VideoInfo(
            path=path,
            width=int(ctx.width),
            height=int(ctx.height),
            fps=fps,
            time_base=Fraction(time_base),
            frame_count=frame_count,
            duration_s=duration_s,
            video_codec=ctx.name,
            pix_fmt=pix_fmt,
            has_audio=audio is not None,
            audio_codec=audio.codec_context.name if audio is not None else None,
            audio_duration_s=audio_duration_s,
            metadata=MappingProxyType(dict(container.metadata)),
            declared_frames=declared_frames,
            declared_duration_s=video_duration_s,
        )
    finally:
        container.close()


def _stream_duration_s(stream: Any) -> float | None:
    """A stream's duration in seconds: from the stream, else its DURATION tag (Matroska)."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    tag = stream.metadata.get("DURATION") or stream.metadata.get("duration")
    if tag:
        try:
            hours, minutes, seconds = tag.split(":")
            return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        except ValueError:
            logger.debug("unparsable DURATION tag %r", tag)
    return None


def is_video_file(path: str | Path) -> bool:
    """Cheap check: is this an existing file to treat as a video (rather than an image)?

    Known video extensions answer True and known image extensions False without opening the
    file; anything else is opened and must have a video stream from a non-image demuxer.
    A corrupt file with a video extension answers True; probe() then raises for it.
    """
    path = Path(path)
    if not path.is_file():
        return False
    suffix = path.suffix.lower()
    if suffix in VIDEO_EXTENSIONS:
        return True
    if suffix in IMAGE_EXTENSIONS:
        return False
    try:
        with av.open(str(path), mode="r") as container:
            names = set(container.format.name.split(","))
            if names & _IMAGE_FORMATS or any(n.endswith("_pipe") for n in names):
                return False
            return bool(container.streams.video)
    except (av.FFmpegError, OSError, UnicodeDecodeError):
        return False
