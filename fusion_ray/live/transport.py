"""The connection a stream runs over, and adapters from Starlette and ``websockets``.

The stream core only needs :class:`Transport`; a host wraps its accepted WebSocket:
``StarletteTransport(websocket)`` for a FastAPI/Starlette route (Ray Serve's ingress),
``WebsocketsTransport(connection)`` for a ``websockets`` server. Neither adapter imports its
library: they call the connection's documented methods.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from fusion_ray.errors import FusionRayError
from fusion_ray.live.media import RawFrame, RawResult


class TransportClosed(FusionRayError):
    """The peer closed the connection or it broke."""


class Transport(Protocol):
    async def receive(self) -> str | bytes | RawFrame:
        """The next message (a media track's decoded frame over WebRTC); :class:`TransportClosed`
        when the connection is gone."""
        ...

    async def send_text(self, text: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int, reason: str = "") -> None: ...


class MediaTransport(Transport, Protocol):
    """A transport whose frames are media-track frames (:class:`RawFrame` in, :class:`RawResult` out)."""

    async def send_frame(self, result: RawResult) -> bool:
        """Hand ``result`` to the outgoing track; True once its encoder took it within the deadline."""
        ...


class StarletteTransport:
    """An accepted ``starlette.websockets.WebSocket`` (FastAPI's ``WebSocket``)."""

    def __init__(self, websocket: Any) -> None:
        self.ws = websocket

    async def receive(self) -> str | bytes:
        try:
            message = await self.ws.receive()
        except Exception as exc:  # the server's own disconnect errors differ by ASGI server
            raise TransportClosed(f"receive failed: {type(exc).__name__}") from exc
        if message.get("type") == "websocket.disconnect":
            raise TransportClosed(f"client closed ({message.get('code')})")
        if message.get("bytes") is not None:
            return bytes(message["bytes"])
        return str(message.get("text") or "")

    async def send_text(self, text: str) -> None:
        try:
            await self.ws.send_text(text)
        except Exception as exc:  # any send failure means the client is gone
            raise TransportClosed(f"send failed: {type(exc).__name__}") from exc

    async def send_bytes(self, data: bytes) -> None:
        try:
            await self.ws.send_bytes(data)
        except Exception as exc:
            raise TransportClosed(f"send failed: {type(exc).__name__}") from exc

    async def close(self, code: int, reason: str = "") -> None:
        with contextlib.suppress(Exception):
            await self.ws.close(code=code, reason=reason)


class WebsocketsTransport:
    """A ``websockets`` (asyncio API) server connection."""

    def __init__(self, connection: Any) -> None:
        self.conn = connection

    async def receive(self) -> str | bytes:
        try:
            message = await self.conn.recv()
        except Exception as exc:  # websockets.ConnectionClosed and its subclasses
            raise TransportClosed(f"receive failed: {type(exc).__name__}") from exc
        return message if isinstance(message, str) else bytes(message)

    async def send_text(self, text: str) -> None:
        await self._send(text)

    async def send_bytes(self, data: bytes) -> None:
        await self._send(data)

    async def _send(self, message: str | bytes) -> None:
        try:
            await self.conn.send(message)
        except Exception as exc:
            raise TransportClosed(f"send failed: {type(exc).__name__}") from exc

    async def close(self, code: int, reason: str = "") -> None:
        with contextlib.suppress(Exception):
            await self.conn.close(code=code, reason=reason)
