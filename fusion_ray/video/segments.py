"""Plan keyframe-aligned segments of a video by reading packet timestamps (no decoding).

The same demuxing pass tells a truncated file (the container declares more frames than its
packets hold) from one whose edit list hides frames (:func:`find_shortfall`).

A segment is the unit of parallel decode and encode (docs/ARCHITECTURE.md, Videos). Frame indices are
global and in presentation order: frame i is the packet with the i-th smallest pts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from fusion_ray.errors import VideoError
from fusion_ray.video.probe import Media, VideoInfo, media_name, open_input, video_stream_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Segment:
    """Frames [start_frame, start_frame + frame_count) = pts in [start_pts, end_pts).

    start_pts is the pts of the segment's first frame (a keyframe, except possibly for the
    first segment of a stream that does not start on one); end_pts is the next segment's
    start_pts, or None for the last segment. Timestamps are in the video stream's time base.
    """

    index: int
    start_frame: int
    frame_count: int
    start_pts: int
    end_pts: int | None

    @property
    def end_frame(self) -> int:
        """One past the last frame index of the segment."""
        return self.start_frame + self.frame_count

    def contains_pts(self, pts: int) -> bool:
        return pts >= self.start_pts and (self.end_pts is None or pts < self.end_pts)


@dataclass(frozen=True)
class PacketIndex:
    """What a video's packets say, from demuxing only (no decoding)."""

    pts: tuple[int, ...]
    """Presentation-ordered pts of every packet that is shown."""
    keyframes: frozenset[int]
    time_base: Fraction
    hidden: int = 0
    """Packets an edit list hides (demuxed with the discard flag: decoded, never shown)."""
    end_pts: int = 0
    """End of the last shown packet (its pts plus its duration)."""
    gap_pts: int | None = None
    """Where the shown packets first leave a gap (the end of the packet before it): a truncated
    file cut between a B-frame's references and the B-frame lacks frames before its last one."""
    start_pts: int = 0
    """The stream's start time (the first pts, or earlier), in ``time_base``."""

    @property
    def shown_s(self) -> float:
        """Seconds the shown packets cover, from the first one's pts."""
        return float((self.end_pts - self.pts[0]) * self.time_base)

    @property
    def complete_s(self) -> float:
        """Seconds from the first frame to the first gap (or to the end without one)."""
        until = self.gap_pts if self.gap_pts is not None else self.end_pts
        return float((until - self.pts[0]) * self.time_base)


def index_packets(path: Media) -> PacketIndex:
    """Demux every video packet of ``path``; empty (flush) packets are skipped.

    Packets at the end of the file whose data is incomplete (flagged corrupt: the file was cut
    inside them) are not present: no decoder can decode them. Raises VideoError when a packet
    has no timestamp, when two shown packets share one (frame indices would be ambiguous) or
    when no packet is shown.
    """
    media, path = path, media_name(path)
    container = open_input(media)
    shown: list[tuple[int, int, bool, bool]] = []  # (pts, end pts, keyframe, corrupt), in file order
    hidden = 0
    try:
        stream = video_stream_of(container, path)
        time_base = Fraction(stream.time_base)
        start_time = stream.start_time
        try:
            for packet in container.demux(stream):
                if not packet.size:
                    continue
                if packet.is_discard:
                    hidden += 1
                    continue
                pts = packet.pts if packet.pts is not None else packet.dts
                if pts is None:
                    raise VideoError(f"video packet without timestamp in {path}")
                shown.append((pts, pts + (packet.duration or 0), bool(packet.is_keyframe), bool(packet.is_corrupt)))
        except av.FFmpegError as exc:
            raise VideoError(f"cannot read video packets of {path}: {exc}") from exc
    finally:
        container.close()
    while shown and shown[-1][3]:
        logger.info("the last video packet of %s is incomplete (the file is cut short); it is left out", path)
        shown.pop()
    if not shown:
        raise VideoError(f"no video frames in {path}")
    pts_list = sorted(entry[0] for entry in shown)
    for i in range(1, len(pts_list)):
        if pts_list[i] == pts_list[i - 1]:
            raise VideoError(f"duplicate video timestamp {pts_list[i]} in {path}")
    keyframes = frozenset(entry[0] for entry in shown if entry[2])
    end_pts = max(max(entry[1] for entry in shown), pts_list[-1])
    start_pts = pts_list[0] if start_time is None else min(int(start_time), pts_list[0])
    return PacketIndex(tuple(pts_list), keyframes, time_base, hidden, end_pts, _first_gap(shown), start_pts)


