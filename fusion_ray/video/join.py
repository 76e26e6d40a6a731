"""Join encoded segments by stream copy into the finished video, with the source's audio.

The segments (each encoded on its own, its first frame a keyframe, at
one frame every 1/fps s) are joined by stream copy in index order, the source's audio
packets are copied in without re-encoding, and the result is renamed into place. MP4 keeps
exact timestamps and its H.264 packets are already length-prefixed, so the join is a pure
copy with new timestamps: one frame every 1/fps s, or, for a variable-frame-rate source
given its FrameTimes, each frame at its source timestamp.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av

from fusion_ray.errors import VideoError
from fusion_ray.fsutil import atomic_path
from fusion_ray.video.probe import Media, media_name, open_input
from fusion_ray.video.timing import FrameTimes

logger = logging.getLogger(__name__)

VIDEO_OUTPUT_SUFFIXES = (".mp4", ".m4v", ".mov")
"""What a finished video may be named: join_segments writes MP4 (MOV for ``.mov``)."""


def check_video_output(path: str | Path) -> None:
    """VideoError unless ``path`` ends in a suffix of VIDEO_OUTPUT_SUFFIXES (any case)."""
    if Path(path).suffix.lower() not in VIDEO_OUTPUT_SUFFIXES:
        raise VideoError(f"video outputs must end in .mp4, .m4v or .mov, got {path}")


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


def _video_packets(plans: Sequence[_SegmentPlan], fps: Fraction, out_stream: Any, timeline: _Timeline
                   ) -> Iterator[tuple[Fraction, Any]]:
    """Second pass: every segment's packets, re-timestamped, one segment in memory at a time.

    Frame number = frame offset of the segment + frame number within it; decode position =
    position in the whole video - D, where D (the largest reorder delay of any segment) keeps
    dts <= pts. The timeline turns both into ticks: for a constant rate they are frames of
    1/fps, so the output has exactly one frame every 1/fps s.
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
            frame = offset + pts - plan.first_pts
            dts = timeline.tick(offset + j - delay)
            packet.stream = out_stream
            packet.time_base = timeline.time_base
            packet.pts = timeline.tick(frame)
            packet.dts = dts
            packet.duration = timeline.duration(frame)
            yield dts * timeline.time_base, packet
        offset += plan.frame_count


@dataclass(frozen=True)
class _Timeline:
    """Where output frame n (in presentation order; negative: before the first) is shown."""

    time_base: Fraction
    times: FrameTimes | None = None
    """None: frame n at n ticks of 1/fps; else at its source timestamp."""

    def tick(self, n: int) -> int:
        if self.times is None:
            return n
        pts = self.times.pts
        # Decode timestamps before the first frame (the reorder delay) are one tick apart.
        return (pts[n] if n >= 0 else pts[0] + n) - self.times.start

    def duration(self, n: int) -> int:
        if self.times is None:
            return 1
        pts = self.times.pts
        if n + 1 < len(pts):
            return pts[n + 1] - pts[n]
        return pts[-1] - pts[-2] if len(pts) > 1 else 1


def _timeline(plans: Sequence[_SegmentPlan], fps: Fraction, times: FrameTimes | None, out_path: Path
              ) -> _Timeline:
    if times is None or times.is_constant(fps):
        return _Timeline(1 / fps)
    frames = sum(plan.frame_count for plan in plans)
    if len(times.pts) != frames:
        raise VideoError(f"cannot write {out_path}: {len(times.pts)} source timestamps for {frames} frames")
    return _Timeline(times.time_base, times)


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
    audio_source: Media | None = None,
    metadata: Mapping[str, str] | None = None,
    frame_times: FrameTimes | None = None,
) -> None:
    """Join encoded segments by stream copy into one MP4, with the source's audio copied in.

    Each segment's timestamps are shifted by the number of frames before it, so the output
    has exactly one frame every 1/fps s and its frame rate equals fps. With the source's
    frame_times (read_frame_times) of a variable-frame-rate video, each frame keeps its
    source timestamp instead (in the source's time base), so the output stays in sync with
    the audio; constant frame_times change nothing. The audio packets of
    audio_source (the original video, a path or a seekable file object) are copied without re-encoding when MP4 can hold the
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
    _check_segments_exist(paths, out_path)

    plans = _plan_join(paths, fps)
    timeline = _timeline(plans, fps, frame_times, out_path)
    first = open_input(paths[0], "segment")
    audio_in: Any = None
    try:
        template = first.streams.video[0]
        with atomic_path(out_path) as tmp, av.open(
            str(tmp), mode="w", format="mov" if out_path.suffix.lower() == ".mov" else "mp4",
            container_options={"movflags": "+faststart"},
        ) as out:
            out_video = out.add_stream_from_template(template)
            out_video.time_base = timeline.time_base
            sources = [_video_packets(plans, fps, out_video, timeline)]
            if audio_source is not None:
                audio_in = open_input(audio_source)
                audio_iter = _joined_audio(audio_in, audio_source, out, timeline)
                if audio_iter is not None:
                    sources.append(audio_iter)
            _mux_merged(out, sources, metadata)
    except (av.FFmpegError, OSError) as exc:
        raise VideoError(f"cannot write {out_path}: {exc}") from exc
    finally:
        first.close()
        if audio_in is not None:
            audio_in.close()
    logger.debug("joined %d segments (%d frames) into %s", len(paths),
                 sum(plan.frame_count for plan in plans), out_path)


def _check_segments_exist(paths: Sequence[Path], out_path: Path) -> None:
    """VideoError unless there is at least one segment and every segment is a file."""
    if not paths:
        raise VideoError(f"cannot write {out_path}: no segments to join")
    for path in paths:
        if not path.is_file():
            raise VideoError(f"cannot join into {out_path}: segment {path} does not exist")


def _joined_audio(audio_in: Any, audio_source: Media, out: Any, timeline: _Timeline
                  ) -> Iterator[tuple[Fraction, Any]] | None:
    """The source's audio copied into ``out``, shifted to a variable-rate timeline's start."""
    shift_s = timeline.times.start * timeline.time_base if timeline.times is not None else None
    return _open_audio_copy(audio_in, media_name(audio_source), out, shift_s)


def _mux_merged(out: Any, sources: Sequence[Iterator[tuple[Fraction, Any]]],
                metadata: Mapping[str, str] | None) -> None:
    """Set the container tags, then mux every source's packets in order of decode time."""
    for key, value in (metadata or {}).items():
        out.metadata[key] = value
    for _, packet in heapq.merge(*sources, key=lambda item: item[0]):
        out.mux(packet)


def _open_audio_copy(source: Any, source_path: Path, out: Any, shift_s: Fraction | None = None
                     ) -> Iterator[tuple[Fraction, Any]] | None:
    """Add an audio stream copied from the source to `out`; None (logged) when impossible.

    The audio is shifted by ``shift_s`` (default: the source video's start time).
    """
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
    if shift_s is None:
        shift_s = Fraction(0)
        if video is not None and video.start_time is not None and video.time_base is not None:
            shift_s = video.start_time * Fraction(video.time_base)
    return _audio_packets(source, in_audio, out_audio, shift_s)
