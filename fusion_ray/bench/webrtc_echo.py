"""A plain aiortc WHIP echo server: the WebRTC transport's own floor, and a test endpoint.

``POST /whip`` (SDP offer) creates a session that sends every received frame back unchanged:
on the same transceiver when the client's is ``sendrecv``, else on the client's ``recvonly``
one. ``POST /whep/{session}`` plays a session's incoming video to a viewer (WHEP). ``DELETE`` of
a returned Location ends it. Frames are decoded and re-encoded once, as any server that looks at
them must; nothing else is done, so a swap service measured the same way shows its own cost as
the difference. :class:`EchoServer` runs on 127.0.0.1 in a background thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpTransceiver,
    RTCSessionDescription,
)
from aiortc.contrib.media import MediaRelay
from aiortc.mediastreams import MediaStreamError
from aiortc.sdp import SessionDescription

from fusion_ray.errors import FusionRayError
from fusion_ray.live.encoders import use_realtime_h264


@dataclass
class _Session:
    pc: RTCPeerConnection
    relay: MediaRelay = field(default_factory=MediaRelay)
    video: MediaStreamTrack | None = None
    viewers: dict[str, RTCPeerConnection] = field(default_factory=dict)
    drains: list[asyncio.Task[None]] = field(default_factory=list)


async def _drain(track: MediaStreamTrack, counted: dict[str, int] | None = None, key: str = "") -> None:
    """Read and drop a track's frames (counted in ``counted[key]``)."""
    with contextlib.suppress(MediaStreamError):
        while True:
            await track.recv()
            if counted is not None:
                counted[key] = counted.get(key, 0) + 1


def _offered_directions(sdp: str) -> dict[str, str]:
    """The client's direction of each media section, by mid."""
    return {str(m.rtp.muxId): str(m.direction) for m in SessionDescription.parse(sdp).media}


class EchoServer:
    """The echo endpoint on ``host:port`` (0: a free port); ``token``: bearer token required if set."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None) -> None:
        use_realtime_h264()  # as the service's senders: the same encoder both ways
        self.token = token
        self.sessions: dict[str, _Session] = {}
        self.frames_received: dict[str, int] = {}
        """Video frames each session (by id) sent here, kept after it ends."""
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve()), name="webrtc-echo", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/whip"

    def whep_url(self, session_id: str | None = None) -> str:
        """The WHEP URL of ``session_id`` (default: the newest session)."""
        if session_id is None:
            if not self.sessions:
                raise FusionRayError("the echo server has no session to play")
            session_id = list(self.sessions)[-1]
        return f"http://{self.host}:{self.port}/whep/{session_id}"

    def _app(self) -> web.Application:
        app = web.Application()
        app.add_routes([web.post("/whip", self._whip), web.delete("/whip/{session}", self._end),
                        web.post("/whep/{session}", self._whep), web.delete("/whep/{session}/{viewer}", self._end)])
        return app

    def _refused(self, request: web.Request) -> web.Response | None:
        if self.token is None:
            return None
        given = request.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            return None
        return web.Response(status=401, text="missing or wrong bearer token")

    async def _offer(self, request: web.Request) -> str | web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        if request.content_type != "application/sdp":
            return web.Response(status=415, text="Content-Type must be application/sdp")
        return await request.text()

    async def _answer(self, pc: RTCPeerConnection, location: str) -> web.Response:
        await pc.setLocalDescription(await pc.createAnswer())
        return web.Response(status=201, text=pc.localDescription.sdp, content_type="application/sdp",
                            headers={"Location": location})

    async def _whip(self, request: web.Request) -> web.Response:
        offer = await self._offer(request)
        if isinstance(offer, web.Response):
            return offer
        session_id = secrets.token_hex(8)
        session = _Session(RTCPeerConnection(RTCConfiguration(iceServers=[])))
        directions = _offered_directions(offer)

        def echo(track: MediaStreamTrack) -> None:
            if track.kind == "video" and session.video is None:
                session.video = track
                counter = _drain(session.relay.subscribe(track), self.frames_received, session_id)
                session.drains.append(asyncio.ensure_future(counter))
            receiving = next(t for t in session.pc.getTransceivers() if t.receiver.track is track)
            target = self._echo_transceiver(session.pc, receiving, directions)
            if target is None:
                session.drains.append(asyncio.ensure_future(_drain(session.relay.subscribe(track))))
                return
            target.sender.replaceTrack(session.relay.subscribe(track))
            target.direction = "sendrecv" if target is receiving else "sendonly"

        session.pc.on("track", echo)
        try:
            await session.pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        except Exception as exc:  # aiortc's parse and negotiation errors
            await session.pc.close()
            return web.Response(status=400, text=f"unusable offer: {type(exc).__name__}: {exc}")
        self.sessions[session_id] = session
        return await self._answer(session.pc, f"/whip/{session_id}")

    @staticmethod
    def _echo_transceiver(pc: RTCPeerConnection, receiving: RTCRtpTransceiver,
                          directions: dict[str, str]) -> RTCRtpTransceiver | None:
        """The client's ``sendrecv`` transceiver itself, else a free ``recvonly`` one of the same kind."""
        if directions.get(str(receiving.mid)) == "sendrecv":
            return receiving
        for t in pc.getTransceivers():
            if t.kind == receiving.kind and t.sender.track is None and directions.get(str(t.mid)) == "recvonly":
                return t
        return None

    async def _whep(self, request: web.Request) -> web.Response:
        offer = await self._offer(request)
        if isinstance(offer, web.Response):
            return offer
        session = self.sessions.get(request.match_info["session"])
        if session is None or session.video is None:
            return web.Response(status=404, text="no such session, or it sends no video")
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer, type="offer"))
        except Exception as exc:
            await pc.close()
            return web.Response(status=400, text=f"unusable offer: {type(exc).__name__}: {exc}")
        video = next((t for t in pc.getTransceivers() if t.kind == "video"), None)
        if video is None:
            await pc.close()
            return web.Response(status=400, text="the offer has no video section")
        video.sender.replaceTrack(session.relay.subscribe(session.video))
        video.direction = "sendonly"
        viewer = secrets.token_hex(8)
        session.viewers[viewer] = pc
        return await self._answer(pc, f"/whep/{request.match_info['session']}/{viewer}")

    async def _end(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        session_id, viewer = request.match_info["session"], request.match_info.get("viewer")
        session = self.sessions.get(session_id)
        if session is None or (viewer is not None and viewer not in session.viewers):
            return web.Response(status=404, text="no such resource")
        if viewer is not None:
            await session.viewers.pop(viewer).close()
        else:
            await self._close_session(self.sessions.pop(session_id))
        return web.Response(status=200)

    @staticmethod
    async def _close_session(session: _Session) -> None:
        for task in session.drains:
            task.cancel()
        for pc in [*session.viewers.values(), session.pc]:
            await pc.close()

    async def serve(self) -> None:
        """Serve until :meth:`stop` (in the caller's event loop)."""
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        runner = web.AppRunner(self._app(), access_log=None)
        await runner.setup()
        await web.SockSite(runner, self._sock).start()
        self._started.set()
        try:
            await self._stopping.wait()
        finally:
            for session_id in list(self.sessions):
                await self._close_session(self.sessions.pop(session_id))
            await runner.cleanup()

    def start(self, timeout_s: float = 10.0) -> EchoServer:
        """Serve in a background thread; returns once the socket accepts requests."""
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise FusionRayError(f"the echo server did not start within {timeout_s} s")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            loop.call_soon_threadsafe(stopping.set)
        deadline = time.monotonic() + timeout_s
        if self._thread.is_alive():
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> EchoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