def _first_gap(shown: list[tuple[int, int, bool, bool]]) -> int | None:
    """The end of the packet after which the next one (in pts order) starts late by more than
    half the packet's duration (rounded timestamps are no gap); None when there is no gap."""
    spans = sorted((pts, end) for pts, end, _, _ in shown)
    for (pts, end), (next_pts, _) in zip(spans, spans[1:], strict=False):
        if end > pts and next_pts - end > (end - pts) / 2:
            return end
    return None


def read_packet_index(path: str | Path) -> tuple[list[int], set[int], Fraction]:
    """Presentation-ordered pts of every shown video packet, the keyframe pts, and the time base."""
    index = index_packets(path)
    return list(index.pts), set(index.keyframes), index.time_base


def plan_segments(path: str | Path, target_seconds: float = 4.0) -> list[Segment]:
    """Split a video at keyframes into segments of at least target_seconds (but the last).

    Every frame belongs to exactly one segment; segments are in frame order and each one but
    possibly the first starts at a keyframe. target_seconds <= 0 cuts at every keyframe.
    """
    return segments_of(index_packets(path), target_seconds, path)


def segments_of(index: PacketIndex, target_seconds: float = 4.0, path: str | Path = "?") -> list[Segment]:
    """:func:`plan_segments` from an already demuxed :class:`PacketIndex`."""
    pts_list, keyframes, time_base = index.pts, index.keyframes, index.time_base
    if pts_list[0] not in keyframes:
        logger.warning("first frame of %s is not a keyframe; its first segment may not decode "
                       "cleanly", path)
    target_ticks = Fraction(max(0.0, target_seconds)) / time_base
    starts = [0]  # frame indices at which segments start
    for i in range(1, len(pts_list)):
        pts = pts_list[i]
        if pts in keyframes and pts - pts_list[starts[-1]] >= target_ticks:
            starts.append(i)
    segments: list[Segment] = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(pts_list)
        segments.append(Segment(
            index=k,
            start_frame=start,
            frame_count=end - start,
            start_pts=pts_list[start],
            end_pts=pts_list[end] if end < len(pts_list) else None,
        ))
    logger.debug("planned %d segments for %s (%d frames)", len(segments), path, len(pts_list))
    return segments


SHORTFALL_TOLERANCE_FRAMES = 2
"""A video whose shown packets end this many frame intervals (or fewer) before its declared
duration is complete: timestamps are rounded, and an edit list may clip the last frame."""


@dataclass(frozen=True)
class Shortfall:
    """A truncated video: the container declares more than its packets hold."""

    declared_frames: int
    """What the container declares (its sample count, or its duration x the frame rate)."""
    declared_s: float
    present_frames: int
    frames_missing: int
    missing_from_s: float
    """Where the missing frames start (seconds from the first frame): the first frame absent."""

    def describe(self, path: str | Path) -> str:
        return (f"{path} is truncated: the container declares {self.declared_frames} frames "
                f"({self.declared_s:.2f} s) but only {self.present_frames} are present; "
                f"{self.frames_missing} frames are missing from {self.missing_from_s:.2f} s")


def find_shortfall(info: VideoInfo, index: PacketIndex) -> Shortfall | None:
    """The frames a truncated file lacks, or None when its packets cover what it declares.

    The shown packets are compared with the stream's declared duration (with an edit list,
    that is the edited duration, so the frames an edit list hides are no shortfall); without
    a declared duration, the sample count is compared with the packets (shown and hidden).
    """
    present = len(index.pts)
    frame_s = 1.0 / float(info.fps)
    declared_s = info.declared_duration_s
    if declared_s is not None:
        missing_s = declared_s - index.shown_s
        if missing_s <= SHORTFALL_TOLERANCE_FRAMES * frame_s + 1e-6:
            return None
        by_count = info.declared_frames - present - index.hidden
        missing = by_count if by_count > 0 else round(missing_s * float(info.fps))
    else:
        missing = info.declared_frames - present - index.hidden
        if missing <= 0:
            return None
        declared_s = index.shown_s + missing * frame_s
    missing = max(1, missing)
    declared = info.declared_frames if info.declared_frames > 0 else present + missing
    return Shortfall(declared_frames=declared, declared_s=declared_s, present_frames=present,
                     frames_missing=missing, missing_from_s=index.complete_s)
