"""A bounded loopback load test of the HTTP API (``fusion-ray bench serve``).

It measures the engine in-process on the same image first (the reference), then deploys the
service on a local Ray once per swap batch size (1 = batching off) and, at each concurrency
level, sends a fixed number of ``POST /v1/swap`` requests from an asyncio client (stopping
early at a time limit). It reports p50/p99 latency of the successful requests, requests per
second, 503/429 answers (deliberate overload) apart from failures, and the largest swapper
batch seen (from ``/metrics``). Loopback only; nothing here prints (the CLI does).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.errors import ConfigError, InputError
from fusion_ray.serve.auth import is_loopback
from fusion_ray.serve.metrics import parse_exposition
from fusion_ray.serve.settings import parse_settings

APP_NAME = "fusion_ray_load"


@dataclass(frozen=True)
class LoadPlan:
    target: Path
    source: Path
    requests: int = 64
    concurrency: list[int] = field(default_factory=lambda: [1, 8, 32])
    batch_sizes: list[int] = field(default_factory=lambda: [8, 1])
    time_limit_s: float = 60.0
    output_format: str = "png"
    host: str = "127.0.0.1"
    port: int = 8137
    honour_retry_after: bool = True
    warmup: int = 4
    engine_runs: int = 12

    def check(self) -> None:
        if self.requests < 1 or self.requests > 10_000:
            raise ConfigError("requests: expected 1 to 10000 per level")
        if not self.concurrency or min(self.concurrency) < 1 or max(self.concurrency) > 256:
            raise ConfigError("concurrency: expected levels between 1 and 256")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ConfigError("batch sizes: expected positive integers")
        if not 0 < self.time_limit_s <= 3600:
            raise ConfigError("time limit: expected 0 < seconds <= 3600")
        if not is_loopback(self.host):
            raise ConfigError(f"the load test only targets loopback addresses, not {self.host!r}")
        for path in (self.target, self.source):
            if not Path(path).is_file():
                raise InputError(f"file not found: {path}")


@dataclass
class LevelResult:
    batch_size: int
    concurrency: int
    sent: int
    ok: int
    rejected: int
    failed: int
    p50_ms: float
    p99_ms: float
    requests_per_s: float
    wall_s: float
    max_swap_batch: float
    time_limited: bool
    failures: list[str] = field(default_factory=list)
    stage_ms: dict[str, float] = field(default_factory=dict)
    """Mean per-stage latency inside the service over the level (from /metrics)."""


@dataclass
class LoadReport:
    engine_process_ms: float
    engine_end_to_end_ms: float
    output_format: str
    target_shape: tuple[int, ...]
    cpu_count: int
    rows: list[LevelResult] = field(default_factory=list)
    stand_in_models: list[str] = field(default_factory=list)

    def table(self) -> str:
        lines = [
            f"target {self.target_shape[1]}x{self.target_shape[0]}, output {self.output_format}, {self.cpu_count} CPU(s)",
            f"engine in-process (same image): process_frame p50 {self.engine_process_ms:.1f} ms; "
            f"decode + process_frame + encode p50 {self.engine_end_to_end_ms:.1f} ms",
            f"target at concurrency 1: p50 <= 1.5 x {self.engine_process_ms:.1f} + 20 = "
            f"{1.5 * self.engine_process_ms + 20:.1f} ms (process_frame reference), "
            f"<= {1.5 * self.engine_end_to_end_ms + 20:.1f} ms (end-to-end reference)",
            "",
            "| swap batch | concurrency | sent | 200 | 503/429 | failed | p50 ms | p99 ms | req/s | max swap batch |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in self.rows:
            mark = " (time limit)" if r.time_limited else ""
            lines.append(f"| {r.batch_size} | {r.concurrency} | {r.sent}{mark} | {r.ok} | {r.rejected} | {r.failed} | "
                         f"{r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.requests_per_s:.2f} | {r.max_swap_batch:g} |")
        lines += ["", "mean per-stage latency inside the service (ms, from /metrics; remote stages include "
                  "the hop and the batch wait):"]
        for r in self.rows:
            stages = ", ".join(f"{k} {v:.1f}" for k, v in r.stage_ms.items())
            lines.append(f"- batch {r.batch_size}, concurrency {r.concurrency}: {stages}")
        failures = [f for r in self.rows for f in r.failures[:3]]
        if failures:
            lines += ["", "failures (first of each level):", *failures]
        return "\n".join(lines)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values), q))


def measure_engine(engine_cfg: EngineConfig, plan: LoadPlan) -> tuple[float, float, tuple[int, ...], list[str]]:
    """p50 of process_frame, and of decode + process_frame + encode, in-process on all CPUs."""
    from fusion_ray.imageio import decode_image, encode_image, read_image
    from fusion_ray.runners.inline import Engine

    engine = Engine.load(engine_cfg, cpu_budget=float(os.cpu_count() or 1))
    identity = engine.prepare_source([read_image(plan.source).frame])
    data = Path(plan.target).read_bytes()
    frame = decode_image(data, str(plan.target)).frame
    suffix = ".png" if plan.output_format == "png" else ".jpg"
    meta = engine.provenance.metadata()
    process, end_to_end = [], []
    for i in range(plan.engine_runs + 2):
        start = time.perf_counter()
        engine.process_frame(frame, identity)
        mid = time.perf_counter()
        loaded = decode_image(data, "target")
        out = engine.process_frame(loaded.frame, identity).frame
        encode_image(out, suffix, alpha=loaded.alpha, metadata=meta)
        end = time.perf_counter()
        if i >= 2:  # warm-up
            process.append((mid - start) * 1000)
            end_to_end.append((end - mid) * 1000)
    return statistics.median(process), statistics.median(end_to_end), frame.shape, engine.stand_in_models


def _multipart(fields: list[tuple[str, Any]]) -> tuple[bytes, str]:
    from urllib3 import encode_multipart_formdata

    body, content_type = encode_multipart_formdata(fields)
    return body, content_type


async def _register_source(session: Any, base: str, headers: dict[str, str], source: Path) -> str:
    body, ctype = _multipart([("image", (source.name, source.read_bytes(), "application/octet-stream"))])
    async with session.post(f"{base}/v1/sources", data=body, headers={**headers, "Content-Type": ctype}) as resp:
        payload = await resp.json()
        if resp.status != 201:
            raise InputError(f"registering the source failed: {resp.status} {payload}")
        return str(payload["source_id"])


STAGE_ORDER = ("receive", "decode", "detect", "source_lookup", "swap", "paste", "enhance", "paste_enhanced",
               "encode")


async def _metrics(session: Any, base: str) -> tuple[dict[float, float], dict[str, tuple[float, float]]]:
    """The swapper's batch-size buckets and (sum, count) of each stage's latency."""
    async with session.get(f"{base}/metrics") as resp:
        samples = parse_exposition(await resp.text())
    buckets: dict[float, float] = {}
    for labels, value in samples.get("fusion_ray_batch_size_bucket", []):
        if labels.get("deployment") == "swapper":
            buckets[float("inf") if labels["le"] == "+Inf" else float(labels["le"])] = value
    sums = {lab["stage"]: v for lab, v in samples.get("fusion_ray_stage_seconds_sum", [])}
    counts = {lab["stage"]: v for lab, v in samples.get("fusion_ray_stage_seconds_count", [])}
    return buckets, {k: (sums[k], counts.get(k, 0.0)) for k in sums}


def _stage_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for stage in STAGE_ORDER:
        total, count = after.get(stage, (0.0, 0.0))
        total0, count0 = before.get(stage, (0.0, 0.0))
        if count > count0:
            out[stage] = (total - total0) / (count - count0) * 1000
    return out


def _max_batch_between(before: dict[float, float], after: dict[float, float]) -> float:
    delta = {le: after.get(le, 0.0) - before.get(le, 0.0) for le in after}
    total = delta.get(float("inf"), 0.0)
    if total <= 0:
        return 0.0
    for le in sorted(delta):
        if delta[le] >= total:
            return le
    return float("inf")


async def _run_level(session: Any, base: str, headers: dict[str, str], body: bytes, ctype: str,
                     plan: LoadPlan, concurrency: int) -> tuple[list[float], dict[int, int], list[str], int, float, bool]:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    failures: list[str] = []
    sent = 0
    deadline = time.monotonic() + plan.time_limit_s
    time_limited = False

    async def worker() -> None:
        nonlocal sent, time_limited
        while sent < plan.requests:
            if time.monotonic() >= deadline:
                time_limited = True
                return
            sent += 1
            start = time.perf_counter()
            try:
                async with session.post(f"{base}/v1/swap", data=body,
                                        headers={**headers, "Content-Type": ctype}) as resp:
                    payload = await resp.read()
                    status = resp.status
                    retry_after = resp.headers.get("Retry-After")
            except Exception as exc:  # counted as a failure, the run goes on
                failures.append(f"{type(exc).__name__}: {exc}")
                statuses[-1] = statuses.get(-1, 0) + 1
                continue
            elapsed = (time.perf_counter() - start) * 1000
            statuses[status] = statuses.get(status, 0) + 1
            if status == 200:
                latencies.append(elapsed)
            elif status in (429, 503):
                if plan.honour_retry_after and retry_after:
                    await asyncio.sleep(min(float(retry_after), 1.0))
            else:
                failures.append(f"HTTP {status}: {payload[:200]!r}")

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, statuses, failures, sent, time.perf_counter() - start, time_limited


async def _drive(plan: LoadPlan, batch_size: int, token: str | None,
                 progress: Callable[[str], None]) -> list[LevelResult]:
    import aiohttp

    base = f"http://{plan.host}:{plan.port}"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    connector = aiohttp.TCPConnector(limit=max(plan.concurrency) + 4)
    timeout = aiohttp.ClientTimeout(total=max(120.0, plan.time_limit_s * 2))
    rows: list[LevelResult] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        source_id = await _register_source(session, base, headers, Path(plan.source))
        body, ctype = _multipart([
            ("target", (Path(plan.target).name, Path(plan.target).read_bytes(), "application/octet-stream")),
            ("source_id", source_id), ("format", plan.output_format)])
        for _ in range(plan.warmup):
            async with session.post(f"{base}/v1/swap", data=body, headers={**headers, "Content-Type": ctype}) as resp:
                await resp.read()
                if resp.status != 200:
                    raise InputError(f"warm-up request failed: HTTP {resp.status}")
        for level in plan.concurrency:
            before, stages_before = await _metrics(session, base)
            latencies, statuses, failures, sent, wall, limited = await _run_level(
                session, base, headers, body, ctype, plan, level)
            after, stages_after = await _metrics(session, base)
            ok = statuses.get(200, 0)
            rejected = statuses.get(503, 0) + statuses.get(429, 0)
            row = LevelResult(batch_size, level, sent, ok, rejected, sent - ok - rejected,
                              _percentile(latencies, 50), _percentile(latencies, 99), ok / wall if wall else 0.0,
                              wall, _max_batch_between(before, after), limited, failures,
                              _stage_means(stages_before, stages_after))
            rows.append(row)
            progress(f"batch {batch_size} concurrency {level}: {ok}/{sent} ok, {rejected} rejected, "
                     f"p50 {row.p50_ms:.1f} ms, p99 {row.p99_ms:.1f} ms, {row.requests_per_s:.2f} req/s")
    return rows


def run_load_test(app_args: dict[str, Any], plan: LoadPlan,
                  progress: Callable[[str], None] = lambda line: None) -> LoadReport:
    """Measure the engine, then the service at each batch size and concurrency level."""
    import ray
    from ray import serve

    from fusion_ray.serve.app import build_app

    plan.check()
    settings = parse_settings(app_args)
    progress("measuring the engine in-process ...")
    process_ms, e2e_ms, shape, stand_ins = measure_engine(settings.engine, plan)
    report = LoadReport(process_ms, e2e_ms, plan.output_format, tuple(shape), os.cpu_count() or 1,
                        stand_in_models=stand_ins)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": plan.host, "port": plan.port})
        token = settings.auth.resolve_token()
        for size in plan.batch_sizes:
            progress(f"deploying with swap batch size {size} ...")
            serve.run(build_app(settings.with_batch_size(size).model_dump(mode="json")), name=APP_NAME,
                      route_prefix="/")
            try:
                report.rows += asyncio.run(_drive(plan, size, token, progress))
            finally:
                serve.delete(APP_NAME)
    finally:
        serve.shutdown()
        if started_ray:
            ray.shutdown()
    return report
