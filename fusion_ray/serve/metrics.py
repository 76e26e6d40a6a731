"""Histograms and counters for the service, rendered in the Prometheus text format (0.0.4).

Each ingress replica records into a local :class:`MetricsRecorder` (per-stage latency as
the request saw it, request counts, rejections, and the batch records that the batched
deployments return with their results) and merges snapshots into the single
:class:`MetricsStore` held by the state deployment, which renders ``/metrics``. Histograms
are additive, so snapshots from any number of replicas merge exactly.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128)

Labels = tuple[tuple[str, str], ...]

HELP = {
    "fusion_ray_live_frames_total": ("counter", "Live-stream frames by outcome (delivered or the drop reason)."),
    "fusion_ray_live_latency_seconds": ("histogram", "Server-side latency of delivered live-stream frames."),
    "fusion_ray_stage_seconds": ("histogram", "Per-stage latency as one request saw it (queueing and batch "
                                 "wait included for remote stages)."),
    "fusion_ray_request_seconds": ("histogram", "End-to-end latency of requests inside the ingress."),
    "fusion_ray_batch_size": ("histogram", "Requests per batch call of a batched deployment."),
    "fusion_ray_batch_faces": ("histogram", "Faces (crops) per batch call of a batched deployment."),
    "fusion_ray_batch_compute_seconds": ("histogram", "Model time of one batch call (the stage's busy time)."),
    "fusion_ray_step_seconds": ("histogram", "Busy time of one step of the chain (detect, track, select, "
                                "landmark, align, masks, swap, paste, enhance...) over one call of the fused "
                                "deployment or of a part of the split placement, where it ran."),
    "fusion_ray_requests_total": ("counter", "Requests answered, by endpoint and HTTP status."),
    "fusion_ray_rejected_total": ("counter", "Requests refused before any work, by reason."),
}


def step_seconds(timings_ms: Mapping[str, float]) -> dict[str, float]:
    """The chain's per-step busy times (``run_steps``' milliseconds) in seconds, as a deployment's
    answer carries them to the ingress for ``fusion_ray_step_seconds``."""
    return {step: ms / 1000.0 for step, ms in timings_ms.items()}


def labels_of(labels: Mapping[str, str]) -> Labels:
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


@dataclass
class Histogram:
    """Cumulative-bucket histogram state (bucket counts are per bucket, cumulated on render)."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0
    maximum: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.total += value
        self.count += 1
        self.maximum = max(self.maximum, value)

    def merge(self, other: Histogram) -> None:
        if other.buckets != self.buckets:
            raise ValueError("cannot merge histograms with different buckets")
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        self.count += other.count
        self.maximum = max(self.maximum, other.maximum)


@dataclass
class Snapshot:
    """Plain, picklable metric state (what a replica sends to the store)."""

    histograms: dict[tuple[str, Labels], Histogram] = field(default_factory=dict)
    counters: dict[tuple[str, Labels], float] = field(default_factory=dict)

    def empty(self) -> bool:
        return not self.histograms and not self.counters


class MetricsRecorder:
    """Local metrics of one replica; ``take()`` hands them over and starts afresh."""

    def __init__(self) -> None:
        self._snap = Snapshot()

    def observe(self, name: str, value: float, buckets: tuple[float, ...] = LATENCY_BUCKETS_S,
                **labels: str) -> None:
        key = (name, labels_of(labels))
        hist = self._snap.histograms.get(key)
        if hist is None:
            hist = self._snap.histograms[key] = Histogram(buckets)
        hist.observe(value)

    def stage(self, stage: str, seconds: float) -> None:
        self.observe("fusion_ray_stage_seconds", seconds, stage=stage)

    def batch(self, deployment: str, requests: int, faces: int, compute_s: float) -> None:
        self.observe("fusion_ray_batch_size", requests, BATCH_BUCKETS, deployment=deployment)
        self.observe("fusion_ray_batch_faces", faces, BATCH_BUCKETS, deployment=deployment)
        self.observe("fusion_ray_batch_compute_seconds", compute_s, deployment=deployment)

    def step(self, step: str, seconds: float) -> None:
        """One chain step's busy time over one batch (``fusion_ray_step_seconds{step=...}``)."""
        self.observe("fusion_ray_step_seconds", seconds, step=step)

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        key = (name, labels_of(labels))
        self._snap.counters[key] = self._snap.counters.get(key, 0.0) + amount

    def take(self) -> Snapshot:
        snap, self._snap = self._snap, Snapshot()
        return snap


class MetricsBuffer(MetricsRecorder):
    """A replica's recorder that hands its snapshot to ``sink`` at most every ``interval_s``.

    ``maybe_flush()`` (after each request) starts a background flush when the interval has
    passed and none is running; ``flush()`` sends now. A failing sink is logged, never raised:
    metrics must not fail a request.
    """

    def __init__(self, sink: Callable[[Snapshot], Awaitable[object]], interval_s: float = 0.5) -> None:
        super().__init__()
        self.sink = sink
        self.interval_s = interval_s
        self._last = time.monotonic()
        self._running: asyncio.Task[None] | None = None
        self._handing = asyncio.Lock()
        """One hand-over at a time: a flush returns only once every count taken before it (by a
        background flush too) has reached the sink, so /metrics never renders without them."""

    async def flush(self) -> None:
        async with self._handing:
            self._last = time.monotonic()
            snap = self.take()
            if snap.empty():
                return
            try:
                await self.sink(snap)
            except Exception:
                log.exception("could not hand the metrics over")

    def maybe_flush(self) -> None:
        if time.monotonic() - self._last < self.interval_s:
            return
        if self._running is None or self._running.done():
            self._last = time.monotonic()
            self._running = asyncio.ensure_future(self.flush())


