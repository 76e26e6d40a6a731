"""The H.264 encoder of this process's WebRTC senders: aiortc's, at x264's ``superfast`` preset.

aiortc opens libx264 with ``tune=zerolatency`` and x264's default preset, ``medium``: 9.5 ms a
640x360 frame on this project's 2-core machine, against 1.9 ms at ``superfast`` on one thread
for the same bytes a frame (3.5 KB at aiortc's starting bitrate; BENCHMARKS.md, WebRTC). A
service that encodes every swapped frame of every stream, on the cores that run the chain, pays
that difference on each one. :func:`use_realtime_h264` makes aiortc's senders in this process
open x264 at that preset (baseline profile, level 3.1, zerolatency, as aiortc does); everything
else (packetisation, bitrate from the receiver's feedback, keyframes) stays aiortc's.
"""

from __future__ import annotations

import fractions
from collections.abc import Iterator
from typing import Any

import av
from aiortc import rtcrtpsender
from aiortc.codecs import get_encoder
from aiortc.codecs.base import Encoder
from aiortc.codecs.h264 import MAX_FRAME_RATE, H264Encoder
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

X264_PRESET = "superfast"
X264_THREADS = 1
"""One thread an encoder: a stream's frames come one at a time, and a replica runs several streams."""


class RealtimeH264Encoder(H264Encoder):  # type: ignore[misc]
    """aiortc's H.264 encoder whose x264 opens at :data:`X264_PRESET` on :data:`X264_THREADS`."""

    def _encode_frame(self, frame: av.VideoFrame, force_keyframe: bool) -> Iterator[bytes]:
        # Opened here whenever aiortc would open it: the first frame, a new size, the target
        # bitrate (from the receiver's feedback) off by over 10%; aiortc then keeps this one.
        codec: Any = self.codec
        if (codec is None or (codec.width, codec.height) != (frame.width, frame.height)
                or abs(self.target_bitrate - codec.bit_rate) / codec.bit_rate > 0.1):
            self.codec = _open_x264(frame.width, frame.height, int(self.target_bitrate))
        yield from super()._encode_frame(frame, force_keyframe)


def _open_x264(width: int, height: int, bitrate: int) -> Any:
    codec = av.CodecContext.create("libx264", "w")
    codec.width, codec.height, codec.bit_rate, codec.pix_fmt = width, height, bitrate, "yuv420p"
    codec.framerate = fractions.Fraction(MAX_FRAME_RATE, 1)
    codec.time_base = fractions.Fraction(1, MAX_FRAME_RATE)
    codec.options = {"level": "31", "tune": "zerolatency", "preset": X264_PRESET}
    codec.profile = "Baseline"
    codec.thread_count = X264_THREADS
    return codec


def _encoder_for(codec: RTCRtpCodecParameters) -> Encoder:
    if codec.mimeType.lower() == "video/h264":
        return RealtimeH264Encoder()
    return get_encoder(codec)


def use_realtime_h264() -> None:
    """Make aiortc's RTP senders in this process encode H.264 with :class:`RealtimeH264Encoder`
    (idempotent; other codecs as aiortc has them)."""
    rtcrtpsender.get_encoder = _encoder_for  # type: ignore[attr-defined]
