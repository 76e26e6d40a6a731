"""The Python live client: register a source over HTTP, stream frames, collect results.

``fusion-ray live`` and ``fusion-ray bench live`` use it; it speaks the protocol of
:mod:`fusion_ray.live.protocol` to any ``ws://HOST:PORT/v1/stream`` (the Serve ingress or the
in-process host). Frames are sent at the source's real rate like a camera: nothing waits for
results, so what comes back (and when) is what a live user would see.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from fusion_ray.errors import FusionRayError, InputError
from fusion_ray.live.protocol import DROP_REASONS, pack_frame, parse_event, unpack_frame
from fusion_ray.live.stats import percentile
from fusion_ray.live.transport import TransportClosed

DRAIN_S = 1.0
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class LiveClientError(FusionRayError):
    """The server refused the stream or the source, or could not be reached."""

    def __init__(self, message: str, close_code: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.close_code = close_code
        self.code = code


CLOSED = (ConnectionClosed, TransportClosed)
"""What a connection raises once it is closed (a WebSocket's, or the in-process one's)."""


class Connection(Protocol):
    """What the client loop uses of a connection: a ``websockets`` client connection, or the
    client end of :class:`fusion_ray.live.direct.DirectConnection`."""

    @property
    def close_code(self) -> int | None: ...

    async def send(self, message: str | bytes) -> None: ...

    async def recv(self) -> str | bytes: ...

    def __aiter__(self) -> Any: ...

    async def wait_closed(self) -> None: ...


class FrameSource(Protocol):
    """Encoded frames at a real frame rate (a camera, a video played as one, a clip in memory)."""

    fps: float

    def read(self) -> bytes | None:
        """The next frame as JPEG/PNG/WebP bytes; None at the end."""
        ...


@dataclass
class ClientReport:
    """What one stream saw, on the client's clock."""

    sent: int = 0
    received: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    received_seqs: list[int] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    stats: list[dict[str, Any]] = field(default_factory=list)
    ready: dict[str, Any] = field(default_factory=dict)
    errors: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    close_code: int | None = None

    @property
    def fps(self) -> float:
        return self.received / self.duration_s if self.duration_s > 0 else 0.0

    def latency(self, q: float) -> float | None:
        return percentile(self.latencies_ms, q)

    def levels(self) -> list[tuple[float, int]]:
        """(seconds since start, level) of every stats event."""
        return [(float(s.get("t", 0.0)), int(s.get("level", 0))) for s in self.stats]

    def summary(self) -> dict[str, Any]:
        return {"sent": self.sent, "received": self.received, "duration_s": round(self.duration_s, 3),
                "fps": round(self.fps, 2), "latency_ms": {f"p{q}": _r(self.latency(q)) for q in (50, 95, 99)},
                "dropped": dict(self.dropped), "max_level": max((lv for _, lv in self.levels()), default=0),
                "close_code": self.close_code, "errors": self.errors}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def http_base(ws_url: str) -> str:
    """``ws://host:port/v1/stream`` -> ``http://host:port``."""
    parts = urlsplit(ws_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise InputError(f"--url must be ws://HOST:PORT/v1/stream, got {ws_url!r}")
    return urlunsplit((scheme, parts.netloc, "", "", ""))


def register_source(http_url: str, image: bytes, filename: str = "source.jpg", token: str | None = None,
                    timeout_s: float = 60.0) -> str:
    """POST the photo to ``/v1/sources`` (multipart field ``image``); returns the ``source_id``."""
    boundary = "fusionray" + secrets.token_hex(12)
    safe_name = filename.replace('"', "_").replace("\r", "_").replace("\n", "_")
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"{safe_name}\"\r\n"
            f"Content-Type: application/octet-stream\r\n\r\n").encode() + image + f"\r\n--{boundary}--\r\n".encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(http_url.rstrip("/") + "/v1/sources", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - the user's URL
            data = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise LiveClientError(f"the server refused the source ({exc.code}): {detail}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise LiveClientError(f"cannot reach {http_url}: {exc}") from exc
    return str(data["source_id"])


async def _open(ws: Connection, start: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps(start))
    try:
        first = await ws.recv()
    except CLOSED as exc:
        raise LiveClientError(f"the server closed the stream ({ws.close_code})", ws.close_code) from exc
    event = parse_event(first) if isinstance(first, str) else {}
    if event.get("type") == "ready":
        return event
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(ws.wait_closed(), 5.0)
    raise LiveClientError(f"the server refused the stream: {event.get('code')}: {event.get('message')}",
                          ws.close_code, event.get("code"))


async def _send_loop(ws: Connection, source: FrameSource, report: ClientReport, seconds: float | None,
                     max_frames: int | None, blocking_source: bool) -> None:
    period = 1.0 / source.fps
    start = time.perf_counter()
    index = 0
    while max_frames is None or index < max_frames:
        due = start + index * period
        now = time.perf_counter()
        if seconds is not None and due - start >= seconds:
            return
        if due > now:
            await asyncio.sleep(due - now)
        data = await asyncio.to_thread(source.read) if blocking_source else source.read()
        if data is None:
            return
        await ws.send(pack_frame(index, time.perf_counter() * 1000.0, data))
        report.sent += 1
        index += 1


async def _receive_loop(ws: Connection, report: ClientReport, started: float,
                        on_result: Callable[[int, bytes], None] | None) -> None:
    try:
        async for message in ws:
            if isinstance(message, bytes):
                seq, ts, image = unpack_frame(message)
                report.latencies_ms.append(time.perf_counter() * 1000.0 - ts)
                report.received += 1
                report.received_seqs.append(seq)
                if on_result is not None:
                    on_result(seq, image)
                continue
            event = parse_event(message)
            kind = event["type"]
            if kind == "dropped":
                report.dropped[str(event["reason"])] = report.dropped.get(str(event["reason"]), 0) + 1
            elif kind == "stats":
                report.stats.append({**event, "t": round(time.perf_counter() - started, 3)})
            elif kind == "error":
                report.errors.append(event)
    except CLOSED:
        pass


def _accounted(report: ClientReport) -> bool:
    return report.received + sum(report.dropped.values()) >= report.sent


async def run_stream(url: str, start: dict[str, Any], source: FrameSource, *, seconds: float | None = None,
                     max_frames: int | None = None, on_result: Callable[[int, bytes], None] | None = None,
                     blocking_source: bool = False, drain_s: float = DRAIN_S) -> ClientReport:
    """Stream ``source`` to ``url`` until it ends (or ``seconds``/``max_frames``), then stop."""
    try:
        async with connect(url, max_size=MAX_MESSAGE_BYTES, ping_interval=None, compression=None,
                           open_timeout=30) as ws:
            return await stream_over(ws, start, source, seconds=seconds, max_frames=max_frames,
                                     on_result=on_result, blocking_source=blocking_source, drain_s=drain_s)
    except (TimeoutError, OSError) as exc:
        raise LiveClientError(f"cannot stream to {url}: {type(exc).__name__}: {exc}") from exc


async def stream_over(ws: Connection, start: dict[str, Any], source: FrameSource, *, seconds: float | None = None,
                      max_frames: int | None = None, on_result: Callable[[int, bytes], None] | None = None,
                      blocking_source: bool = False, drain_s: float = DRAIN_S) -> ClientReport:
    """The client loop over an open connection: start, send at the source's rate, collect, stop."""
    report = ClientReport()
    report.ready = await _open(ws, start)
    started = time.perf_counter()
    receiver = asyncio.create_task(_receive_loop(ws, report, started, on_result))
    await _send_loop(ws, source, report, seconds, max_frames, blocking_source)
    sent_for = time.perf_counter() - started
    until = time.perf_counter() + drain_s
    while not _accounted(report) and time.perf_counter() < until and not receiver.done():
        await asyncio.sleep(0.01)
    report.duration_s = sent_for
    with contextlib.suppress(*CLOSED):
        await ws.send(json.dumps({"type": "stop"}))
    await asyncio.wait_for(receiver, 5.0)
    report.close_code = ws.close_code
    return report
