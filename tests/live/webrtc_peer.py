"""A real aiortc WHIP publisher for tests that look at the session itself (its events, its end,
its audio): plays frames stamped with their number, reads the returned track's stamps."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import aiohttp
import numpy as np
from aiortc import (
    AudioStreamTrack,
    RTCPeerConnection,
    RTCRtpSender,
    RTCSessionDescription,
    VideoStreamTrack,
)
from av import VideoFrame

from fusion_ray.live.stamp import read_stamp, stamp


class StampedClip(VideoStreamTrack):
    """The frames in a loop at ``fps``, each stamped with its number; records when each was sent."""

    def __init__(self, frames: list[np.ndarray], fps: int = 15) -> None:
        super().__init__()
        self.frames, self.fps = frames, fps
        self.sent: dict[int, float] = {}
        self.count = 0
        self._start: float | None = None

    async def recv(self) -> VideoFrame:
        if self._start is None:
            self._start = time.monotonic()
        seq = self.count
        self.count += 1
        await asyncio.sleep(max(0.0, self._start + seq / self.fps - time.monotonic()))
        frame = VideoFrame.from_ndarray(stamp(self.frames[seq % len(self.frames)], seq), format="bgr24")
        frame.pts, frame.time_base = seq * (90000 // self.fps), Fraction(1, 90000)
        self.sent[seq] = time.monotonic()
        return frame


@dataclass
class Published:
    status: int
    location: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    received: dict[int, np.ndarray] = field(default_factory=dict)
    latency_ms: dict[int, float] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    deleted: int | None = None
    closed_by_server: bool = False
    audio_frames: int = 0


async def publish(base: str, query: str, token: str | None, frames: list[np.ndarray], *, codec: str = "video/H264",
                  seconds: float = 3.0, sendrecv: bool = True, delete: bool = True, fps: int = 15,
                  on_location: Any = None, audio: bool = False) -> Published:
    """POST a WHIP offer with one sendrecv video transceiver (or sendonly + recvonly), play for
    ``seconds``, collect what comes back, then DELETE."""
    pc = RTCPeerConnection()
    clip = StampedClip(frames, fps)
    if sendrecv:
        transceivers = [pc.addTransceiver(clip, direction="sendrecv")]
    else:
        transceivers = [pc.addTransceiver(clip, direction="sendonly"), pc.addTransceiver("video", direction="recvonly")]
    for transceiver in transceivers:
        caps = RTCRtpSender.getCapabilities("video").codecs
        transceiver.setCodecPreferences([c for c in caps if c.mimeType == codec])
    if audio:
        pc.addTransceiver(AudioStreamTrack(), direction="sendrecv")
    channel = pc.createDataChannel("events")
    result = Published(0)
    channel.on("message", lambda message: result.events.append(message))
    readers: list[asyncio.Task[None]] = []

    async def read(track: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                frame = (await track.recv()).to_ndarray(format="bgr24")
                seq = read_stamp(frame)
                if seq is not None and seq in clip.sent and seq not in result.received:
                    result.latency_ms[seq] = (time.monotonic() - clip.sent[seq]) * 1000.0
                    result.received[seq] = frame
                    result.order.append(seq)

    async def listen(track: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                await track.recv()
                result.audio_frames += 1

    pc.on("track", lambda track: readers.append(asyncio.create_task(read(track) if track.kind == "video" else listen(track))))
    await pc.setLocalDescription(await pc.createOffer())
    headers = {"Content-Type": "application/sdp", **({"Authorization": f"Bearer {token}"} if token else {})}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/v1/whip?{query}", data=pc.localDescription.sdp, headers=headers) as response:
            result.status, result.headers = response.status, dict(response.headers)
            if response.status != 201:
                result.error = await response.json()
                await pc.close()
                return result
            result.location = response.headers["Location"]
            await pc.setRemoteDescription(RTCSessionDescription(await response.text(), "answer"))
            if on_location is not None:
                on_location(result.location)
        ends = time.monotonic() + seconds
        while time.monotonic() < ends and pc.connectionState not in ("closed", "failed"):
            await asyncio.sleep(0.1)
        if delete and pc.connectionState not in ("closed", "failed"):
            async with http.delete(f"{base}{result.location}", headers=headers) as response:
                result.deleted = response.status
    result.closed_by_server = pc.connectionState in ("closed", "failed")
    for reader in readers:
        reader.cancel()
    await pc.close()
    return result


async def play(base: str, session_path: str, token: str | None, *, seconds: float = 2.0) -> tuple[int, list[int]]:
    """A WHEP viewer of ``session_path`` (``/v1/whep/<session>``): the status and the stamps it saw."""
    pc = RTCPeerConnection()
    pc.addTransceiver("video", direction="recvonly")
    seen: list[int] = []
    readers: list[asyncio.Task[None]] = []

    async def read(track: Any) -> None:
        with contextlib.suppress(Exception):
            while True:
                seq = read_stamp((await track.recv()).to_ndarray(format="bgr24"))
                if seq is not None:
                    seen.append(seq)

    pc.on("track", lambda track: readers.append(asyncio.create_task(read(track))))
    await pc.setLocalDescription(await pc.createOffer())
    headers = {"Content-Type": "application/sdp", **({"Authorization": f"Bearer {token}"} if token else {})}
    async with aiohttp.ClientSession() as http, http.post(f"{base}{session_path}", data=pc.localDescription.sdp,
                                                          headers=headers) as response:
        status = response.status
        if status == 201:
            await pc.setRemoteDescription(RTCSessionDescription(await response.text(), "answer"))
    if status == 201:
        await asyncio.sleep(seconds)
    for reader in readers:
        reader.cancel()
    await pc.close()
    return status, seen
