"""Encode segments of frames to small standalone files (the join is in fusion_ray.video.join).

Each segment is encoded on its own as soon as its frames are ready (its
first frame a keyframe), at one frame every 1/fps s; join_segments then copies the segments
into the finished video. Segments are MP4 files: MP4 keeps exact timestamps (the track
timescale follows 1/fps, e.g. 30000 ticks a second for 29.97).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fusion_ray.errors import VideoError
from fusion_ray.fsutil import atomic_path
from fusion_ray.video.join import VIDEO_OUTPUT_SUFFIXES, check_video_output, join_segments

__all__ = ["VIDEO_OUTPUT_SUFFIXES", "EncodeOptions", "check_encodable", "check_video_output", "encode_segment",
           "encoder_pix_fmt", "join_segments", "nvenc_usable", "resolve_codec"]

logger = logging.getLogger(__name__)

_NVENC = "h264_nvenc"
# x264 preset -> NVENC preset (p1 fastest .. p7 best quality).
_NVENC_PRESETS = {
    "ultrafast": "p1", "superfast": "p1", "veryfast": "p2", "faster": "p3", "fast": "p4",
    "medium": "p5", "slow": "p6", "slower": "p7", "veryslow": "p7",
}
_FORMATS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska", ".ts": "mpegts"}

AUTO_PIX_FMT = "auto"


class EncodeOptions(BaseModel):
    """How segments are encoded. Every segment of one video must use the same options."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    codec: str = Field(default="libx264", description="FFmpeg encoder name (software).")
    crf: int = Field(default=18, ge=0, le=51,
                     description="Constant quality (x264 CRF; NVENC CQ).")
    preset: str = Field(default="veryfast",
                        description="x264 preset; mapped to p1..p7 for NVENC.")
    pix_fmt: str = Field(
        default=AUTO_PIX_FMT, description="Encoded pixel format; auto: yuv420p, or yuv444p for a 4:4:4 or RGB "
                                          "source and when the width or height is odd (4:2:0 H.264 has no odd "
                                          "sizes).")
    hardware: bool = Field(
        default=False, description="Use h264_nvenc when available and it opens; else fall back "
                           "to `codec` with a logged note.")
    threads: int = Field(default=0, ge=0, description="Encoder threads; 0 lets FFmpeg choose.")


@functools.cache
def nvenc_usable() -> bool:
    """True when h264_nvenc is built in and can actually open (a GPU and driver are present)."""
    if _NVENC not in av.codecs_available:
        return False
    try:
        ctx: Any = av.CodecContext.create(_NVENC, "w")
        ctx.width, ctx.height = 256, 256
        ctx.pix_fmt = "yuv420p"
        ctx.time_base = Fraction(1, 25)
        ctx.open()
    except Exception as exc:  # any failure means "not usable"
        logger.info("h264_nvenc is listed but does not open (%s); hardware encoding will "
                    "fall back to software", exc)
        return False
    return True


def resolve_codec(options: EncodeOptions) -> tuple[str, dict[str, str]]:
    """The encoder to use and its FFmpeg options (hardware first when asked for and usable)."""
    if options.hardware:
        if nvenc_usable():
            preset = _NVENC_PRESETS.get(options.preset, "p4")
            return _NVENC, {"preset": preset, "rc": "vbr", "cq": str(options.crf), "b": "0"}
        logger.debug("hardware encoding requested but h264_nvenc is not usable; using %s",
                     options.codec)
    if options.codec not in av.codecs_available:
        raise VideoError(f"encoder {options.codec!r} is not available in this FFmpeg build")
    if options.codec in ("libx264", "libx265"):
        return options.codec, {"crf": str(options.crf), "preset": options.preset}
    return options.codec, {}


@dataclass(frozen=True)
class SampleFormat:
    """What a pixel format keeps: bits per sample and chroma samples per pixel (1 for 4:4:4
    and RGB, 0.5 for 4:2:2, 0.25 for 4:2:0, 0 without chroma)."""

    bits: int
    chroma: float

    @classmethod
    def of(cls, pix_fmt: str) -> SampleFormat | None:
        """From FFmpeg's description of ``pix_fmt``; None for a name FFmpeg does not know."""
        try:
            fmt = av.VideoFormat(pix_fmt, 16, 16)
        except (ValueError, TypeError):
            return None
        planes = [c for c in fmt.components if not c.is_alpha]
        if not planes:
            return None
        chroma = 1.0 if fmt.is_rgb else (planes[1].width * planes[1].height / 256 if len(planes) > 1 else 0.0)
        return cls(max(c.bits for c in planes), chroma)


_CHROMA_NAMES = {1.0: "4:4:4", 0.5: "4:2:2", 0.25: "4:2:0"}


