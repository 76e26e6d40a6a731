"""A small bounded cache, least recently used dropped first, safe across threads.

What each process keeps made per set of request options (a config, its tools and steps, a swap
backend): the service's deployments read and fill it from ``asyncio.to_thread`` workers and the
event loop at once, so every read and write holds one lock; the value is made outside it (making
can take a while), and when two threads make the same key at once the first one stored is kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LockedLru(Generic[K, V]):
    """``make(key)`` made once per key and kept, at most ``max_size`` keys (the least recently
    used dropped first). Without ``make`` each :meth:`get` names its own maker."""

    def __init__(self, max_size: int, make: Callable[[K], V] | None = None) -> None:
        if max_size < 1:
            raise ValueError(f"max_size: expected at least 1, got {max_size}")
        self.max_size = max_size
        self._make = make
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[K], V] | None = None) -> V:
        """The value of ``key``, made now if it is not kept (by ``make``, else the cache's maker;
        its errors go to the caller)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        maker = make or self._make
        if maker is None:
            raise TypeError("LockedLru.get: no maker for a key not kept")
        value = maker(key)
        with self._lock:
            if key in self._items:  # another thread made it meanwhile: keep the first
                self._items.move_to_end(key)
                return self._items[key]
            self._items[key] = value
            while len(self._items) > self.max_size:
                self._items.popitem(last=False)
        return value

    def keys(self) -> list[K]:
        """The kept keys, least recently used first."""
        with self._lock:
            return list(self._items)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
