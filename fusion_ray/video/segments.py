"""Plan keyframe-aligned segments of a video by reading packet timestamps (no decoding).

A segment is the unit of parallel decode and encode (DESIGN.md section 5). Frame indices are
global and in presentation order: frame i is the packet with the i-th smallest pts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from fusion_ray.errors import VideoError
from fusion_ray.video.probe import open_input, video_stream_of

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


def read_packet_index(path: str | Path) -> tuple[list[int], set[int], Fraction]:
    """Presentation-ordered pts of every video packet, the keyframe pts, and the time base.

    Demuxes only; empty (flush) and discard-flagged packets are skipped. Raises VideoError when
    a packet has no timestamp or two packets share one (frame indices would be ambiguous).
    """
    path = Path(path)
    container = open_input(path)
    try:
        stream = video_stream_of(container, path)
        time_base = stream.time_base
        pts_list: list[int] = []
        keyframes: set[int] = set()
        try:
            for packet in container.demux(stream):
                if not packet.size or packet.is_discard:
                    continue
                pts = packet.pts if packet.pts is not None else packet.dts
                if pts is None:
                    raise VideoError(f"video packet without timestamp in {path}")
                pts_list.append(pts)
                if packet.is_keyframe:
                    keyframes.add(pts)
        except av.FFmpegError as exc:
            raise VideoError(f"cannot read video packets of {path}: {exc}") from exc
    finally:
        container.close()
    if not pts_list:
        raise VideoError(f"no video frames in {path}")
    pts_list.sort()
    for i in range(1, len(pts_list)):
        if pts_list[i] == pts_list[i - 1]:
            raise VideoError(f"duplicate video timestamp {pts_list[i]} in {path}")
    return pts_list, keyframes, Fraction(time_base)


def plan_segments(path: str | Path, target_seconds: float = 4.0) -> list[Segment]:
    """Split a video at keyframes into segments of at least target_seconds (but the last).

    Every frame belongs to exactly one segment; segments are in frame order and each one but
    possibly the first starts at a keyframe. target_seconds <= 0 cuts at every keyframe.
    """
    path = Path(path)
    pts_list, keyframes, time_base = read_packet_index(path)
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
