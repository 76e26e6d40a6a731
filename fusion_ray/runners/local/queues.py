"""Bounded queues between threads that stop when asked, dynamic batching, and busy/idle clocks."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

END = object()
"""The marker that ends a thread's input (one per consumer)."""
POLL_S = 0.1


class Stopped(Exception):
    """The run is stopping (a failure elsewhere, Ctrl-C, SIGTERM): the thread ends."""


def put(q: queue.Queue[Any], item: Any, stop: threading.Event) -> float:
    """Put ``item`` (waiting while ``q`` is full); returns the seconds waited."""
    start = time.perf_counter()
    while True:
        if stop.is_set():
            raise Stopped
        try:
            q.put(item, timeout=POLL_S)
            return time.perf_counter() - start
        except queue.Full:
            continue


def get(q: queue.Queue[Any], stop: threading.Event) -> tuple[Any, float]:
    """The next item (waiting while ``q`` is empty) and the seconds waited."""
    start = time.perf_counter()
    while True:
        if stop.is_set():
            raise Stopped
        try:
            return q.get(timeout=POLL_S), time.perf_counter() - start
        except queue.Empty:
            continue


def take_batch(q: queue.Queue[Any], max_batch: int, wait_s: float, stop: threading.Event
               ) -> tuple[list[Any], bool, float]:
    """Dynamic batching: wait for one item, then take more until ``max_batch`` or ``wait_s`` after
    the first. Returns (items, whether the input ended, seconds waited for the first)."""
    first, idle = get(q, stop)
    if first is END:
        return [], True, idle
    items = [first]
    deadline = time.perf_counter() + wait_s
    while len(items) < max_batch:
        left = deadline - time.perf_counter()
        try:
            item = q.get(timeout=left) if left > 0 else q.get_nowait()
        except queue.Empty:
            break
        if item is END:
            return items, True, idle
        items.append(item)
    return items, False, idle


@dataclass
class Clock:
    """Busy and idle seconds of one kind of work (threads add to it under its lock)."""

    busy_s: float = 0.0
    idle_s: float = 0.0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, busy_s: float = 0.0, idle_s: float = 0.0) -> None:
        with self._lock:
            self.busy_s += busy_s
            self.idle_s += idle_s
