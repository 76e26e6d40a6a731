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

It also admits requests before Serve's own queue can refuse them in plain text:

- at most ``max_requests`` requests are passed upstream at once (the ingress replicas' share of
  Serve's ``max_ongoing_requests``, so Serve never queues them); one more gets a JSON 503
  ``overloaded`` with ``Retry-After``, its body left unread;
- the monitoring paths (``/metrics``, ``/healthz``, ``/readyz``) have ``ops_reserve`` places
  of their own: a burst never refuses them;
- when the service stops (:meth:`HeaderGuard.drain`) new requests get a JSON 503
  ``shutting_down``, :meth:`HeaderGuard.wait_idle` waits for those in flight, and
  :meth:`HeaderGuard.refuse_waiting` answers any still unanswered with the same 503 before the
  application goes.

Every answer the guard gives itself (408, 431, 400, 503) is a JSON body, as the service's.

A connection waiting for its head costs one socket and one small task here, no upload or
compute slot. Under ``serve run`` or KubeRay there is no guard: put a proxy with a header
deadline in front (README).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

_DROPPED = (b"x-forwarded-for", b"forwarded", b"connection", b"keep-alive")
OPS_PATHS = ("/metrics", "/healthz", "/readyz")
"""Monitoring paths (under the application's route prefix): admitted within ``ops_reserve``,
whatever else is in flight."""
DISCARD_S = 1.0
"""After refusing a request, how long its unread body is read and dropped before the connection
closes (closing with unread bytes resets it, and the client may lose the answer)."""


@dataclass(frozen=True)
class GuardConfig:
    """The guard's limits."""

    header_timeout_s: float = 10.0
    max_header_bytes: int = 65536
    max_requests: int = 56
    """Requests passed upstream at once, the monitoring paths aside."""
    ops_reserve: int = 8
    """Monitoring requests passed upstream at once, on top of ``max_requests``."""
    retry_after_s: int = 1
    route_prefix: str = "/"
    write_timeout_s: float = 30.0
    """A client that reads nothing of its answer for this long is disconnected (its place freed)."""

    def is_monitoring(self, path: str) -> bool:
        return path in {self.route_prefix.rstrip("/") + ops for ops in OPS_PATHS}


class RequestHead(NamedTuple):
    """A request head as rewritten for the upstream, and its path (no query)."""

    data: bytes
    path: str


class HeadError(ValueError):
    """The bytes before the blank line are not an HTTP/1.x request head."""


def rewrite_head(head: bytes, client: str) -> RequestHead:
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
    path = event.target.split(b"?", 1)[0].decode("latin-1")
    return RequestHead(b"\r\n".join(lines) + b"\r\n\r\n", path)


def answer(status: int, reason: str, code: str, detail: str, retry_after_s: int | None = None) -> bytes:
    """A whole HTTP/1.1 response with the service's JSON error body, closing the connection."""
    body = json.dumps({"error": code, "detail": detail}).encode()
    retry = f"retry-after: {retry_after_s}\r\n" if retry_after_s is not None else ""
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"{retry}connection: close\r\n\r\n").encode("ascii") + body


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                on_data: Callable[[], None] | None = None, write_timeout_s: float | None = None,
                eof_when_empty: bool = True) -> None:
    """Bytes from ``reader`` to ``writer`` until EOF, then half-close ``writer`` (not when nothing
    was copied and ``eof_when_empty`` is false: the caller answers instead); ``on_data`` is called
    before each chunk is written. A writer that takes no chunk for ``write_timeout_s`` (a client
    that stopped reading) ends the copy."""
    copied = False
    try:
        while data := await reader.read(1 << 16):
            if on_data is not None:
                on_data()
            copied = True
            writer.write(data)
            await asyncio.wait_for(writer.drain(), write_timeout_s)
        if (copied or eof_when_empty) and writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError, TimeoutError):
        pass


class _Forwarded:
    """One request passed upstream: whether its answer has begun, whether the stop refused it,
    and its connection to the upstream (closed by the stop)."""

    def __init__(self) -> None:
        self.answered = False
        self.refused = False
        self.upstream: asyncio.StreamWriter | None = None

    def mark_answered(self) -> None:
        self.answered = True

    def end(self) -> None:
        """The stop: close the upstream connection; an answer not begun becomes the guard's 503."""
        self.refused = not self.answered
        if self.upstream is not None:
            self.upstream.transport.abort()