def encoder_pix_fmt(options: EncodeOptions, width: int, height: int, source_pix_fmt: str = "") -> str:
    """The pixel format frames of this size (from a source in ``source_pix_fmt``) are encoded in.

    ``auto`` keeps the widely playable yuv420p, but for a 4:4:4 or RGB source (its full chroma
    is kept: yuv444p) and for odd sizes: H.264 stores 4:2:0 frames in 2x2 chroma blocks and
    crops in steps of 2, so an odd width or height cannot be 4:2:0 and is encoded 4:4:4
    (High 4:4:4 profile) at its exact size. Samples are 8-bit (see :func:`pix_fmt_change`).
    """
    if options.pix_fmt != AUTO_PIX_FMT:
        return options.pix_fmt
    source = SampleFormat.of(source_pix_fmt) if source_pix_fmt else None
    if width % 2 or height % 2 or (source is not None and source.chroma >= 1.0):
        return "yuv444p"
    return "yuv420p"


def pix_fmt_change(source_pix_fmt: str, pix_fmt: str) -> str | None:
    """What encoding a ``source_pix_fmt`` video as ``pix_fmt`` loses (for a warning), or None."""
    source, out = SampleFormat.of(source_pix_fmt), SampleFormat.of(pix_fmt)
    if source is None or out is None:
        return None
    losses = []
    if source.bits > out.bits:
        losses.append(f"{source.bits}-bit samples become {out.bits}-bit")
    if source.chroma > out.chroma:
        losses.append(f"{_CHROMA_NAMES.get(source.chroma, 'full')} chroma becomes "
                      f"{_CHROMA_NAMES.get(out.chroma, str(out.chroma))}")
    return f"{source_pix_fmt} video written as {pix_fmt}: {', '.join(losses)}" if losses else None


def check_encodable(width: int, height: int, options: EncodeOptions | None = None,
                    source_pix_fmt: str = "") -> str:
    """Open the encoder for this frame size (no file is written); returns the pixel format.

    Raises VideoError when the encoder refuses the size or pixel format: call it on a video's
    probe before any work, so that the failure is not found by a worker after decoding.
    """
    options = options or EncodeOptions()
    pix_fmt = encoder_pix_fmt(options, width, height, source_pix_fmt)
    codec, codec_options = resolve_codec(options)
    try:
        ctx: Any = av.CodecContext.create(codec, "w")
        ctx.width, ctx.height = width, height
        ctx.pix_fmt = pix_fmt
        ctx.time_base = Fraction(1, 25)
        ctx.options = codec_options
        ctx.open()
    except (av.FFmpegError, ValueError, TypeError) as exc:
        odd = width % 2 or height % 2
        hint = ("; 4:2:0 needs an even width and height: use pix_fmt auto or yuv444p"
                if odd and pix_fmt.startswith(("yuv420", "nv12", "yuvj420")) else "")
        raise VideoError(f"cannot encode {width}x{height} frames as {pix_fmt} with {codec}: {exc}{hint}") from exc
    return pix_fmt


def _format_for(path: Path) -> str:
    return _FORMATS.get(path.suffix.lower(), "mp4")


def encode_segment(
    frames: Iterable[np.ndarray],
    out_path: str | Path,
    *,
    fps: Fraction,
    width: int,
    height: int,
    options: EncodeOptions | None = None,
    pix_fmt: str = "",
) -> int:
    """Encode BGR frames into a small standalone video file; returns the number of frames.

    ``pix_fmt``: the pixel format the job chose for the video (``check_encodable``); by
    default the options' choice for the size.

    Frame i gets pts i in time base 1/fps; the first frame is a keyframe. The file appears at
    out_path only when complete. Use .mp4 (exact timestamps, joins by pure copy).
    Raises VideoError when a frame has the wrong shape or the encoder fails; nothing is left
    at out_path then.
    """
    out_path = Path(out_path)
    options = options or EncodeOptions()
    fps = Fraction(fps)
    codec, codec_options = resolve_codec(options)
    written = 0
    try:
        with atomic_path(out_path) as tmp, av.open(
            str(tmp), mode="w", format=_format_for(out_path)
        ) as out:
            stream: Any = out.add_stream(codec, rate=fps, options=codec_options)
            stream.width = width
            stream.height = height
            stream.pix_fmt = pix_fmt or encoder_pix_fmt(options, width, height)
            stream.time_base = 1 / fps
            if options.threads:
                stream.codec_context.thread_count = options.threads
            for img in frames:
                if img.shape != (height, width, 3) or img.dtype != np.uint8:
                    raise VideoError(
                        f"cannot encode {out_path}: frame {written} is {img.dtype} "
                        f"{img.shape}, expected uint8 {(height, width, 3)}")
                frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(img),
                                                   format="bgr24")
                frame.pts = written
                frame.time_base = 1 / fps
                out.mux(stream.encode(frame))
                written += 1
            if written == 0:
                raise VideoError(f"cannot encode {out_path}: no frames")
            out.mux(stream.encode(None))
    except (av.FFmpegError, OSError) as exc:
        raise VideoError(f"cannot encode video {out_path}: {exc}") from exc
    logger.debug("encoded %d frames to %s with %s", written, out_path, codec)
    return written
