"""One live stream's real-time loop: receive, drop, schedule, process, send, report.

Four tasks share a stream's state on one event loop (nothing here blocks it; decoding and
encoding run in threads, processing is the injected :class:`FrameProcessor`):

- *receive*: every binary message is checked cheaply, in order: header (``bad_frame``),
  a sequence number not above the last one received (``stale``; the client's doing, so the
  ladder does not count it), incoming rate (``overload``), bytes and header pixels (``too_large``) and format
  (``bad_frame``), all before decoding; its deadline loses what it lost queueing on the way in
  (:class:`~fusion_ray.live.stats.ArrivalDelay`); then it enters the latest-wins queue, whose
  replaced frame is dropped as ``stale``;
- *dispatch*: when the stream may run another frame and the replica's fair scheduler grants a
  slot, the oldest waiting frame is taken (``deadline`` if it already expired) and processed;
- a processed frame is queued for sending only if it is within its deadline, newer than every
  frame queued before it (``stale``) and the send queue has room (``overload``);
- *send*: writes events and results; a result is checked against its deadline and the last
  sequence number sent once more, right before it goes out, so nothing late or out of order is
  ever sent; a slow client only fills the bounded send queue;
- *tick*: every ``stats_interval_s`` a ``stats`` event, one ladder step, idle and session limits.

A failed or late frame is dropped, never replaced by its input: ``bad_frame`` when the chain
cannot process it (the ladder does not move), ``overload`` when the host refuses it (429, 503).
Over WebRTC frames come and go decoded (:mod:`fusion_ray.live.media`): the same checks, no JPEG.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fusion_ray.core.provenance import Provenance
from fusion_ray.errors import InputError
from fusion_ray.imageheader import ImageTooLargeError, check_image_header
from fusion_ray.imageio import decode_image
from fusion_ray.live.backend import FramePlan, FrameProcessor
from fusion_ray.live.buffers import LatestQueue, Outbox, OutResult, PendingFrame
from fusion_ray.live.config import LEVEL_NAMES, LiveConfig
from fusion_ray.live.ladder import Health, LadderState, degradation, step
from fusion_ray.live.media import RawFrame, RawResult, encode_jpeg
from fusion_ray.live.protocol import (
    CLOSE_NORMAL,
    ENDINGS,
    HEADER_SIZE,
    UNKNOWN_SEQ,
    DropReason,
    StartMessage,
    dropped_event,
    error_event,
    is_stop,
    pack_frame,
    stats_event,
    unpack_frame,
)
from fusion_ray.live.scheduler import FairScheduler
from fusion_ray.live.stats import ArrivalDelay, RateLimiter, StreamCounters
from fusion_ray.live.transport import MediaTransport, Transport, TransportClosed

log = logging.getLogger(__name__)

Outcome = Callable[[str, float | None], None]
"""Called once per frame with its outcome ("delivered" or a drop reason) and latency (s)."""

FLUSH_S = 1.0


class _BadFrame(Exception):
    pass


@dataclass(frozen=True)
class StreamSummary:
    stream_id: str
    reason: str
    frames_in: int
    frames_out: int
    dropped: dict[str, int]


class Stream:
    """The state and tasks of one stream (see the module docstring)."""

    def __init__(self, stream_id: str, start: StartMessage, processor: FrameProcessor, transport: Transport,
                 cfg: LiveConfig, scheduler: FairScheduler, *, on_outcome: Outcome | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.id = stream_id
        self.start = start
        self.processor = processor
        self.transport = transport
        self.cfg = cfg
        self.scheduler = scheduler
        self.on_outcome = on_outcome
        self.clock = clock
        self.deadline_ms = start.deadline_ms if start.deadline_ms is not None else cfg.deadline_ms
        # A stream whose configuration (its options over the host's) has no model mask or pixel
        # boost skips level 1, one without the enhancer level 2 (turning them off would change nothing).
        skip = {lv for lv, used in ((1, processor.costly), (2, start.wants_enhancer)) if not used}
        levels = tuple(lv for lv in cfg.ladder.allowed_levels if lv not in skip)
        self.ladder_cfg = cfg.ladder.model_copy(update={"allowed_levels": levels})
        self.counters = StreamCounters(window=cfg.latency_window)
        self.ladder = LadderState()
        self.queue: LatestQueue[PendingFrame] = LatestQueue(cfg.queue_depth)
        self.outbox = Outbox(cfg.send_queue, cfg.max_events)
        now = clock()
        self.started = self.last_frame_at = now
        self.rate = RateLimiter(cfg.max_fps, cfg.burst_frames, now)
        self.arrival_delay = ArrivalDelay()
        self.last_queued_seq = self.last_sent_seq = self.last_received_seq = -1
        self.last_landmarks: np.ndarray | None = None
        self._landmarks_shape: tuple[int, ...] | None = None
        self._since_detect = 0
        self._inflight = asyncio.Semaphore(cfg.stream_inflight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._last_out = 0
        provenance = Provenance(tuple(processor.stand_in_models))
        self._comment = provenance.comment() if provenance.is_stand_in else None

    @property
    def level(self) -> int:
        return self.ladder.level

    def drop(self, seq: int, reason: DropReason, *, health: bool = True) -> None:
        """Report a dropped frame; ``health=False``: the client's doing, not counted by the ladder."""
        self.counters.drop(reason, health=health)
        self.outbox.put_event(dropped_event(seq, reason))
        if self.on_outcome is not None:
            self.on_outcome(reason, None)

    def _delivered(self, latency_s: float) -> None:
        self.counters.delivered(latency_s * 1000.0)
        if self.on_outcome is not None:
            self.on_outcome("delivered", latency_s)

    # ------------------------------------------------------------ receive
    def on_message(self, message: str | bytes | RawFrame) -> bool:
        """Handle one client message; False when the client asked to stop."""
        if isinstance(message, str):
            return not is_stop(message)
        if isinstance(message, RawFrame):
            self.on_raw_frame(message)
            return True
        now = self.clock()
        self.last_frame_at = now
        if len(message) < HEADER_SIZE:
            self.counters.received()
            self.drop(UNKNOWN_SEQ, "bad_frame")
            return True
        seq, client_ts, data = unpack_frame(message)
        if seq <= self.last_received_seq:  # old or repeated: the client's order, not the server's health
            self.counters.received(health=False)
            self.drop(seq, "stale", health=False)
            return True
        self.last_received_seq = seq
        self.counters.received()
        if not self.rate.allow(now):
            self.drop(seq, "overload")
            return True
        if len(data) > self.cfg.max_frame_bytes:
            self.drop(seq, "too_large")
            return True
        try:
            check_image_header(data, f"frame {seq}", self.cfg.max_frame_pixels)
        except ImageTooLargeError:
            self.drop(seq, "too_large")
            return True
        except InputError:
            self.drop(seq, "bad_frame")
            return True
        # what the frame lost queueing on its way in counts against its deadline
        deadline = now + self.deadline_ms / 1000.0 - self.arrival_delay.excess_s(now, client_ts)
        if deadline <= now:
            self.drop(seq, "deadline")
            return True
        item = PendingFrame(seq, client_ts, data, now, deadline)
        for replaced in self.queue.put(item):
            self.drop(replaced.seq, "stale")
        return True

    def on_raw_frame(self, raw: RawFrame) -> None:
        """A media track's decoded frame: numbered in arrival order, rate and pixel checks, queued."""
        now = self.clock()
        self.last_frame_at = now
        seq = self.last_received_seq = self.last_received_seq + 1
        self.counters.received()
        if not self.rate.allow(now):
            self.drop(seq, "overload")
        elif raw.height * raw.width > self.cfg.max_frame_pixels:
            self.drop(seq, "too_large")
        else:
            for replaced in self.queue.put(PendingFrame(seq, raw.client_ts_ms, raw, now,
                                                        now + self.deadline_ms / 1000.0)):
                self.drop(replaced.seq, "stale")

    async def _receive_loop(self) -> str:
        try:
            while self.on_message(await self.transport.receive()):
                pass
        except TransportClosed:
            return "disconnected"
        return "client_stop"

    # ------------------------------------------------------------ dispatch
    def plan(self, seq: int) -> tuple[FramePlan, int]:
        """The frame plan and JPEG quality of the next frame at the current level."""
        deg = degradation(self.level, self.ladder_cfg)
        landmarks = None
        reusable = self.last_landmarks is not None and len(self.last_landmarks) > 0
        if deg.detect_every > 1 and reusable and self._since_detect < deg.detect_every - 1:
            landmarks = self.last_landmarks
            self._since_detect += 1
        else:
            self._since_detect = 0
        quality = min(self.start.quality, deg.quality_cap or 100)
        plan = FramePlan(seq, self.level, self.start.wants_enhancer and deg.enhance, landmarks, deg.detector_size,
                         deg.costly)
        return plan, quality

    async def _dispatch_loop(self) -> None:
        while True:
            await self.queue.wait()
            await self._inflight.acquire()
            try:
                await self.scheduler.acquire(self.id)
            except BaseException:
                self._inflight.release()
                raise
            item = self.queue.pop()
            if item is None or self.clock() >= item.deadline:
                self._release(None)
                if item is not None:
                    self.drop(item.seq, "deadline")
                continue
            plan, quality = self.plan(item.seq)
            task = asyncio.create_task(self._process(item, plan, quality))
            self._tasks.add(task)
            task.add_done_callback(self._release)

    def _release(self, task: asyncio.Task[None] | None) -> None:
        self._tasks.discard(task)  # type: ignore[arg-type]
        self.scheduler.release()
        self._inflight.release()

    # ------------------------------------------------------------ process
    async def _process(self, item: PendingFrame, plan: FramePlan, quality: int) -> None:
        timeout = max(0.0, item.deadline - self.clock()) + self.cfg.work_timeout_s
        try:
            message = await asyncio.wait_for(self._work(item, plan, quality), timeout)
        except TimeoutError:
            self.drop(item.seq, "deadline")
            return
        except _BadFrame:
            self.drop(item.seq, "bad_frame")
            return
        except Exception as exc:  # never send a frame unprocessed
            if getattr(exc, "status", None) in (429, 503):  # the host refused it: the server's load
                self.drop(item.seq, "overload")
                return
            # the chain could not process this frame: the frame's doing, not the server's health
            log.warning("stream %s: frame %d could not be processed: %s", self.id, item.seq, exc)
            self.drop(item.seq, "bad_frame", health=False)
            return
        if self.clock() > item.deadline:
            self.drop(item.seq, "deadline")
        elif item.seq <= self.last_queued_seq:
            self.drop(item.seq, "stale")
        elif not self.outbox.put_result(OutResult(item.seq, message, item.arrived, item.deadline)):
            self.drop(item.seq, "overload")
        else:
            self.last_queued_seq = item.seq

    async def _work(self, item: PendingFrame, plan: FramePlan, quality: int) -> bytes | RawResult:
        if isinstance(item.data, RawFrame):
            frame = await asyncio.to_thread(item.data.pixels)
        else:
            try:
                loaded = await asyncio.to_thread(decode_image, item.data, f"frame {item.seq}", self.cfg.max_frame_pixels)
            except InputError as exc:
                raise _BadFrame(str(exc)) from exc
            frame = loaded.frame
        if plan.landmarks is not None and frame.shape != self._landmarks_shape:
            plan = replace(plan, landmarks=None)
        processed = await self.processor.process(frame, plan)
        if plan.landmarks is None:
            self.last_landmarks = processed.landmarks
            self._landmarks_shape = frame.shape
        if isinstance(item.data, RawFrame):  # the media track's encoder encodes it
            return RawResult(item.seq, processed.frame, item.data.pts, item.data.time_base, item.deadline)
        jpeg = await asyncio.to_thread(encode_jpeg, processed.frame, quality, self._comment)
        return pack_frame(item.seq, item.client_ts_ms, jpeg)

    # ------------------------------------------------------------ send
    async def _send_loop(self) -> str:
        try:
            while True:
                item = await self.outbox.get()
                if isinstance(item, str):
                    await self.transport.send_text(item)
                    continue
                now = self.clock()
                if now > item.deadline:
                    self.drop(item.seq, "deadline")
                elif item.seq <= self.last_sent_seq:
                    self.drop(item.seq, "stale")
                elif isinstance(item.message, RawResult):
                    self.last_sent_seq = item.seq
                    media: MediaTransport = self.transport  # type: ignore[assignment]
                    if await media.send_frame(item.message):  # the encoder took it within the deadline
                        self._delivered(self.clock() - item.arrived)
                    else:
                        self.drop(item.seq, "deadline")
                else:
                    self.last_sent_seq = item.seq
                    await self.transport.send_bytes(item.message)
                    self._delivered(now - item.arrived)
        except TransportClosed:
            return "disconnected"

    # ------------------------------------------------------------ tick
    def stats_text(self, interval_s: float) -> str:
        p50, p99 = (None if v is None else round(v, 1) for v in self.counters.p50_p99())
        fps = (self.counters.frames_out - self._last_out) / interval_s
        self._last_out = self.counters.frames_out
        return stats_event(self.counters.frames_in, self.counters.frames_out, self.counters.dropped,
                           p50, p99, self.level, LEVEL_NAMES[self.level],
                           fps_out=round(fps, 2), events_lost=self.outbox.events_lost)

    def tick(self, interval_s: float) -> str | None:
        """One ladder step and a stats event; the reason to end the stream, if any."""
        frames_in, drops, p99 = self.counters.take_window()
        before = self.level
        self.ladder = step(self.ladder, Health(interval_s, frames_in, drops, p99), self.deadline_ms,
                           self.ladder_cfg)
        if self.level != before:
            log.info("stream %s: degradation level %d -> %d", self.id, before, self.level)
        self.outbox.put_event(self.stats_text(interval_s))
        now = self.clock()
        if now - self.last_frame_at > self.cfg.idle_timeout_s:
            return "idle_timeout"
        if now - self.started > self.cfg.max_session_s:
            return "session_limit"
        return None

    async def _tick_loop(self) -> str:
        interval = self.cfg.stats_interval_s
        while True:
            await asyncio.sleep(interval)
            reason = self.tick(interval)
            if reason is not None:
                return reason

    # ------------------------------------------------------------ run
    def end(self, reason: str) -> None:
        """End the stream from outside (a reason of :data:`ENDINGS`: a deleted source, shutdown)."""
        if reason not in ENDINGS:
            raise ValueError(f"unknown ending {reason!r}")
        if not self._ended.done():
            self._ended.set_result(reason)

    async def run(self) -> StreamSummary:
        """Run until the client leaves or stops, a limit ends the stream or :meth:`end` is called;
        frees everything."""
        sender = asyncio.create_task(self._send_loop())
        ending = [asyncio.create_task(self._receive_loop()), sender, asyncio.create_task(self._tick_loop()),
                  self._ended]
        dispatcher = asyncio.create_task(self._dispatch_loop())
        try:
            done, _ = await asyncio.wait(ending, return_when=asyncio.FIRST_COMPLETED)
            reason = next(iter(done)).result()
            await _cancel([dispatcher, *self._tasks])
            self.queue.clear()
            if reason != "disconnected":
                code = CLOSE_NORMAL
                if reason in ENDINGS:
                    code, message = ENDINGS[reason]
                    self.outbox.put_event(error_event(reason, message))
                await self._flush(sender)
                await self.transport.close(code, reason)
        finally:
            await _cancel([dispatcher, *self._tasks, *ending])
        return StreamSummary(self.id, reason, self.counters.frames_in, self.counters.frames_out,
                             dict(self.counters.dropped))

    async def _flush(self, sender: asyncio.Task[str]) -> None:
        deadline = self.clock() + FLUSH_S
        while len(self.outbox) and not sender.done() and self.clock() < deadline:
            await asyncio.sleep(0.01)


async def _cancel(tasks: Sequence[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
