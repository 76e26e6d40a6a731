"""One WebRTC session: a peer connection that carries the camera in and the swapped video out.

The session lives in the process that runs the chain (the fused Serve replica, or the in-process
host): aiortc decodes the incoming track (VP8 or H.264) in its own thread, :class:`SessionTransport`
hands each decoded frame to the stream core as a :class:`~fusion_ray.live.media.RawFrame` (the
stream's latest-wins queue drops what the chain cannot take, so ``recv()`` is never held up), and
the processed frames leave through :class:`SwappedTrack`, whose encoder takes the newest frame
only while it is within its deadline. Nothing is decoded or encoded twice, nothing is pickled.

- **Tracks.** The first video the offer sends is the camera; the swapped track goes back on the
  first video transceiver the offer lets us send on: a single ``sendrecv`` transceiver (what a
  browser's ``addTransceiver(track, {direction: "sendrecv"})`` makes) or a separate ``recvonly``
  one. Audio offered is sent back delayed by the stream's median latency, so it stays in step
  with the swapped video. Viewers (WHEP) get their own :class:`SwappedTrack` of the same frames.
- **Events.** A data channel the client opens carries the stream's ``ready``, ``stats`` and
  ``dropped`` events (the WebSocket's text events); text sent before it opens waits, bounded.
- **Bitrate** follows the receiver's feedback: aiortc's sender sets its encoder's target bitrate
  from the REMB messages the receiver sends.
- **Ending.** ICE or DTLS failing, the peer closing, or the stream ending (idle timeout, DELETE,
  a deleted source, shut-down) closes the peer connection and frees its tracks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import av
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCIceServer,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError

from fusion_ray.live.media import RawFrame, RawResult
from fusion_ray.live.offer import OfferInfo
from fusion_ray.live.transport import TransportClosed
from fusion_ray.types import Frame

log = logging.getLogger(__name__)

PENDING_EVENTS = 32
"""Text events kept until the client's data channel opens (oldest lost)."""
AUDIO_DELAY_MAX_S = 1.0

_CLOSED = object()


def _bgr(frame: av.VideoFrame) -> Frame:
    return frame.to_ndarray(format="bgr24")  # type: ignore[return-value]


class SwappedTrack(MediaStreamTrack):
    """The swapped video to one peer: its encoder takes the newest frame, never one past its deadline."""

    kind = "video"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self._item: tuple[RawResult, asyncio.Future[bool] | None] | None = None
        self._ready = asyncio.Event()

    def offer(self, result: RawResult, taken: asyncio.Future[bool] | None = None) -> None:
        """Make ``result`` the next frame; ``taken`` resolves True when the encoder takes it, False
        when a newer frame replaces it or its deadline passes first."""
        if self._item is not None and self._item[1] is not None and not self._item[1].done():
            self._item[1].set_result(False)
        self._item = (result, taken)
        self._ready.set()

    async def recv(self) -> av.VideoFrame:
        while True:
            if self.readyState != "live":
                raise MediaStreamError
            await self._ready.wait()
            self._ready.clear()
            if self._item is None:
                continue
            (result, taken), self._item = self._item, None
            late = self.clock() > result.deadline
            if taken is not None and not taken.done():
                taken.set_result(not late)
            if late:  # never sent past its deadline
                continue
            frame = av.VideoFrame.from_ndarray(result.frame, format="bgr24")
            frame.pts, frame.time_base = result.pts, result.time_base
            return frame

    def stop(self) -> None:
        super().stop()
        self._ready.set()


class DelayedAudio(MediaStreamTrack):
    """The offered audio sent back ``delay()`` seconds late: in step with the swapped video. Frames
    are read as they come and each leaves ``delay()`` after it arrived (at most
    :data:`AUDIO_DELAY_MAX_S` of audio waits; older frames are dropped)."""

    kind = "audio"

    def __init__(self, source: MediaStreamTrack, delay: Callable[[], float]) -> None:
        super().__init__()
        self.source = source
        self.delay = delay
        self._queued: deque[tuple[float, av.AudioFrame]] = deque(maxlen=int(AUDIO_DELAY_MAX_S / 0.01))
        self._arrived = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        try:
            while True:
                frame = await self.source.recv()
                if isinstance(frame, av.AudioFrame):
                    self._queued.append((time.monotonic(), frame))
                    self._arrived.set()
        except MediaStreamError:
            self.stop()

    async def recv(self) -> av.AudioFrame:
        if self._reader is None:
            self._reader = asyncio.create_task(self._read())
        while not self._queued:
            if self.readyState != "live":
                raise MediaStreamError
            self._arrived.clear()
            await self._arrived.wait()
        arrived, frame = self._queued.popleft()
        wait = arrived + min(max(self.delay(), 0.0), AUDIO_DELAY_MAX_S) - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        return frame

    def stop(self) -> None:
        super().stop()
        self._arrived.set()
        if self._reader is not None:
            self._reader.cancel()


