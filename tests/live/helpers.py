"""Test doubles for the stream core: an in-memory connection and a scripted frame processor.

The end-to-end tests (test_localhost.py) run the same core over a real WebSocket with the real
detector and classic swapper; these make timing deterministic for the drop and order rules.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import cv2
import numpy as np

from fusion_ray.live.backend import FramePlan, Processed, SourceStatus, StreamRefused, token_matches
from fusion_ray.live.protocol import CLOSE_POLICY, StartMessage, pack_frame
from fusion_ray.live.transport import TransportClosed

START = '{"source_id": "src"}'


def jpeg(width: int = 64, height: int = 48, value: int = 100) -> bytes:
    image = np.full((height, width, 3), value, np.uint8)
    return cv2.imencode(".jpg", image)[1].tobytes()


def frame_message(seq: int, data: bytes | None = None) -> bytes:
    return pack_frame(seq, float(seq), data if data is not None else jpeg())


class MemoryTransport:
    """A connection whose client side is two lists; ``send_delay_s`` makes a slow client."""

    def __init__(self, send_delay_s: float = 0.0) -> None:
        self.inbox: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self.texts: list[dict] = []
        self.results: list[bytes] = []
        self.closed: tuple[int, str] | None = None
        self.send_delay_s = send_delay_s

    async def receive(self) -> str | bytes:
        message = await self.inbox.get()
        if message is None:
            raise TransportClosed("client gone")
        return message

    async def send_text(self, text: str) -> None:
        self.texts.append(json.loads(text))

    async def send_bytes(self, data: bytes) -> None:
        if self.send_delay_s:
            await asyncio.sleep(self.send_delay_s)
        self.results.append(data)

    async def close(self, code: int, reason: str = "") -> None:
        self.closed = (code, reason)

    # client side
    def send(self, message: str | bytes) -> None:
        self.inbox.put_nowait(message)

    def disconnect(self) -> None:
        self.inbox.put_nowait(None)

    def events(self, kind: str) -> list[dict]:
        return [t for t in self.texts if t["type"] == kind]

    def dropped(self, reason: str) -> list[int]:
        return [t["seq"] for t in self.events("dropped") if t["reason"] == reason]

    def result_seqs(self) -> list[int]:
        return [int.from_bytes(r[:4], "big") for r in self.results]


class ScriptedProcessor:
    """Takes ``delay(seq)`` seconds, inverts the frame, reports one face; records every plan.
    ``costly``: whether its configuration has model masks or a pixel boost (level 1 changes it)."""

    def __init__(self, delay: Callable[[int], float] = lambda seq: 0.0, fail: set[int] | None = None,
                 costly: bool = False, failure: Callable[[], Exception] = lambda: RuntimeError("stage failed")) -> None:
        self.delay = delay
        self.fail = fail or set()
        self.failure = failure
        self.costly = costly
        self.plans: list[FramePlan] = []
        self.stand_in_models: list[str] = []

    async def process(self, frame: np.ndarray, plan: FramePlan) -> Processed:
        self.plans.append(plan)
        await asyncio.sleep(self.delay(plan.seq))
        if plan.seq in self.fail:
            raise self.failure()
        return Processed(255 - frame, np.ones((1, 5, 2), np.float32), 1)


class ScriptedBackend:
    def __init__(self, processor: ScriptedProcessor, token: str | None = None, sources: tuple[str, ...] = ("src",)):
        self.processor = processor
        self.token = token
        self.sources = sources
        self.status = SourceStatus()
        self.status_calls = 0

    def authorize(self, token: str | None) -> bool:
        return token_matches(self.token, token)

    async def open(self, start: StartMessage) -> ScriptedProcessor:
        if start.source_id not in self.sources:
            raise StreamRefused(CLOSE_POLICY, "unknown_source", "unknown source")
        return self.processor

    async def source_status(self, source_ids: set[str]) -> SourceStatus:
        self.status_calls += 1
        return SourceStatus(self.status.deleted & frozenset(source_ids), self.status.draining)
