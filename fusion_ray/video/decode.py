"""Decode a video, or one keyframe segment of it, as a stream of BGR frames (bounded memory)."""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from fusion_ray.errors import VideoError
from fusion_ray.video.probe import Media, media_name, open_input, video_stream_of
from fusion_ray.video.segments import Segment

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodedFrame:
    """One decoded frame and where it sits in the video."""

    frame: np.ndarray
    """BGR uint8 HxWx3."""
    index: int
    """Global frame index in presentation order (0 = first frame of the video)."""
    pts: int
    """Presentation timestamp in the video stream's time base."""
    time_s: float
    """Seconds since the start of the video stream."""


_SEEK_MARGINS_S = (0.0, 1.0, 5.0)


class _SeekOvershoot(Exception):
    """The seek landed after the segment's first frame (the container's index lied)."""


def decode_segment(path: Media, segment: Segment, *, threads: int = 0
                   ) -> Generator[DecodedFrame, None, None]:
    """Yield exactly the frames of `segment` (start_pts <= pts < end_pts), in order.

    Seeks to the segment's keyframe and decodes from there, stopping as soon as the decoder
    has passed end_pts, so only a few frames are in memory at any time. Raises VideoError
    naming the file when it cannot be read or yields a different number of frames than planned.

    Args:
        path: the video file the segment was planned on (or a seekable file object of it).
        segment: from plan_segments(path).
        threads: decoder threads; 0 lets FFmpeg choose (all cores).
    """
    media, path = path, media_name(path)
    if segment.start_frame == 0:
        yield from _decode(media, segment, seek_to=None, threads=threads)
        return
    # Some demuxers (MPEG-TS) seek by dts or by byte position and can land after the
    # keyframe; then seek again further back, and as a last resort decode from the start.
    for margin_s in _SEEK_MARGINS_S:
        try:
            yield from _decode(media, segment, seek_to=margin_s, threads=threads)
            return
        except _SeekOvershoot:
            logger.debug("seek in %s for segment %d landed too late (margin %.1f s)",
                         path, segment.index, margin_s)
    logger.warning("seeking in %s does not reach pts %d; decoding segment %d from the start",
                   path, segment.start_pts, segment.index)
    yield from _decode(media, segment, seek_to=None, threads=threads)


def decode_all(path: str | Path, *, threads: int = 0
               ) -> Generator[DecodedFrame, None, None]:
    """Yield every frame of the video in presentation order (a generator; bounded memory)."""
    path = Path(path)
    yield from _decode(path, None, seek_to=None, threads=threads)


def _decode(media: Media, segment: Segment | None, *, seek_to: float | None, threads: int
            ) -> Iterator[DecodedFrame]:
    """Decode [segment.start_pts, segment.end_pts) (everything when segment is None).

    seek_to: None decodes from the start of the file; a number seeks that many seconds
    before the segment's start first, and raises _SeekOvershoot (before yielding anything)
    when the seek landed after the segment's first frame.
    """
    path = media_name(media)
    container = open_input(media)
    try:
        stream = video_stream_of(container, path)
        stream.thread_type = "AUTO"
        if threads > 0:
            stream.codec_context.thread_count = threads
        emitted = 0
        try:
            if seek_to is not None and segment is not None:
                _seek_before(container, stream, segment.start_pts, seek_to)
            for decoded in _frames_from(container, stream, segment, path, seeking=seek_to is not None):
                yield decoded
                emitted += 1
        except av.FFmpegError as exc:
            raise VideoError(f"cannot decode video {path}: {exc}") from exc
        if emitted == 0 and seek_to is not None:
            raise _SeekOvershoot()
        if segment is not None and emitted != segment.frame_count:
            raise VideoError(
                f"segment {segment.index} of {path}: expected {segment.frame_count} frames, "
                f"decoded {emitted}")
    finally:
        container.close()


def _seek_before(container: Any, stream: Any, start_pts: int, seek_to: float) -> None:
    """Seek to the keyframe at or before ``seek_to`` seconds before ``start_pts``."""
    origin = stream.start_time or 0
    target = start_pts - round(Fraction(seek_to) / Fraction(stream.time_base))
    container.seek(max(target, origin), stream=stream, backward=True, any_frame=False)


def _frames_from(container: Any, stream: Any, segment: Segment | None, path: Path, *, seeking: bool
                 ) -> Iterator[DecodedFrame]:
    """The frames of [segment.start_pts, segment.end_pts) (all when None) in increasing pts.

    Raises _SeekOvershoot (``seeking``) or VideoError when the first frame at or after
    start_pts is not at start_pts; frames whose pts does not increase are skipped (logged).
    """
    time_base = Fraction(stream.time_base)
    origin = stream.start_time or 0
    start_pts = segment.start_pts if segment is not None else None
    end_pts = segment.end_pts if segment is not None else None
    next_index = segment.start_frame if segment is not None else 0
    emitted = 0
    last_pts: int | None = None
    for frame in _frames(container, stream):
        pts = frame.pts
        if pts is None:
            raise VideoError(f"decoded frame without timestamp in {path}")
        if start_pts is not None and pts < start_pts:
            continue
        if emitted == 0 and start_pts is not None and pts > start_pts:
            if seeking:
                raise _SeekOvershoot()
            raise VideoError(
                f"cannot decode the frame at pts {start_pts} of {path} "
                f"(first decodable frame is at pts {pts})")
        if end_pts is not None and pts >= end_pts:
            break
        if last_pts is not None and pts <= last_pts:
            logger.warning("non-increasing frame pts %d after %d in %s; skipped",
                           pts, last_pts, path)
            continue
        last_pts = pts
        yield DecodedFrame(
            frame=frame.to_ndarray(format="bgr24"),
            index=next_index,
            pts=pts,
            time_s=float((pts - origin) * time_base),
        )
        next_index += 1
        emitted += 1


def _frames(container: Any, stream: Any) -> Iterator[Any]:
    """Decoded frames of `stream`, flushing the decoder at the end of the file.

    Incomplete (corrupt-flagged) packets at the very end of the file, where a truncated file
    was cut, are left out as its plan leaves them out (``segments.index_packets``): no decoder
    can decode them, and a frame-threaded decoder that is sent one loses frames still in flight.
    """
    held: list[Any] = []  # corrupt packets, decoded only once a packet follows them
    for packet in container.demux(stream):
        if packet.size and packet.is_corrupt:
            held.append(packet)
            continue
        if packet.size:
            for corrupt in held:
                yield from corrupt.decode()
        elif held:
            logger.warning("left out %d incomplete video packet(s) at the end of the file", len(held))
        held.clear()
        # PyAV ends demux with an empty packet; decoding it flushes the decoder.
        yield from packet.decode()
