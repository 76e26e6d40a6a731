"""Encode segments of frames to small standalone files, and join them with the source's audio.

DESIGN.md section 5: each segment is encoded on its own as soon as its frames are ready (its
first frame a keyframe), then the segments are joined by stream copy in index order, the
source's audio packets are copied in without re-encoding, and the result is renamed into place.

Segments are MP4 files: MP4 keeps exact timestamps (the track timescale follows 1/fps, e.g.
30000 ticks a second for 29.97), and its H.264 packets are already in the length-prefixed
form the final MP4 needs, so the join is a pure copy with shifted timestamps.
"""

from __future__ import annotations

import functools
import heapq
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fusion_ray.errors import VideoError
from fusion_ray.fsutil import atomic_path
from fusion_ray.video.probe import open_input

logger = logging.getLogger(__name__)

_NVENC = "h264_nvenc"
# x264 preset -> NVENC preset (p1 fastest .. p7 best quality).
_NVENC_PRESETS = {
    "ultrafast": "p1", "superfast": "p1", "veryfast": "p2", "faster": "p3", "fast": "p4",
    "medium": "p5", "slow": "p6", "slower": "p7", "veryslow": "p7",
}
_FORMATS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska", ".ts": "mpegts"}

VIDEO_OUTPUT_SUFFIXES = (".mp4", ".m4v", ".mov")
"""What a finished video may be named: join_segments writes MP4 (MOV for ``.mov``)."""


def check_video_output(path: str | Path) -> None:
    """VideoError unless ``path`` ends in a suffix of VIDEO_OUTPUT_SUFFIXES (any case)."""
    if Path(path).suffix.lower() not in VIDEO_OUTPUT_SUFFIXES:
        raise VideoError(f"video outputs must end in .mp4, .m4v or .mov, got {path}")


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
        default=AUTO_PIX_FMT, description="Encoded pixel format; auto: yuv420p, or yuv444p when the "
                                          "width or height is odd (4:2:0 H.264 has no odd sizes).")
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


def encoder_pix_fmt(options: EncodeOptions, width: int, height: int) -> str:
    """The pixel format frames of this size are encoded in.

    ``auto`` keeps the widely playable yuv420p for even sizes. H.264 stores 4:2:0 frames in
    2x2 chroma blocks and crops in steps of 2, so an odd width or height cannot be 4:2:0:
    such frames are encoded 4:4:4 (yuv444p, High 4:4:4 profile) at their exact size.
    """
    if options.pix_fmt != AUTO_PIX_FMT:
        return options.pix_fmt
    return "yuv420p" if width % 2 == 0 and height % 2 == 0 else "yuv444p"


