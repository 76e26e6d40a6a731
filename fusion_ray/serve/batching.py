"""Adaptive batch wait: skip ``@serve.batch``'s wait window when nobody else is coming.

``@serve.batch`` holds a partial batch for up to ``batch_wait_timeout_s`` hoping for more
requests. Under load that fills batches; at low load it is pure added latency (a single
client pays the whole window on every request). :class:`AdaptiveWait` keeps a moving average
of the gap between arrivals at the replica and answers the window to use for the batch the
next request starts: the configured window while requests arrive closer together than the
window (more are expected within it), zero when they arrive further apart. It starts by
assuming load (the configured window). Plain Python, no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AdaptiveWait:
    """Wait window for the next batch from the recent arrival rate."""

    window_s: float
    enabled: bool = True
    smoothing: float = 0.3
    mean_gap_s: float = 0.0
    last_arrival: float | None = None

    def arrival(self, now: float) -> float:
        """Record an arrival at monotonic time ``now``; the wait window to use from here."""
        if self.last_arrival is not None:
            gap = max(now - self.last_arrival, 0.0)
            self.mean_gap_s = self.smoothing * gap + (1.0 - self.smoothing) * self.mean_gap_s
        self.last_arrival = now
        if not self.enabled or self.mean_gap_s <= self.window_s:
            return self.window_s
        return 0.0
