"""A video's frame timestamps: constant or variable frame rate, and what the output keeps.

The pipeline encodes segments at one frame every 1/fps s (fps: the probe's rate, the
average for a variable-rate video). For a variable-rate source, join_segments puts each
frame back at its source timestamp (from these FrameTimes), so that the output keeps the
source's timing and stays in sync with the copied audio.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from fusion_ray.video.probe import open_input, video_stream_of
from fusion_ray.video.segments import read_packet_index


@dataclass(frozen=True)
class FrameTimes:
    """Presentation timestamps of every frame, in presentation order."""

    time_base: Fraction
    pts: tuple[int, ...]
    """Sorted pts of the video packets (one per frame), in ``time_base`` units."""
    start: int
    """The stream's start time (the origin the copied audio is shifted by), in ``time_base``."""

    def __post_init__(self) -> None:
        if not self.pts:
            raise ValueError("FrameTimes needs at least one frame")

    def is_constant(self, fps: Fraction) -> bool:
        """True when every frame is within half a frame of the 1/fps grid from the first one.

        Containers that store rounded timestamps (Matroska: milliseconds) stay constant.
        """
        step = 1 / (Fraction(fps) * self.time_base)
        first = self.pts[0]
        return all(abs(pts - first - i * step) <= step / 2 for i, pts in enumerate(self.pts))

    def rate_range(self) -> tuple[float, float]:
        """Slowest and fastest instantaneous frame rates (frames/s); (0, 0) for one frame."""
        gaps = [b - a for a, b in zip(self.pts, self.pts[1:], strict=False)]
        if not gaps:
            return 0.0, 0.0
        return (float(1 / (max(gaps) * self.time_base)), float(1 / (min(gaps) * self.time_base)))

    def note(self, fps: Fraction) -> str | None:
        """What the output does about a variable frame rate, or None when the rate is constant."""
        if self.is_constant(fps):
            return None
        slow, fast = self.rate_range()
        return f"variable frame rate ({slow:.3g} to {fast:.3g} frames/s): the output keeps the source's frame timestamps"


def read_frame_times(path: str | Path) -> FrameTimes:
    """The frame timestamps of a video (demuxes its packets, no decoding)."""
    path = Path(path)
    pts, _, time_base = read_packet_index(path)
    container = open_input(path)
    try:
        start = video_stream_of(container, path).start_time
    finally:
        container.close()
    return FrameTimes(time_base, tuple(pts), pts[0] if start is None else min(int(start), pts[0]))