def check_encodable(width: int, height: int, options: EncodeOptions | None = None) -> str:
    """Open the encoder for this frame size (no file is written); returns the pixel format.

    Raises VideoError when the encoder refuses the size or pixel format: call it on a video's
    probe before any work, so that the failure is not found by a worker after decoding.
    """
    options = options or EncodeOptions()
    pix_fmt = encoder_pix_fmt(options, width, height)
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
) -> int:
    """Encode BGR frames into a small standalone video file; returns the number of frames.

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
            stream.pix_fmt = encoder_pix_fmt(options, width, height)
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


def _parameter_sets_inband(extradata: bytes) -> tuple[bytes, int] | None:
    """SPS/PPS of an avcC record as length-prefixed NAL units, and the NAL length size."""
    if len(extradata) < 7 or extradata[0] != 1:
        return None
    length_size = (extradata[4] & 0x03) + 1
    out = bytearray()
    pos = 5
    try:
        for count_mask in (0x1F, 0xFF):  # SPS count (5 bits), then PPS count (8 bits)
            count = extradata[pos] & count_mask
            pos += 1
            for _ in range(count):
                size = int.from_bytes(extradata[pos:pos + 2], "big")
                pos += 2
                nal = extradata[pos:pos + size]
                if len(nal) != size:
                    return None
                pos += size
                out += size.to_bytes(length_size, "big") + nal
    except IndexError:
        return None
    return bytes(out), length_size


@dataclass(frozen=True)
class _SegmentPlan:
    """What the first pass learned about one segment file."""

    path: Path
    frame_count: int
    first_pts: int
    """Smallest pts, in frames of 1/fps."""
    delay: int
    """Largest (decode position - presentation position) in frames: the reorder delay."""
    inband_prefix: bytes
    """Parameter sets to put in front of the first packet (when they differ from segment 0)."""


def _read_segment(path: Path, fps: Fraction) -> tuple[Any, list[Any], list[int]]:
    """The video stream of a segment, its packets in file order, and their pts in frames."""
    container = open_input(path, "segment")
    try:
        if not container.streams.video:
            raise VideoError(f"no video stream in segment {path}")
        stream = container.streams.video[0]
        to_frames = Fraction(stream.time_base) * fps
        packets = [p for p in container.demux(stream) if p.size and p.pts is not None]
    except av.FFmpegError as exc:
        raise VideoError(f"cannot read segment {path}: {exc}") from exc
    finally:
        container.close()
    if not packets:
        raise VideoError(f"no video frames in segment {path}")
    return stream, packets, [round(p.pts * to_frames) for p in packets]


def _plan_join(paths: Sequence[Path], fps: Fraction) -> list[_SegmentPlan]:
    """First pass over the segments (demux only): validate them and measure their delays."""
    plans: list[_SegmentPlan] = []
    template_extradata: bytes | None = None
    template_size: tuple[int, int] | None = None
    for k, path in enumerate(paths):
        stream, packets, frame_pts = _read_segment(path, fps)
        ctx = stream.codec_context
        size = (ctx.width, ctx.height)
        extradata = ctx.extradata
        if template_size is None:
            template_extradata, template_size = extradata, size
        elif size != template_size:
            raise VideoError(f"segment {path} is {size[0]}x{size[1]}, expected "
                             f"{template_size[0]}x{template_size[1]} like {paths[0]}")
        first = min(frame_pts)
        if sorted(frame_pts) != list(range(first, first + len(packets))):
            raise VideoError(f"segment {path} does not have one frame every 1/{fps} s "
                             f"(is its frame rate {fps}?)")
        prefix = b""
        if k > 0 and extradata and extradata != template_extradata:
            inband = _parameter_sets_inband(extradata)
            if inband is None:
                raise VideoError(f"segment {path} has different codec parameters from "
                                 f"{paths[0]} and they cannot be carried in-band")
            prefix = inband[0]
            logger.info("segment %s has its own parameter sets; carrying them in-band", path)
        delay = max(j - (pts - first) for j, pts in enumerate(frame_pts))
        plans.append(_SegmentPlan(path, len(packets), first, delay, prefix))
    return plans


def _video_packets(plans: Sequence[_SegmentPlan], fps: Fraction, out_stream: Any
                   ) -> Iterator[tuple[Fraction, Any]]:
    """Second pass: every segment's packets, re-timestamped, one segment in memory at a time.

    pts = frame offset of the segment + frame number within it; dts = decode position in the
    whole video - D, where D (the largest reorder delay of any segment) keeps dts <= pts.
    Both are in frames of 1/fps, so the output has exactly one frame every 1/fps s.
    """
    delay = max(plan.delay for plan in plans)
    offset = 0
    for plan in plans:
        _, packets, frame_pts = _read_segment(plan.path, fps)
        if len(packets) != plan.frame_count:
            raise VideoError(f"segment {plan.path} changed while being joined")
        for j, (packet, pts) in enumerate(zip(packets, frame_pts, strict=True)):
            if plan.inband_prefix and j == 0:
                new = av.Packet(plan.inband_prefix + bytes(packet))
                new.is_keyframe = packet.is_keyframe
                packet = new
            dts = offset + j - delay
            packet.stream = out_stream
            packet.time_base = 1 / fps
            packet.pts = offset + pts - plan.first_pts
            packet.dts = dts
            packet.duration = 1
            yield Fraction(dts) / fps, packet
        offset += plan.frame_count


def _audio_packets(container: Any, in_stream: Any, out_stream: Any, shift_s: Fraction
                   ) -> Iterator[tuple[Fraction, Any]]:
    """The source's audio packets, shifted so that time 0 is the first video frame."""
    time_base = Fraction(in_stream.time_base)
    shift = round(shift_s / time_base)
    for packet in container.demux(in_stream):
        if not packet.size or packet.pts is None:
            continue
        dts = packet.dts if packet.dts is not None else packet.pts
        packet.pts -= shift
        packet.dts = dts - shift
        packet.stream = out_stream
        packet.time_base = time_base
        yield packet.dts * time_base, packet


