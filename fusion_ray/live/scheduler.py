"""Fair sharing of a replica's processing slots across its streams.

Under overload every stream keeps getting frames: when a slot frees, it goes to the waiting
stream that was served least recently (round robin over the streams that wait, first come
first served within one stream), so a stream asking for more slots than the others cannot
starve them.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class FairScheduler:
    """``slots`` processing slots, granted least-recently-served stream first."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("slots must be at least 1")
        self.slots = slots
        self.free = slots
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._served_at: dict[str, int] = {}
        self._ticks = 0
        self.grants: dict[str, int] = {}

    @property
    def busy(self) -> int:
        return self.slots - self.free

    def waiting(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    async def acquire(self, stream_id: str) -> None:
        """Wait for a slot (cancellation-safe: a slot granted to a cancelled waiter is passed on)."""
        if self.free > 0 and not self.waiting():
            self.free -= 1
            self._granted(stream_id)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(stream_id, deque()).append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # granted just before the cancel: hand the slot on
            else:
                self._discard(stream_id, future)
            raise

    def release(self) -> None:
        """Free a slot and grant it to the next stream in turn."""
        self.free += 1
        while self.free > 0:
            stream_id = self._next_stream()
            if stream_id is None:
                return
            future = self._waiting[stream_id].popleft()
            if not self._waiting[stream_id]:
                del self._waiting[stream_id]
            if future.done():
                continue
            self.free -= 1
            self._granted(stream_id)
            future.set_result(None)

    @asynccontextmanager
    async def slot(self, stream_id: str) -> AsyncIterator[None]:
        await self.acquire(stream_id)
        try:
            yield
        finally:
            self.release()

    def forget(self, stream_id: str) -> None:
        """Drop a finished stream's bookkeeping."""
        self._served_at.pop(stream_id, None)
        self.grants.pop(stream_id, None)

    def _granted(self, stream_id: str) -> None:
        self._ticks += 1
        self._served_at[stream_id] = self._ticks
        self.grants[stream_id] = self.grants.get(stream_id, 0) + 1

    def _next_stream(self) -> str | None:
        if not self._waiting:
            return None
        return min(self._waiting, key=lambda sid: self._served_at.get(sid, 0))

    def _discard(self, stream_id: str, future: asyncio.Future[None]) -> None:
        queue = self._waiting.get(stream_id)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del self._waiting[stream_id]
