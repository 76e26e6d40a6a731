"""A stream in this process, no socket: the hub's stream policy behind an in-memory connection.

``fusion-ray live`` without ``--url`` (Deep-Live-Cam's use: a camera, one machine, no server)
runs the same :class:`~fusion_ray.live.hub.LiveHub` and :class:`~fusion_ray.live.stream.Stream`
as the served endpoint (latest frame wins, deadlines, the degradation ladder, level-2
tracking), over :class:`DirectConnection` instead of a WebSocket, and the same client loop
(:func:`fusion_ray.live.client.stream_over`) plays the source into it. Only the socket is gone.

The connection's two ends are on one event loop: the client end offers what the client loop
uses of a ``websockets`` connection (``send``, ``recv``, ``async for``, ``wait_closed``,
``close_code``), the server end is a :class:`~fusion_ray.live.transport.Transport`. Messages
to the client wait in a bounded queue (``client_queue``): a slow consumer (a window, an
encoder) holds the stream's send loop as a slow socket would, and the stream drops frames
(``deadline``, ``overload``) instead of buffering them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fusion_ray.live.client import ClientReport, FrameSource, stream_over
from fusion_ray.live.hub import LiveHub
from fusion_ray.live.transport import TransportClosed

CLIENT_QUEUE = 4

_CLOSED = None


class _ServerEnd:
    """The :class:`~fusion_ray.live.transport.Transport` the hub serves."""

    def __init__(self, conn: DirectConnection) -> None:
        self.conn = conn

    async def receive(self) -> str | bytes:
        message = await self.conn.to_server.get()
        if message is _CLOSED:
            self.conn.to_server.put_nowait(_CLOSED)  # every later receive fails too
            raise TransportClosed("client gone")
        return message

    async def send_text(self, text: str) -> None:
        await self._send(text)

    async def send_bytes(self, data: bytes) -> None:
        await self._send(data)

    async def _send(self, message: str | bytes) -> None:
        if self.conn.closed.is_set():
            raise TransportClosed("connection closed")
        await self.conn.to_client.put(message)

    async def close(self, code: int, reason: str = "") -> None:
        self.conn.finish(code)


class DirectConnection:
    """Both ends of an in-memory stream connection; this object is the client end."""

    def __init__(self, client_queue: int = CLIENT_QUEUE) -> None:
        self.to_server: asyncio.Queue[Any] = asyncio.Queue()
        self.to_client: asyncio.Queue[Any] = asyncio.Queue(client_queue)
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self.server = _ServerEnd(self)
        self._ending: asyncio.Task[None] | None = None

    def finish(self, code: int) -> None:
        """Close both directions (idempotent; the first code stays)."""
        if self.closed.is_set():
            return
        self.close_code = code
        self.closed.set()
        self.to_server.put_nowait(_CLOSED)
        if self.to_client.full():  # the end marker goes after what the client has not read yet
            self._ending = asyncio.get_running_loop().create_task(self.to_client.put(_CLOSED))
        else:
            self.to_client.put_nowait(_CLOSED)

    # ------------------------------------------------------------ client end
    async def send(self, message: str | bytes) -> None:
        if self.closed.is_set():
            raise TransportClosed("connection closed")
        self.to_server.put_nowait(message)

    async def recv(self) -> str | bytes:
        message = await self.to_client.get()
        if message is _CLOSED:
            self.to_client.put_nowait(_CLOSED)
            raise TransportClosed(f"server closed ({self.close_code})")
        return message  # type: ignore[no-any-return]

    def __aiter__(self) -> DirectConnection:
        return self

    async def __anext__(self) -> str | bytes:
        try:
            return await self.recv()
        except TransportClosed:
            raise StopAsyncIteration from None

    async def wait_closed(self) -> None:
        await self.closed.wait()


async def run_direct(hub: LiveHub, start: dict[str, Any], source: FrameSource, *, seconds: float | None = None,
                     max_frames: int | None = None, on_result: Callable[[int, bytes], None] | None = None,
                     blocking_source: bool = False) -> ClientReport:
    """Play ``source`` into ``hub`` through a :class:`DirectConnection`; the client's report."""
    conn = DirectConnection()
    served = asyncio.create_task(hub.serve(conn.server))
    try:
        return await stream_over(conn, start, source, seconds=seconds, max_frames=max_frames,
                                 on_result=on_result, blocking_source=blocking_source)
    finally:
        conn.finish(1000)
        await served
