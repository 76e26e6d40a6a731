"""The per-replica entry point of live streams: admit a connection, run its stream, count it.

A host creates one :class:`LiveHub` per replica and, for every accepted WebSocket, awaits
``hub.serve(transport)``; e.g. in a FastAPI ingress::

    @app.websocket("/v1/stream")
    async def stream(websocket: WebSocket) -> None:
        await websocket.accept()
        await hub.serve(StarletteTransport(websocket))

``serve`` reads the start message, refuses (``error`` event, then close 1003/1008/1013) or
runs the stream to its end, and returns a :class:`StreamSummary`. All streams of a hub share
its :class:`FairScheduler`, so the replica's processing slots are shared fairly.

While streams are open the hub asks its backend every ``live.source_check_s`` which of their
sources were deleted, and ends those streams (``source_deleted``, close 1008); a host that
deletes a source itself calls :meth:`LiveHub.revoke_source` at once. :meth:`LiveHub.shut_down`
(or the backend answering that the service drains) ends every stream with ``shutting_down``
and close 1001, and refuses new ones the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from fusion_ray.live.backend import FrameProcessor, StreamBackend, StreamRefused
from fusion_ray.live.config import LEVEL_NAMES, LiveConfig
from fusion_ray.live.protocol import (
    CLOSE_GOING_AWAY,
    CLOSE_POLICY,
    CLOSE_TRY_AGAIN_LATER,
    CLOSE_UNSUPPORTED,
    DROP_REASONS,
    ProtocolError,
    StartMessage,
    error_event,
    parse_start,
    ready_event,
)
from fusion_ray.live.scheduler import FairScheduler
from fusion_ray.live.stream import Stream, StreamSummary
from fusion_ray.live.transport import Transport, TransportClosed

log = logging.getLogger(__name__)

OUTCOMES = ("delivered", *DROP_REASONS)
FRAMES_METRIC = "fusion_ray_live_frames_total"
LATENCY_METRIC = "fusion_ray_live_latency_seconds"


class MetricsSink(Protocol):
    """Where frame outcomes go (``fusion_ray.serve.metrics.MetricsRecorder`` fits)."""

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None: ...

    def observe(self, name: str, value: float, **labels: str) -> None: ...


Opener = Callable[[StartMessage], Awaitable[FrameProcessor]]
"""Opens a stream's processor (a host that resolved the stream's source itself passes its own)."""


@dataclass
class Admitted:
    """A stream admitted by :meth:`LiveHub.admit`, holding its place until it ends."""

    stream_id: str
    start: StartMessage
    processor: FrameProcessor | None
    holder: str
    """Whose stream it is (a digest of its token), for the per-token cap."""
    released: bool = False


def _token_key(token: str | None) -> str:
    return hashlib.sha256((token or "").encode()).hexdigest()[:16]


class LiveHub:
    """Admission, the stream registry and the fair scheduler of one replica."""

    def __init__(self, cfg: LiveConfig, backend: StreamBackend, *, metrics: MetricsSink | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.backend = backend
        self.metrics = metrics
        self.clock = clock
        self.scheduler = FairScheduler(cfg.slots)
        self.streams: dict[str, Stream] = {}
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.refusals: dict[str, int] = {}
        self.closing = False
        self._admitted = 0
        self._per_token: dict[str, int] = {}
        self._watcher: asyncio.Task[None] | None = None

    @property
    def active_streams(self) -> int:
        return self._admitted

    async def serve(self, transport: Transport) -> StreamSummary:
        """Run one accepted connection to its end (never raises for client behaviour)."""
        try:
            first = await asyncio.wait_for(transport.receive(), self.cfg.start_timeout_s)
        except TimeoutError:
            self._count_refusal("start_timeout")
            return await self._refuse(transport, CLOSE_POLICY, "start_timeout", "no start message in time")
        except TransportClosed:
            return _summary("", "disconnected")
        try:
            if not isinstance(first, str | bytes):
                raise ProtocolError("the first message must be the JSON start message")
            start = parse_start(first)
        except ProtocolError as exc:
            self._count_refusal("malformed_start")
            return await self._refuse(transport, CLOSE_UNSUPPORTED, "malformed_start", str(exc))
        try:
            admitted = await self.admit(start)
        except StreamRefused as exc:  # counted by admit
            return await self._refuse(transport, exc.close_code, exc.code, exc.message)
        return await self.run(admitted, transport)

    async def admit(self, start: StartMessage, opener: Opener | None = None) -> Admitted:
        """Check a start (token, deadline, shut-down, the replica's and the token's stream caps) and
        open its processor (``opener``, else the backend's ``open``); the stream's place is held
        until :meth:`run` ends or :meth:`release`. Raises :class:`StreamRefused` (counted in
        ``fusion_ray_live_refused_total``)."""
        try:
            self._check(start)
            holder = _token_key(start.token)
            self._admitted += 1
            self._per_token[holder] = self._per_token.get(holder, 0) + 1
            admitted = Admitted(uuid.uuid4().hex[:12], start, None, holder)
            try:
                admitted.processor = await (opener or self.backend.open)(start)
            except BaseException:
                self.release(admitted)
                raise
        except StreamRefused as exc:
            self._count_refusal(exc.code)
            raise
        return admitted

    def _check(self, start: StartMessage) -> None:
        if not self.backend.authorize(start.token):
            raise StreamRefused(CLOSE_POLICY, "unauthorized", "missing or wrong token")
        deadline = start.deadline_ms if start.deadline_ms is not None else self.cfg.deadline_ms
        if not self.cfg.min_deadline_ms <= deadline <= self.cfg.max_deadline_ms:
            raise StreamRefused(CLOSE_UNSUPPORTED, "malformed_start", f"deadline_ms must be within "
                                f"{self.cfg.min_deadline_ms}..{self.cfg.max_deadline_ms}, got {deadline}")
        if self.closing:
            raise StreamRefused(CLOSE_GOING_AWAY, "shutting_down", "the server is shutting down")
        if self._admitted >= self.cfg.max_streams:
            raise StreamRefused(CLOSE_TRY_AGAIN_LATER, "too_many_streams",
                                f"this replica runs its limit of {self.cfg.max_streams} streams; retry later")
        cap = self.cfg.max_streams_per_token
        if cap is not None and self._per_token.get(_token_key(start.token), 0) >= cap:
            raise StreamRefused(CLOSE_TRY_AGAIN_LATER, "too_many_streams",
                                f"this token runs its limit of {cap} streams on this replica; retry later")

    def release(self, admitted: Admitted) -> None:
        """Give back an admitted stream's place (once; :meth:`run` does it when the stream ends)."""
        if admitted.released:
            return
        admitted.released = True
        self._admitted -= 1
        left = self._per_token.get(admitted.holder, 1) - 1
        if left:
            self._per_token[admitted.holder] = left
        else:
            self._per_token.pop(admitted.holder, None)

    async def run(self, admitted: Admitted, transport: Transport, *, ready: bool = True) -> StreamSummary:
        """Run an admitted stream over ``transport`` to its end (``ready``: send the ``ready`` event
        first; a WebRTC session's answer already said it), then release its place."""
        processor, start, stream_id = admitted.processor, admitted.start, admitted.stream_id
        assert processor is not None
        stream = Stream(stream_id, start, processor, transport, self.cfg, self.scheduler,
                        on_outcome=self._outcome, clock=self.clock)
        self.streams[stream_id] = stream
        self._watch()
        try:
            if ready:
                await transport.send_text(ready_event(
                    stream_id, stream.deadline_ms, list(processor.stand_in_models), level=0,
                    level_name=LEVEL_NAMES[0], max_fps=self.cfg.max_fps, queue_depth=self.cfg.queue_depth,
                    max_frame_bytes=self.cfg.max_frame_bytes, max_frame_pixels=self.cfg.max_frame_pixels,
                    max_message_bytes=self.cfg.max_message_bytes))
            summary = await stream.run()
        except TransportClosed:
            summary = _summary(stream_id, "disconnected")
        finally:
            del self.streams[stream_id]
            self.scheduler.forget(stream_id)
            self.release(admitted)
        log.info("stream %s ended (%s): %d in, %d out, dropped %s", stream_id, summary.reason,
                 summary.frames_in, summary.frames_out, summary.dropped)
        return summary

    def revoke_source(self, source_id: str) -> int:
        """End the streams using ``source_id`` (``source_deleted``, close 1008); how many."""
        using = [s for s in self.streams.values() if s.start.source_id == source_id]
        for stream in using:
            stream.end("source_deleted")
        return len(using)

    def shut_down(self) -> int:
        """End every stream (``shutting_down``, close 1001) and refuse new ones; how many."""
        self.closing = True
        for stream in self.streams.values():
            stream.end("shutting_down")
        return len(self.streams)

    def _watch(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.create_task(self._watch_sources())

    async def _watch_sources(self) -> None:
        """While streams are open: end those whose source was deleted, all when the service drains."""
        while self.streams:  # checks at once: a stream that just opened is known to be open
            ids = {s.start.source_id for s in self.streams.values()}
            try:
                status = await self.backend.source_status(ids)
            except Exception as exc:  # noqa: BLE001 - a failed check is retried; streams go on
                log.warning("checking the streams' sources failed: %s", exc)
            else:
                if status.draining:
                    self.shut_down()
                for source_id in status.deleted:
                    self.revoke_source(source_id)
            await asyncio.sleep(self.cfg.source_check_s)

    def _count_refusal(self, code: str) -> None:
        self.refusals[code] = self.refusals.get(code, 0) + 1
        if self.metrics is not None:
            self.metrics.inc("fusion_ray_live_refused_total", reason=code)

    async def _refuse(self, transport: Transport, close_code: int, code: str, message: str) -> StreamSummary:
        with contextlib.suppress(TransportClosed):
            await transport.send_text(error_event(code, message))
        await transport.close(close_code, code)
        return _summary("", code)

    def _outcome(self, outcome: str, latency_s: float | None) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if self.metrics is not None:
            self.metrics.inc(FRAMES_METRIC, outcome=outcome)
            if latency_s is not None:
                self.metrics.observe(LATENCY_METRIC, latency_s)

    def gauges(self) -> list[tuple[str, str, Mapping[str, str], float]]:
        """(name, help, labels, value) gauges for /metrics: active streams, streams per level."""
        out: list[tuple[str, str, Mapping[str, str], float]] = [
            ("fusion_ray_live_streams", "Live streams on this replica.", {}, float(self._admitted))]
        levels = [0] * len(LEVEL_NAMES)
        for stream in self.streams.values():
            levels[stream.level] += 1
        for level, count in enumerate(levels):
            out.append(("fusion_ray_live_streams_by_level", "Live streams by degradation level.",
                        {"level": str(level), "name": LEVEL_NAMES[level]}, float(count)))
        return out


def _summary(stream_id: str, reason: str) -> StreamSummary:
    return StreamSummary(stream_id, reason, 0, 0, dict.fromkeys(DROP_REASONS, 0))
