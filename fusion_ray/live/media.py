"""What a stream's frames are made of: encoded messages (WebSocket) or decoded media frames (WebRTC).

Over the WebSocket a frame is a binary message (header + JPEG/PNG/WebP) that the stream checks,
decodes in a thread and answers with a JPEG. Over WebRTC the codec (VP8, H.264) is the media
track's: frames reach the stream decoded, as :class:`RawFrame`, and leave it as
:class:`RawResult` for the outgoing track's encoder, so the stream neither decodes nor encodes.

A transport that carries raw frames is a :class:`~fusion_ray.live.transport.MediaTransport`: its ``send_frame`` returns
only once the outgoing track's encoder has taken the frame (True) or refused it because its
deadline passed meanwhile (False): the stream counts a frame delivered only when it really left.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import cv2

from fusion_ray.imageio import add_jpeg_comment
from fusion_ray.types import Frame


@dataclass(frozen=True)
class RawFrame:
    """A decoded frame from a media track: its size, its BGR pixels made on demand (only frames
    that are processed are converted; most are replaced while waiting) and the track's timing."""

    pixels: Callable[[], Frame]
    width: int
    height: int
    pts: int | None = None
    time_base: Fraction | None = None
    client_ts_ms: float = 0.0


@dataclass(frozen=True)
class RawResult:
    """A processed frame for a media track, with its input's timing and its deadline (the
    server's monotonic clock, seconds)."""

    seq: int
    frame: Frame
    pts: int | None
    time_base: Fraction | None
    deadline: float


def encode_jpeg(frame: Frame, quality: int, comment: str | None = None) -> bytes:
    """A WebSocket result's image: JPEG at ``quality``, with the stand-in comment when given."""
    ok, buffer = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    data = buffer.tobytes()
    return add_jpeg_comment(data, comment) if comment else data
