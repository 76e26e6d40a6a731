"""A header deadline in front of the Serve proxy (what ``fusion-ray serve`` listens with).

Ray Serve 2.60 gives its uvicorn no deadline for a request's headers: a client that sends
part of them holds its connection for as long as it likes. ``fusion-ray serve`` therefore
binds the public address itself and runs Serve's proxy on a loopback port behind it. For
each connection this guard:

- waits at most ``header_timeout_s`` for the whole request head (408 and close after it),
  and at most ``max_header_bytes`` of it (431);
- parses the head with h11 (400 when it is not HTTP/1.x), drops any ``X-Forwarded-For`` /
  ``Forwarded`` the client sent and adds its own ``X-Forwarded-For`` with the client's
  address, which Serve's uvicorn trusts from loopback only: the ingress's per-client upload
  limit still sees each client, not the guard;
- asks for ``Connection: close``, so each request is one connection and every request's
  head gets its own deadline (a WebSocket upgrade keeps its ``Connection: Upgrade``);
- then copies bytes both ways until the upstream has answered and closed. The body has the
  ingress's own receive deadline (``limits.receive_timeout_s``).

A connection waiting for its head costs one socket and one small task here, no upload or
compute slot. Under ``serve run`` or KubeRay there is no guard: put a proxy with a header
deadline in front (README).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

_DROPPED = (b"x-forwarded-for", b"forwarded", b"connection", b"keep-alive")


@dataclass(frozen=True)
class GuardConfig:
    """The guard's limits."""

    header_timeout_s: float = 10.0
    max_header_bytes: int = 65536


class HeadError(ValueError):
    """The bytes before the blank line are not an HTTP/1.x request head."""


def rewrite_head(head: bytes, client: str) -> bytes:
    """``head`` (a whole request head, up to and with its blank line) for the upstream: the
    client's forwarding headers replaced by ``X-Forwarded-For: client``, ``Connection: close``
    unless the request upgrades (a WebSocket). HeadError when it does not parse."""
    import h11  # here: every fusion-ray command imports this module's CLI, few run the guard

    server = h11.Connection(h11.SERVER, max_incomplete_event_size=len(head) + 1)
    try:
        server.receive_data(head)
        event = server.next_event()
    except h11.RemoteProtocolError as exc:
        raise HeadError(str(exc)) from exc
    if not isinstance(event, h11.Request):
        raise HeadError("no request head")
    connection = b"close"
    headers = []
    for name, value in event.headers:
        if name == b"connection" and b"upgrade" in value.lower():
            connection = value
        if name not in _DROPPED:
            headers.append((name, value))
    headers += [(b"connection", connection), (b"x-forwarded-for", client.encode("ascii"))]
    lines = [b"%s %s HTTP/%s" % (event.method, event.target, event.http_version)]
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _answer(status: int, reason: str) -> bytes:
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").encode("ascii")


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes from ``reader`` to ``writer`` until EOF, then half-close ``writer``."""
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


class HeaderGuard:
    """The guard's TCP server, in front of ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int], cfg: GuardConfig | None = None) -> None:
        self.upstream = upstream
        self.cfg = cfg or GuardConfig()
        self._handlers: set[asyncio.Task[Any]] = set()
        """The connections' tasks: Python 3.11's streams hold them weakly, and a handler whose client
        left while it waits on the upstream is otherwise garbage, destroyed mid-await."""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: its head within the deadline, then both directions copied."""
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if peer else "unknown"
        try:
            head = await self._head(reader, writer, client)
            if head is None:
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            up_writer.write(head)
            to_upstream = asyncio.create_task(_copy(reader, up_writer))
            try:
                await _copy(up_reader, writer)  # the response (or the WebSocket) has ended
            finally:
                to_upstream.cancel()
                up_writer.close()
        except (ConnectionError, OSError) as exc:
            log.debug("guard: connection from %s ended: %s", client, exc)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _head(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str) -> bytes | None:
        """The rewritten head, or None after answering (408, 431, 400) or when the client left."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.cfg.header_timeout_s)
            return rewrite_head(head, client)
        except TimeoutError:
            writer.write(_answer(408, "Request Timeout"))
        except asyncio.LimitOverrunError:
            writer.write(_answer(431, "Request Header Fields Too Large"))
        except HeadError:
            writer.write(_answer(400, "Bad Request"))
        except asyncio.IncompleteReadError:
            return None  # the client left before its head was complete
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()
        return None

    async def serve(self, host: str, port: int, ready: threading.Event | None = None) -> None:
        """Listen on (host, port) until cancelled."""
        server = await asyncio.start_server(self.handle, host, port, limit=self.cfg.max_header_bytes)
        if ready is not None:
            ready.set()
        async with server:
            await server.serve_forever()


def start_guard(guard: HeaderGuard, host: str, port: int, timeout_s: float = 10.0) -> threading.Thread:
    """Run the guard on its own event loop in a daemon thread; returns once it listens (OSError
    when it cannot bind)."""
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(guard.serve(host, port, ready))
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            failure.append(exc)
            ready.set()

    thread = threading.Thread(target=run, name="fusion-ray-header-guard", daemon=True)
    thread.start()
    if not ready.wait(timeout_s) or failure:
        raise OSError(f"cannot listen on {host}:{port}: {failure[0] if failure else 'timed out'}")
    return thread