class SessionTransport:
    """The stream core's :class:`~fusion_ray.live.media.MediaTransport` over a peer connection."""

    def __init__(self, session: WebRtcSession) -> None:
        self.session = session
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()
        self.channel: Any = None
        self.pending: deque[str] = deque(maxlen=PENDING_EVENTS)

    async def receive(self) -> str | bytes | RawFrame:
        item = await self.inbox.get()
        if item is _CLOSED:
            self.inbox.put_nowait(_CLOSED)
            raise TransportClosed("the peer connection ended")
        return item  # type: ignore[no-any-return]

    def attach_channel(self, channel: Any) -> None:
        self.channel = channel
        channel.on("open", self._flush)
        channel.on("message", lambda message: self.inbox.put_nowait(message) if isinstance(message, str) else None)
        if channel.readyState == "open":
            self._flush()

    def _flush(self) -> None:
        while self.pending and self.channel is not None and self.channel.readyState == "open":
            self.channel.send(self.pending.popleft())

    async def send_text(self, text: str) -> None:
        if self.session.closed:
            raise TransportClosed("the peer connection ended")
        self.pending.append(text)
        self._flush()

    async def send_bytes(self, data: bytes) -> None:
        raise TransportClosed("a WebRTC session sends frames on its video track, not messages")

    async def send_frame(self, result: RawResult) -> bool:
        if self.session.closed:
            raise TransportClosed("the peer connection ended")
        return await self.session.deliver(result)

    async def close(self, code: int, reason: str = "") -> None:
        self._flush()
        await self.session.close(reason)

    def end(self) -> None:
        self.inbox.put_nowait(_CLOSED)


class WebRtcSession:
    """A publisher's peer connection, its viewers' connections and the tracks between them."""

    def __init__(self, session_id: str, ice_servers: list[RTCIceServer], *,
                 audio_delay: Callable[[], float] = lambda: 0.0) -> None:
        self.id = session_id
        self.ice_servers = ice_servers
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=ice_servers or None))
        self.transport = SessionTransport(self)
        self.returned: SwappedTrack | None = None
        self.viewers: dict[RTCPeerConnection, SwappedTrack] = {}
        self.audio_delay = audio_delay
        self.closed = False
        self.reason = ""
        self.created = time.monotonic()
        self._reader: asyncio.Task[None] | None = None

    async def answer(self, offer: OfferInfo) -> str:
        """Take the publisher's offer: camera in, swapped video (and delayed audio) back; the SDP
        answer, with every ICE candidate (aiortc gathers them all before answering)."""
        pc = self.pc
        pc.on("datachannel", self.transport.attach_channel)
        pc.on("connectionstatechange", self._state_changed)
        await pc.setRemoteDescription(RTCSessionDescription(offer.sdp, "offer"))
        for transceiver in pc.getTransceivers():
            remote = offer.directions.get(transceiver.mid or "", "inactive")
            receives = remote in ("sendrecv", "sendonly") and transceiver.receiver.track is not None
            if transceiver.kind == "video" and receives and self._reader is None:
                self._reader = asyncio.create_task(self._read(transceiver.receiver.track))
            elif transceiver.kind == "audio" and receives and remote == "sendrecv":
                transceiver.sender.replaceTrack(DelayedAudio(transceiver.receiver.track, self.audio_delay))
                transceiver.direction = "sendrecv"
        for transceiver in pc.getTransceivers():  # the swapped video goes back on the first video we may send on
            remote = offer.directions.get(transceiver.mid or "", "inactive")
            if transceiver.kind == "video" and remote in ("sendrecv", "recvonly") and self.returned is None:
                self.returned = SwappedTrack()
                transceiver.sender.replaceTrack(self.returned)
                transceiver.direction = "sendrecv" if remote == "sendrecv" else "sendonly"
        await pc.setLocalDescription(await pc.createAnswer())
        return str(pc.localDescription.sdp)

    async def add_viewer(self, offer: OfferInfo) -> str:
        """A WHEP viewer: its own peer connection playing this session's swapped frames."""
        viewer = RTCPeerConnection(RTCConfiguration(iceServers=self.ice_servers or None))
        track = SwappedTrack()
        self.viewers[viewer] = track

        async def on_state() -> None:
            if viewer.connectionState in ("failed", "closed"):
                await self._drop_viewer(viewer)

        viewer.on("connectionstatechange", on_state)
        try:
            await viewer.setRemoteDescription(RTCSessionDescription(offer.sdp, "offer"))
            for transceiver in viewer.getTransceivers():
                if transceiver.kind == "video" and offer.directions.get(transceiver.mid or "") in ("recvonly", "sendrecv"):
                    transceiver.sender.replaceTrack(track)
                    transceiver.direction = "sendonly"
                    break
            await viewer.setLocalDescription(await viewer.createAnswer())
        except BaseException:
            await self._drop_viewer(viewer)
            raise
        return str(viewer.localDescription.sdp)

    async def deliver(self, result: RawResult) -> bool:
        """Send ``result`` to the publisher (True once its encoder took it in time) and to every
        viewer (their newest frame); with no return track, handing it to the viewers is delivery."""
        for track in self.viewers.values():
            track.offer(result)
        if self.returned is None:
            return True
        taken: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.returned.offer(result, taken)
        return await taken

    async def _read(self, track: MediaStreamTrack) -> None:
        """Decoded camera frames to the stream as they come (never held up: the stream's queue drops)."""
        try:
            while True:
                frame = await track.recv()
                assert isinstance(frame, av.VideoFrame)
                self.transport.inbox.put_nowait(RawFrame(partial(_bgr, frame), frame.width, frame.height, frame.pts,
                                                         frame.time_base, time.time() * 1000.0))
        except MediaStreamError:
            pass
        finally:
            self.transport.end()

    async def _state_changed(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self.transport.end()

    async def _drop_viewer(self, viewer: RTCPeerConnection) -> None:
        track = self.viewers.pop(viewer, None)
        if track is not None:
            track.stop()
        with contextlib.suppress(Exception):
            await viewer.close()

    async def close(self, reason: str = "") -> None:
        """Close every peer connection and stop the tracks (idempotent)."""
        if self.closed:
            return
        self.closed, self.reason = True, reason
        self.transport.end()
        if self.returned is not None:
            self.returned.stop()
        for viewer in list(self.viewers):
            await self._drop_viewer(viewer)
        with contextlib.suppress(Exception):
            await self.pc.close()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
