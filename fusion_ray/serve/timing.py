"""Per-request stage timing: one ``timed(stage)`` feeds both the Server-Timing header and the metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class StageSink(Protocol):
    def stage(self, stage: str, seconds: float) -> None: ...


class Timings:
    """The stages one request went through, in order; each is also a ``fusion_ray_stage_seconds`` sample.

    A stage may appear more than once (one decode per image); the header lists every entry.
    """

    def __init__(self, metrics: StageSink) -> None:
        self.metrics = metrics
        self.entries: list[tuple[str, float]] = []

    def record(self, stage: str, seconds: float) -> None:
        self.entries.append((stage, seconds))
        self.metrics.stage(stage, seconds)

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Time the block as ``stage`` (also when it raises)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.record(stage, time.perf_counter() - start)

    def server_timing(self) -> str:
        """The Server-Timing header value (durations in milliseconds)."""
        return ", ".join(f"{stage};dur={seconds * 1000:.1f}" for stage, seconds in self.entries)
