"""A WHIP/WHEP client: publish frames to a WHIP endpoint (and read what it sends back), play a WHEP
stream, and the local runner's WHIP output.

:func:`publish` is what a browser does against a swap service: one ``sendrecv`` video transceiver
(``addTransceiver(track, {direction: "sendrecv"})``), or a sendonly and a recvonly one. Every
frame is stamped with its sequence number (:func:`~fusion_ray.live.stamp.stamp`) and its send time
kept, so each frame that comes back gives a glass-to-glass latency and its order. :func:`play`
reads a WHEP stream. :class:`WhipPublisher` sends ``fusion-ray live``'s swapped frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import av
import cv2
import numpy as np
from aiortc import MediaStreamTrack
from aiortc.mediastreams import AudioStreamTrack, MediaStreamError

from fusion_ray.live.stamp import BITS, read_stamp, stamp
from fusion_ray.live.stats import percentile
from fusion_ray.live.whip_session import (
    LatestFrameTrack,
    WhipError,
    WhipSession,
    answer_codec,
    prefer_codec,
)

__all__ = ["PlayReport", "PublishReport", "WhipError", "WhipPublisher", "play", "publish", "read_stamp", "stamp"]

DRAIN_S = 1.0
FrameCallback = Callable[[int, np.ndarray], None]


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


@dataclass
class PlayReport:
    """What a receiver saw: frames, their stamps' order, on the receiver's clock."""

    codec: str | None = None
    received: int = 0
    unreadable: int = 0
    duplicates: int = 0
    order_violations: int = 0
    duration_s: float = 0.0
    seqs: list[int] = field(default_factory=list)

    @property
    def fps(self) -> float:
        return self.received / self.duration_s if self.duration_s > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        return {"codec": self.codec, "received": self.received, "fps": round(self.fps, 2),
                "duration_s": round(self.duration_s, 3), "unreadable": self.unreadable,
                "duplicates": self.duplicates, "order_violations": self.order_violations}


@dataclass
class PublishReport(PlayReport):
    """A publisher's view: frames sent, and per returned frame the latency from its send (ms)."""

    sent: int = 0
    replaced: int = 0
    latencies_ms: list[float] = field(default_factory=list)

    def latency(self, q: float) -> float | None:
        return percentile(self.latencies_ms, q)

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "sent": self.sent, "replaced_before_send": self.replaced,
                "latency_ms": {f"p{q}": _r(self.latency(q)) for q in (50, 95, 99)}}