class HeaderGuard:
    """The guard's TCP server, in front of ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int], cfg: GuardConfig | None = None) -> None:
        self.upstream = upstream
        self.cfg = cfg or GuardConfig()
        self.draining = False
        self.refused = 0
        """Requests the guard answered 503 itself (a count for the stop's note and tests)."""
        self._handlers: set[asyncio.Task[Any]] = set()
        """The connections' tasks: Python 3.11's streams hold them weakly, and a handler whose client
        left while it waits on the upstream is otherwise garbage, destroyed mid-await."""
        self._forwarded: set[_Forwarded] = set()
        self._ops = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------ the stop (from another thread)
    def drain(self) -> None:
        """From now on new requests (the monitoring paths aside) get a JSON 503 ``shutting_down``."""
        self.draining = True

    def in_flight(self) -> int:
        """Requests passed upstream and not yet over, the monitoring paths aside."""
        return len(self._forwarded)

    def wait_idle(self, timeout_s: float, poll_s: float = 0.05) -> bool:
        """Wait until no request is in flight, at most ``timeout_s``; True when none is."""
        end = time.monotonic() + timeout_s
        while self.in_flight() and time.monotonic() < end:
            time.sleep(poll_s)
        return not self.in_flight()

    def refuse_waiting(self, timeout_s: float = 1.0) -> None:
        """Answer every request in flight whose answer has not begun with a JSON 503
        ``shutting_down``, and close those whose answer has (a long stream), before the
        application that would answer them goes."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        done = threading.Event()

        def cancel() -> None:
            for forwarded in list(self._forwarded):
                forwarded.end()  # answered ones are closed: the application is going
            done.set()

        loop.call_soon_threadsafe(cancel)
        done.wait(timeout_s)
        self.wait_idle(timeout_s)

    # ------------------------------------------------------------ connections
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: its head within the deadline, admission, then both directions copied."""
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
            if self.cfg.is_monitoring(head.path):
                await self._ops_request(head, reader, writer)
            else:
                await self._request(head, reader, writer)
        except (ConnectionError, OSError) as exc:
            log.debug("guard: connection from %s ended: %s", client, exc)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _ops_request(self, head: RequestHead, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter) -> None:
        if self._ops >= self.cfg.ops_reserve:
            await self._refuse(reader, writer, "overloaded",
                               f"the service is at its limit of {self.cfg.ops_reserve} monitoring requests at once")
            return
        self._ops += 1
        try:
            await self._forward(head, reader, writer, _Forwarded())
        finally:
            self._ops -= 1

    async def _request(self, head: RequestHead, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> None:
        if self.draining:
            await self._refuse(reader, writer, "shutting_down", "the service is stopping")
            return
        if len(self._forwarded) >= self.cfg.max_requests:
            await self._refuse(reader, writer, "overloaded",
                               f"the service is at its limit of {self.cfg.max_requests} requests at once")
            return
        forwarded = _Forwarded()
        self._forwarded.add(forwarded)
        try:
            await self._forward(head, reader, writer, forwarded)
        finally:
            self._forwarded.discard(forwarded)

    async def _forward(self, head: RequestHead, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       forwarded: _Forwarded) -> None:
        """Pass the request on and copy the answer back; a JSON 503 where none began (the upstream
        cannot be reached, closed without answering, or the stop ended it)."""
        connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        with contextlib.suppress(OSError):  # Serve's proxy is gone (the stop deleted the application) or not up
            connection = await asyncio.open_connection(*self.upstream)
        if connection is not None and forwarded.refused:  # the stop came while connecting
            connection[1].close()
        elif connection is not None:
            up_reader, up_writer = connection
            forwarded.upstream = up_writer
            up_writer.write(head.data)
            to_upstream = asyncio.create_task(_copy(reader, up_writer))
            try:
                await _copy(up_reader, writer, forwarded.mark_answered, self.cfg.write_timeout_s,
                            eof_when_empty=False)  # the response has ended
            finally:
                to_upstream.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await to_upstream  # it no longer reads the client: a refusal may drain its body
                up_writer.close()
        if not forwarded.answered:
            stopping = self.draining or forwarded.refused
            await self._refuse(reader, writer, "shutting_down" if stopping else "unavailable",
                               "the service stopped before answering" if stopping
                               else "the service could not be reached")

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, code: str,
                      detail: str) -> None:
        """A JSON 503 with Retry-After; the body the client sends meanwhile is read and dropped."""
        self.refused += 1
        writer.write(answer(503, "Service Unavailable", code, f"{detail}; retry later", self.cfg.retry_after_s))
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        end = time.monotonic() + DISCARD_S
        with contextlib.suppress(ConnectionError, OSError, TimeoutError):
            while time.monotonic() < end:
                dropped: bytes = await asyncio.wait_for(reader.read(1 << 16), end - time.monotonic())
                if not dropped:
                    break

    async def _head(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    client: str) -> RequestHead | None:
        """The rewritten head, or None after answering (408, 431, 400) or when the client left."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.cfg.header_timeout_s)
            return rewrite_head(head, client)
        except TimeoutError:
            writer.write(answer(408, "Request Timeout", "request_timeout",
                                f"the request's headers did not arrive within {self.cfg.header_timeout_s:g} s"))
        except asyncio.LimitOverrunError:
            writer.write(answer(431, "Request Header Fields Too Large", "headers_too_large",
                                f"the request's headers are over {self.cfg.max_header_bytes} bytes"))
        except HeadError:
            writer.write(answer(400, "Bad Request", "bad_request", "the request is not HTTP/1.x"))
        except asyncio.IncompleteReadError:
            return None  # the client left before its head was complete
        with contextlib.suppress(ConnectionError, OSError):
            await writer.drain()
        return None

    async def serve(self, host: str, port: int, ready: threading.Event | None = None) -> None:
        """Listen on (host, port) until cancelled."""
        self._loop = asyncio.get_running_loop()
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