def join_segments(
    segment_paths: Sequence[Path],
    out_path: str | Path,
    *,
    fps: Fraction,
    audio_source: Path | None = None,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Join encoded segments by stream copy into one MP4, with the source's audio copied in.

    Each segment's timestamps are shifted by the number of frames before it, so the output
    has exactly one frame every 1/fps s and its frame rate equals fps. The audio packets of
    audio_source (the original video) are copied without re-encoding when MP4 can hold the
    codec (otherwise the audio is skipped with a warning). metadata becomes container tags
    (MP4 keeps the standard keys: comment, title, description, ...; libavformat overwrites
    "encoder" with its own name, so put provenance in "comment"). The file is written
    beside out_path and renamed into place, so a failure leaves no output file.
    out_path must end in .mp4, .m4v or .mov. Raises VideoError naming the offending file.
    """
    out_path = Path(out_path)
    check_video_output(out_path)
    paths = [Path(p) for p in segment_paths]
    fps = Fraction(fps)
    if not paths:
        raise VideoError(f"cannot write {out_path}: no segments to join")
    for path in paths:
        if not path.is_file():
            raise VideoError(f"cannot join into {out_path}: segment {path} does not exist")

    plans = _plan_join(paths, fps)
    first = open_input(paths[0], "segment")
    audio_in: Any = None
    try:
        template = first.streams.video[0]
        with atomic_path(out_path) as tmp, av.open(
            str(tmp), mode="w", format="mov" if out_path.suffix.lower() == ".mov" else "mp4",
            container_options={"movflags": "+faststart"},
        ) as out:
            out_video = out.add_stream_from_template(template)
            out_video.time_base = 1 / fps
            sources = [_video_packets(plans, fps, out_video)]
            if audio_source is not None:
                audio_in = open_input(audio_source)
                audio_iter = _open_audio_copy(audio_in, Path(audio_source), out)
                if audio_iter is not None:
                    sources.append(audio_iter)
            for key, value in (metadata or {}).items():
                out.metadata[key] = value
            for _, packet in heapq.merge(*sources, key=lambda item: item[0]):
                out.mux(packet)
    except (av.FFmpegError, OSError) as exc:
        raise VideoError(f"cannot write {out_path}: {exc}") from exc
    finally:
        first.close()
        if audio_in is not None:
            audio_in.close()
    logger.debug("joined %d segments (%d frames) into %s", len(paths),
                 sum(plan.frame_count for plan in plans), out_path)


def _open_audio_copy(source: Any, source_path: Path, out: Any
                     ) -> Iterator[tuple[Fraction, Any]] | None:
    """Add an audio stream copied from the source to `out`; None (logged) when impossible."""
    if not source.streams.audio:
        logger.debug("%s has no audio stream; output has none", source_path)
        return None
    in_audio = source.streams.audio[0]
    name = in_audio.codec_context.name
    try:
        out_audio = out.add_stream_from_template(in_audio)
    except ValueError as exc:
        logger.warning("audio of %s (%s) cannot be copied into MP4 (%s); output has no audio",
                       source_path, name, exc)
        return None
    video = source.streams.video[0] if source.streams.video else None
    shift_s = Fraction(0)
    if video is not None and video.start_time is not None and video.time_base is not None:
        shift_s = video.start_time * Fraction(video.time_base)
    return _audio_packets(source, in_audio, out_audio, shift_s)
