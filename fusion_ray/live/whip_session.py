"""One WHIP or WHEP resource (RFC 9725 and the WHEP draft) over aiortc and aiohttp.

:class:`WhipSession` POSTs the peer connection's SDP offer (``Content-Type: application/sdp``,
``Authorization: Bearer TOKEN``), expects ``201 Created`` with the SDP answer and a ``Location``,
waits for the media connection, and DELETEs the Location when closed. :class:`LatestFrameTrack`
is the outgoing video: it holds only the newest frame, so a stalled endpoint or a slow encoder
never holds up whoever pushes frames (the swap loop). ICE uses host candidates only (no STUN
server is asked): the endpoint's candidates come in its answer, as with OBS's WHIP output.
"""

from __future__ import annotations

import asyncio
import logging
import time
from fractions import Fraction
from urllib.parse import urljoin

import aiohttp
import av
import numpy as np
from aiortc import (
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCRtpSender,
    RTCRtpTransceiver,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamError
from aiortc.sdp import SessionDescription

from fusion_ray.errors import FusionRayError
from fusion_ray.live.encoders import use_realtime_h264

log = logging.getLogger(__name__)

CODECS = {"h264": "video/H264", "vp8": "video/VP8"}
VIDEO_CLOCK = 90_000
CONNECT_TIMEOUT_S = 15.0


class WhipError(FusionRayError):
    """A WHIP/WHEP endpoint refused the offer, answered badly, or the media did not connect."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def prefer_codec(transceiver: RTCRtpTransceiver, codec: str) -> None:
    """Offer ``codec`` (``h264`` or ``vp8``) first on a video transceiver; the others stay as fallbacks."""
    mime = CODECS.get(codec)
    if mime is None:
        raise WhipError(f"unknown video codec {codec!r}: choose from {', '.join(CODECS)}")
    available = RTCRtpSender.getCapabilities("video").codecs
    first = [c for c in available if c.mimeType.lower() == mime.lower()]
    transceiver.setCodecPreferences(first + [c for c in available if c not in first])


def answer_codec(sdp: str, kind: str = "video") -> str | None:
    """The codec an SDP answer chose for its first ``kind`` section (``h264``, ``vp8``...), if any."""
    for media in SessionDescription.parse(sdp).media:
        if media.kind == kind and media.rtp.codecs:
            return str(media.rtp.codecs[0].mimeType.split("/")[-1].lower())
    return None


def _refusal(url: str, status: int, reason: str, body: str) -> str:
    detail = " ".join(body.split())[:200]
    what = "refused the token" if status in (401, 403) else "did not create a session"
    return f"the endpoint {url} {what}: {status} {reason}" + (f": {detail}" if detail else "")


class WhipSession:
    """A peer connection negotiated with a WHIP/WHEP endpoint; add transceivers, then :meth:`open`."""

    def __init__(self, url: str, token: str | None = None, *, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        use_realtime_h264()  # as the service's senders: the same encoder both ways
        self.url = url
        self.token = token
        self.timeout_s = timeout_s
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.location: str | None = None
        self.answer_sdp = ""

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Content-Type": content_type} if content_type else {}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    async def open(self) -> None:
        """POST the offer, apply the answer, wait until the media is connected."""
        await self.pc.setLocalDescription(await self.pc.createOffer())
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as http, http.post(
                    self.url, data=self.pc.localDescription.sdp, headers=self._headers("application/sdp")) as resp:
                body = await resp.text()
                if resp.status != 201:
                    raise WhipError(_refusal(self.url, resp.status, resp.reason or "", body), resp.status)
                location = resp.headers.get("Location")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise WhipError(f"cannot reach {self.url}: {type(exc).__name__}: {exc}") from exc
        if not location:
            raise WhipError(f"the endpoint {self.url} answered 201 without a Location header", 201)
        self.location = urljoin(self.url, location)
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        except Exception as exc:  # aiortc raises ValueError, OperationError... on an unusable answer
            raise WhipError(f"the endpoint {self.url} sent an unusable SDP answer: {type(exc).__name__}: {exc}",
                            201) from exc
        self.answer_sdp = body
        await self._connected()

    async def _connected(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while self.pc.connectionState != "connected":
            if self.pc.connectionState in ("failed", "closed") or time.monotonic() > deadline:
                raise WhipError(f"no media connection to {self.url} ({self.pc.connectionState} after "
                                f"{self.timeout_s:g} s: ICE or DTLS failed)")
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        """DELETE the session's resource (a failure is logged, not raised) and close the connection."""
        if self.location is not None:
            location, self.location = self.location, None
            try:
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0)) as http, \
                        http.delete(location, headers=self._headers()) as resp:
                    if resp.status >= 300:
                        log.warning("DELETE %s answered %d", location, resp.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning("DELETE %s failed: %s", location, exc)
        await self.pc.close()


class LatestFrameTrack(MediaStreamTrack):
    """Outgoing video holding only the newest pushed frame; its pts follow the frames' sequence
    numbers at ``fps`` (a skipped frame leaves a gap, so the timing stays the input's)."""

    kind = "video"

    def __init__(self, fps: float) -> None:
        super().__init__()
        self.fps = fps
        self.replaced = 0
        self.sent = 0
        self._frame: tuple[np.ndarray, int] | None = None
        self._ready = asyncio.Event()
        self._last_pts = -1

    def push(self, frame: np.ndarray, seq: int) -> None:
        """Offer a BGR frame; an unsent older one is dropped. Never waits."""
        if self._frame is not None:
            self.replaced += 1
        self._frame = (frame, seq)
        self._ready.set()

    async def recv(self) -> av.VideoFrame:
        while self._frame is None:
            if self.readyState != "live":
                raise MediaStreamError
            self._ready.clear()
            await self._ready.wait()
        image, seq = self._frame
        self._frame = None
        frame = av.VideoFrame.from_ndarray(image, format="bgr24")
        frame.pts = max(round(seq * VIDEO_CLOCK / self.fps), self._last_pts + 1)
        frame.time_base = Fraction(1, VIDEO_CLOCK)
        self._last_pts = frame.pts
        self.sent += 1
        return frame

    def stop(self) -> None:
        super().stop()
        self._ready.set()