class FlushingSink:
    """The metrics sink of live streams (a hub's): frames count like requests, and flush the same way."""

    def __init__(self, metrics: MetricsBuffer) -> None:
        self.metrics = metrics

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        self.metrics.inc(name, amount, **labels)
        self.metrics.maybe_flush()

    def observe(self, name: str, value: float, **labels: str) -> None:
        self.metrics.observe(name, value, LATENCY_BUCKETS_S, **labels)


def record_batch(metrics: MetricsRecorder, deployment: str, result: Mapping[str, Any]) -> None:
    """A batched deployment's batch record and per-step busy times (what its results carry)."""
    record = result.get("batch")
    if record:
        metrics.batch(deployment, int(record["requests"]), int(record["faces"]), float(record["compute_s"]))
    for step, seconds in result.get("steps", {}).items():  # the chain's steps it ran
        metrics.step(step, float(seconds))


class MetricsStore:
    """Merged metrics of every replica; renders the Prometheus exposition."""

    def __init__(self) -> None:
        self.snap = Snapshot()

    def merge(self, snap: Snapshot) -> None:
        for key, hist in snap.histograms.items():
            mine = self.snap.histograms.get(key)
            if mine is None:
                self.snap.histograms[key] = Histogram(hist.buckets, list(hist.counts), hist.total, hist.count,
                                                      hist.maximum)
            else:
                mine.merge(hist)
        for key, value in snap.counters.items():
            self.snap.counters[key] = self.snap.counters.get(key, 0.0) + value

    def render(self, gauges: Iterable[tuple[str, str, Mapping[str, str], float]] = ()) -> str:
        """The text exposition; ``gauges`` are (name, help, labels, value) added as they are."""
        lines: list[str] = []
        by_name: dict[str, list[tuple[Labels, object]]] = {}
        for (name, labels), hist in self.snap.histograms.items():
            by_name.setdefault(name, []).append((labels, hist))
        for (name, labels), value in self.snap.counters.items():
            by_name.setdefault(name, []).append((labels, value))
        for name in sorted(by_name):
            kind, text = HELP.get(name, ("untyped", name))
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, item in sorted(by_name[name], key=lambda x: x[0]):
                if isinstance(item, Histogram):
                    lines.extend(_render_histogram(name, labels, item))
                else:
                    lines.append(f"{name}{_fmt_labels(labels)} {_fmt(float(item))}")  # type: ignore[arg-type]
        seen: set[str] = set()
        for name, text, gauge_labels, value in gauges:
            if name not in seen:
                lines.append(f"# HELP {name} {text}")
                lines.append(f"# TYPE {name} gauge")
                seen.add(name)
            lines.append(f"{name}{_fmt_labels(labels_of(gauge_labels))} {_fmt(value)}")
        return "\n".join(lines) + "\n"


def _render_histogram(name: str, labels: Labels, hist: Histogram) -> list[str]:
    out = []
    cumulative = 0
    for bound, count in zip(hist.buckets, hist.counts, strict=False):
        cumulative += count
        out.append(f"{name}_bucket{_fmt_labels(labels + (('le', _fmt(bound)),))} {cumulative}")
    out.append(f"{name}_bucket{_fmt_labels(labels + (('le', '+Inf'),))} {hist.count}")
    out.append(f"{name}_sum{_fmt_labels(labels)} {_fmt(hist.total)}")
    out.append(f"{name}_count{_fmt_labels(labels)} {hist.count}")
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def parse_exposition(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """A small parser of the text format (samples by metric name) for tests and the load tool."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        labels: dict[str, str] = {}
        if rest:
            for item in rest.rstrip("}").split(","):
                if item:
                    key, _, val = item.partition("=")
                    labels[key] = val.strip('"')
        out.setdefault(name, []).append((labels, float(value)))
    return out


def histogram_max_bucket(samples: dict[str, list[tuple[dict[str, str], float]]], name: str,
                         **labels: str) -> float:
    """The smallest bucket bound that holds every observation of ``name`` with ``labels`` (0 if none)."""
    rows = [(lab, v) for lab, v in samples.get(f"{name}_bucket", [])
            if all(lab.get(k) == val for k, val in labels.items())]
    total = max((v for lab, v in rows if lab.get("le") == "+Inf"), default=0.0)
    if total == 0:
        return 0.0
    bounds = sorted((float(lab["le"]), v) for lab, v in rows if lab.get("le") != "+Inf")
    for bound, cumulative in bounds:
        if cumulative >= total:
            return bound
    return math.inf
