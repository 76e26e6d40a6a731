"""The two bounded buffers of a stream: waiting frames (latest wins) and the send queue."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from fusion_ray.live.media import RawFrame, RawResult

T = TypeVar("T")


@dataclass(frozen=True)
class PendingFrame:
    """A frame as received: an encoded image not decoded yet, or a media track's decoded frame
    (times on the server's monotonic clock, seconds)."""

    seq: int
    client_ts_ms: float
    data: bytes | RawFrame
    arrived: float
    deadline: float


@dataclass(frozen=True)
class OutResult:
    """A processed frame waiting to be sent: a result message, or a frame for a media track."""

    seq: int
    message: bytes | RawResult
    arrived: float
    deadline: float


class LatestQueue(Generic[T]):
    """At most ``depth`` waiting items; a new item replaces the oldest when full (latest wins)."""

    def __init__(self, depth: int) -> None:
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self.depth = depth
        self._items: deque[T] = deque()
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> list[T]:
        """Add ``item``; returns the items it replaced (oldest first)."""
        replaced = []
        while len(self._items) >= self.depth:
            replaced.append(self._items.popleft())
        self._items.append(item)
        self._ready.set()
        return replaced

    def pop(self) -> T | None:
        """The oldest waiting item, or None."""
        if not self._items:
            return None
        item = self._items.popleft()
        if not self._items:
            self._ready.clear()
        return item

    async def wait(self) -> None:
        """Until an item is waiting."""
        while not self._items:
            self._ready.clear()
            await self._ready.wait()

    def clear(self) -> list[T]:
        items = list(self._items)
        self._items.clear()
        self._ready.clear()
        return items


class Outbox:
    """What waits for the socket: text events (oldest lost beyond ``max_events``) before results
    (a result beyond ``max_results`` is refused, so the caller drops it: never buffer unboundedly)."""

    def __init__(self, max_results: int, max_events: int) -> None:
        self._results: deque[OutResult] = deque()
        self._events: deque[str] = deque()
        self.max_results = max_results
        self.max_events = max_events
        self.events_lost = 0
        self._ready = asyncio.Event()

    def put_event(self, text: str) -> None:
        if len(self._events) >= self.max_events:
            self._events.popleft()
            self.events_lost += 1
        self._events.append(text)
        self._ready.set()

    def put_result(self, result: OutResult) -> bool:
        if len(self._results) >= self.max_results:
            return False
        self._results.append(result)
        self._ready.set()
        return True

    def __len__(self) -> int:
        return len(self._events) + len(self._results)

    async def get(self) -> str | OutResult:
        """The next message: an event if any is waiting, else the oldest result."""
        while not (self._events or self._results):
            self._ready.clear()
            await self._ready.wait()
        item: str | OutResult = self._events.popleft() if self._events else self._results.popleft()
        return item
