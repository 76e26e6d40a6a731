"""Per-stream counters, recent-latency percentiles and the incoming frame-rate limiter."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from fusion_ray.live.protocol import DROP_REASONS, DropReason

LADDER_REASONS: tuple[DropReason, ...] = ("stale", "deadline", "overload")
"""Drops that mean the stream is not keeping up (bad or oversized frames are the client's)."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0-100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


@dataclass
class StreamCounters:
    """Totals since a stream started, and the window since the last :meth:`take_window`."""

    window: int = 256
    frames_in: int = 0
    frames_out: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    latencies_ms: deque[float] = field(init=False)
    _window_in: int = 0
    _window_drops: int = 0
    _window_latencies: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.latencies_ms = deque(maxlen=self.window)

    def received(self, *, health: bool = True) -> None:
        """One frame in; ``health=False``: left out of the ladder's window (the client's doing)."""
        self.frames_in += 1
        if health:
            self._window_in += 1

    def drop(self, reason: DropReason, *, health: bool = True) -> None:
        self.dropped[reason] += 1
        if health and reason in LADDER_REASONS:
            self._window_drops += 1

    def delivered(self, latency_ms: float) -> None:
        self.frames_out += 1
        self.latencies_ms.append(latency_ms)
        if len(self._window_latencies) < self.window:
            self._window_latencies.append(latency_ms)

    def p50_p99(self) -> tuple[float | None, float | None]:
        recent = list(self.latencies_ms)
        return percentile(recent, 50), percentile(recent, 99)

    def take_window(self) -> tuple[int, int, float | None]:
        """(frames in, ladder drops, p99 ms) since the last call; starts a new window."""
        out = (self._window_in, self._window_drops, percentile(self._window_latencies, 99))
        self._window_in = self._window_drops = 0
        self._window_latencies = []
        return out


class RateLimiter:
    """A token bucket: ``rate`` frames per second on average, ``burst`` at once."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.last = now

    def allow(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class ArrivalDelay:
    """How much later than the stream's quickest frame a frame arrived, from the client's own
    timestamps: ``arrival - client_ts`` less its minimum over the last ``window_s`` (the client's
    clock is never compared with ours, only its differences are used). A frame that queued on the
    way in (a busy proxy, a congested link) has that much less of its deadline left, so a frame
    is never sent later than ``deadline_ms`` after the client stamped it, plus the quickest
    transit each way.

    Corrections start once the stream is ``settle_s`` old, and only for a client whose timestamps
    keep pace with our clock (none, constant, another unit: none): its elapsed time since its
    first frame must be within 0.5x to 2x of ours.
    """

    def __init__(self, window_s: float = 10.0, settle_s: float = 1.0) -> None:
        self.window_s = window_s
        self.settle_s = settle_s
        self._first: tuple[float, float] | None = None
        self._minima: deque[tuple[float, float]] = deque()  # (arrival, sample), samples increasing

    def excess_s(self, arrival: float, client_ts_ms: float) -> float:
        client_s = client_ts_ms / 1000.0
        if not math.isfinite(client_s) or client_s <= 0.0:
            return 0.0
        if self._first is None:
            self._first = (arrival, client_s)
        ours, theirs = arrival - self._first[0], client_s - self._first[1]
        sample = arrival - client_s
        while self._minima and self._minima[-1][1] >= sample:
            self._minima.pop()
        self._minima.append((arrival, sample))
        while self._minima[0][0] < arrival - self.window_s:
            self._minima.popleft()
        if ours < self.settle_s or not 0.5 * ours <= theirs <= 2.0 * ours:
            return 0.0
        return max(0.0, sample - self._minima[0][1])