class _Reader:
    """Reads a received video track: stamps, order, latency against the send times (if any)."""

    def __init__(self, report: PlayReport, on_frame: FrameCallback | None,
                 sent_at: dict[int, float] | None = None, latencies_ms: list[float] | None = None) -> None:
        self.report = report
        self.on_frame = on_frame
        self.sent_at = sent_at
        self.latencies_ms = latencies_ms
        self.last = -1
        self.newest_sent = 0

    def _seq(self, code: int) -> int:
        """The sequence number a 16-bit stamp stands for (the newest sent one with that code)."""
        if self.sent_at is None:
            return code
        return self.newest_sent - ((self.newest_sent - code) % (1 << BITS))

    async def run(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            arrived = time.perf_counter()
            if not isinstance(frame, av.VideoFrame):
                continue
            image = frame.to_ndarray(format="bgr24")
            code = read_stamp(image)
            if code is None:
                self.report.unreadable += 1
                continue
            seq = self._seq(code)
            if seq == self.last:
                self.report.duplicates += 1
                continue
            if seq < self.last:
                self.report.order_violations += 1
            self.last = max(self.last, seq)
            self.report.received += 1
            self.report.seqs.append(seq)
            if self.sent_at is not None and self.latencies_ms is not None and seq in self.sent_at:
                self.latencies_ms.append((arrived - self.sent_at[seq]) * 1000.0)
            if self.on_frame is not None:
                self.on_frame(seq, image)


async def _frames(frames: Iterable[np.ndarray] | AsyncIterable[np.ndarray]) -> Any:
    if isinstance(frames, AsyncIterable):
        async for frame in frames:
            yield frame
    else:
        for frame in frames:
            yield frame


async def publish(url: str, token: str | None, frames: Iterable[np.ndarray] | AsyncIterable[np.ndarray], *,
                  fps: float, codec: str = "h264", receive: bool = True, separate: bool = False,
                  audio: bool = False, seconds: float | None = None, on_frame: FrameCallback | None = None,
                  drain_s: float = DRAIN_S, timeout_s: float = 15.0) -> PublishReport:
    """Publish ``frames`` (BGR, at least 256x32) at ``fps`` to the WHIP endpoint ``url``, stamped.

    ``receive``: the video transceiver is ``sendrecv`` and what comes back is read (latency,
    order, ``on_frame(seq, image)``); ``separate``: a sendonly and a recvonly transceiver instead.
    ``audio``: a silent sendonly audio track too. Stops at the frames' end or after ``seconds``,
    waits up to ``drain_s`` for the last frames, then DELETEs the session.
    """
    session = WhipSession(url, token, timeout_s=timeout_s)
    track = LatestFrameTrack(fps)
    if separate:
        outgoing = session.pc.addTransceiver(track, direction="sendonly")
        incoming = session.pc.addTransceiver("video", direction="recvonly") if receive else None
    else:
        outgoing = session.pc.addTransceiver(track, direction="sendrecv" if receive else "sendonly")
        incoming = outgoing if receive else None
    for transceiver in (outgoing, incoming):
        if transceiver is not None:
            prefer_codec(transceiver, codec)
    if audio:
        session.pc.addTransceiver(AudioStreamTrack(), direction="sendonly")
    report = PublishReport()
    sent_at: dict[int, float] = {}
    reader = _Reader(report, on_frame, sent_at, report.latencies_ms)
    reading: asyncio.Task[None] | None = None
    try:
        await session.open()
        report.codec = answer_codec(session.answer_sdp)
        if incoming is not None and incoming.receiver.track is not None:
            reading = asyncio.create_task(reader.run(incoming.receiver.track))
        started = time.perf_counter()
        period = 1.0 / fps
        async for frame in _frames(frames):
            due = started + report.sent * period
            if seconds is not None and due - started >= seconds:
                break
            if due > time.perf_counter():
                await asyncio.sleep(due - time.perf_counter())
            seq = report.sent
            image = stamp(np.array(frame, np.uint8, copy=True), seq)
            sent_at[seq] = time.perf_counter()
            reader.newest_sent = seq
            track.push(image, seq)
            report.sent += 1
        report.duration_s = time.perf_counter() - started
        until = time.perf_counter() + drain_s
        while reading is not None and reader.last < report.sent - 1 and time.perf_counter() < until:
            await asyncio.sleep(0.01)
    finally:
        report.replaced = track.replaced
        track.stop()
        await _stop(reading)
        await session.close()
    return report


async def _stop(reading: asyncio.Task[None] | None) -> None:
    """Cancel a reading task and wait until it has ended."""
    if reading is not None:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading


async def play(url: str, token: str | None = None, *, seconds: float, on_frame: FrameCallback | None = None,
               codec: str = "h264", timeout_s: float = 15.0) -> PlayReport:
    """Play the WHEP stream at ``url`` for ``seconds`` (one recvonly video transceiver), reading stamps."""
    session = WhipSession(url, token, timeout_s=timeout_s)
    transceiver = session.pc.addTransceiver("video", direction="recvonly")
    prefer_codec(transceiver, codec)
    report = PlayReport()
    reading: asyncio.Task[None] | None = None
    try:
        await session.open()
        report.codec = answer_codec(session.answer_sdp)
        if transceiver.receiver.track is None:
            raise WhipError(f"the endpoint {url} sends no video")
        started = time.perf_counter()
        reading = asyncio.create_task(_Reader(report, on_frame).run(transceiver.receiver.track))
        await asyncio.wait([reading], timeout=seconds)
        report.duration_s = time.perf_counter() - started
    finally:
        await _stop(reading)
        await session.close()
    return report


class WhipPublisher:
    """``fusion-ray live --whip``: the swapped frames (a result sink, ``(seq, image bytes)``) on one
    sendonly video track to a WHIP endpoint; a stalled endpoint only makes frames be replaced."""

    def __init__(self, url: str, token: str | None, *, fps: float, codec: str = "h264",
                 timeout_s: float = 15.0) -> None:
        self.session = WhipSession(url, token, timeout_s=timeout_s)
        self.track = LatestFrameTrack(fps)
        prefer_codec(self.session.pc.addTransceiver(self.track, direction="sendonly"), codec)
        self.codec: str | None = None
        self.pushed = 0

    async def start(self) -> None:
        await self.session.open()
        self.codec = answer_codec(self.session.answer_sdp)

    def __call__(self, seq: int, image: bytes) -> None:
        frame = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_COLOR)
        if frame is not None:
            self.track.push(frame, seq)
            self.pushed += 1

    async def close(self) -> None:
        self.track.stop()
        await self.session.close()
