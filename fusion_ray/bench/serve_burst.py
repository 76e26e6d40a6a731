"""Bursts and a stop during a burst, against ``fusion-ray serve`` on loopback (bounded).

Each burst sends ``concurrency`` concurrent ``/v1/swap`` requests from ``clients`` loopback
addresses (127.0.0.2, 127.0.0.3, ...) while ``/metrics`` is polled every ``poll_s``. It records
every answer (status, whether the body is JSON), each ``/metrics`` poll, and after each burst the
resident memory of the service's processes (the ingress and the chain's replica by name).

The stop runs start the service again, start a burst, send SIGTERM ``sigterm_after_s`` later,
and record every answer, the command's exit status, and how long until it and every Ray process
it started are gone.

What the service promises, checked here: every error is a JSON body; ``/metrics`` is answered on
every poll; memory is flat after warm-up; no 500 on SIGTERM, and the stop stays bounded.
``fusion-ray bench serve-burst`` runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

FUSION_RAY = Path(sys.executable).with_name("fusion-ray")


@dataclass(frozen=True)
class BurstPlan:
    """What to send, how often, and to which service."""

    target: Path
    source: Path
    models: tuple[str, ...]  # the serve command's --models-dir / --model arguments
    port: int = 8141
    bursts: int = 7
    concurrency: int = 200
    clients: int = 25
    poll_s: float = 0.25
    sigterm_runs: int = 3
    sigterm_after_s: float = 1.5
    request_timeout_s: float = 60.0
    log: Path = Path("serve_burst.log")
    """Where the service's stderr goes (appended)."""


@dataclass
class BurstResult:
    """One burst's (or one stop's) answers."""

    statuses: Counter[int] = field(default_factory=Counter)
    not_json_errors: Counter[str] = field(default_factory=Counter)  # "status: first bytes" of non-JSON errors
    metrics_polls: int = 0
    metrics_refused: int = 0
    seconds: float = 0.0
    memory_mb: dict[str, float] = field(default_factory=dict)


def start_service(plan: BurstPlan) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FUSION_RAY_API_TOKEN": "", "RAY_USAGE_STATS_ENABLED": "0"}
    with plan.log.open("ab") as log:  # the service's stderr (Ray's replica logs too), never a pipe left unread
        return subprocess.Popen([str(FUSION_RAY), "serve", "--port", str(plan.port), *plan.models],
                                env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)


async def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout_s: float = 240.0) -> None:
    import aiohttp

    end = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited with {proc.returncode} before it was ready")
            try:
                async with session.get(f"{base}/readyz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(1.0)
    raise RuntimeError("the service was not ready in time")


async def register_source(base: str, source: Path) -> str:
    import aiohttp

    form = aiohttp.FormData()
    form.add_field("image", source.read_bytes(), filename=source.name)
    async with aiohttp.ClientSession() as session, session.post(f"{base}/v1/sources", data=form) as resp:
        return str((await resp.json())["source_id"])


async def burst(base: str, plan: BurstPlan, source_id: str, during: asyncio.Event | None = None) -> BurstResult:
    """One burst: ``concurrency`` requests at once from ``clients`` addresses, /metrics polled meanwhile.
    ``during`` is set once every request has been sent."""
    import aiohttp

    result = BurstResult()
    target = plan.target.read_bytes()
    sessions = [aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(local_addr=(f"127.0.0.{2 + i}", 0), limit=0, force_close=True),
        timeout=aiohttp.ClientTimeout(total=plan.request_timeout_s)) for i in range(plan.clients)]
    done = asyncio.Event()

    async def one(i: int) -> None:
        form = aiohttp.FormData()
        form.add_field("source_id", source_id)
        form.add_field("target", target, filename=plan.target.name)
        try:
            async with sessions[i % plan.clients].post(f"{base}/v1/swap", data=form) as resp:
                body = await resp.read()
                _record(result, resp.status, resp.headers.get("Content-Type", ""), body)
        except (TimeoutError, aiohttp.ClientError) as exc:
            result.statuses[-1] += 1
            result.not_json_errors[f"no answer: {type(exc).__name__}"] += 1

    async def poll() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            while not done.is_set():
                result.metrics_polls += 1
                try:
                    async with session.get(f"{base}/metrics") as resp:
                        await resp.read()
                        result.metrics_refused += resp.status != 200
                except (TimeoutError, aiohttp.ClientError):
                    result.metrics_refused += 1
                await asyncio.sleep(plan.poll_s)

    start = time.perf_counter()
    poller = asyncio.create_task(poll())
    tasks = [asyncio.create_task(one(i)) for i in range(plan.concurrency)]
    if during is not None:
        during.set()
    await asyncio.gather(*tasks)
    done.set()
    await poller
    result.seconds = time.perf_counter() - start
    for session in sessions:
        await session.close()
    return result


def _record(result: BurstResult, status: int, content_type: str, body: bytes) -> None:
    result.statuses[status] += 1
    if status < 400:
        return
    try:
        json.loads(body)
        if "json" in content_type:
            return
    except ValueError:
        pass
    result.not_json_errors[f"{status}: {body[:60]!r}"] += 1


def service_memory_mb(root: int) -> dict[str, float]:
    """Resident MB of the serve command's process tree: in all, and the ingress and chain replicas."""
    try:
        procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    out: Counter[str] = Counter()
    for proc in procs:
        try:
            rss = proc.memory_info().rss / 1e6
            title = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        out["all"] += rss
        for name in ("Ingress", "Fused", "ServiceState"):
            if f":{name}" in title:
                out[name] += rss
    return dict(out)


def _own_ray_processes(root_children: list[psutil.Process]) -> int:
    return sum(1 for proc in root_children if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)


async def run_bursts(plan: BurstPlan) -> list[BurstResult]:
    base = f"http://127.0.0.1:{plan.port}"
    proc = start_service(plan)
    try:
        await wait_ready(base, proc)
        source_id = await register_source(base, plan.source)
        results = []
        for _ in range(plan.bursts):
            result = await burst(base, plan, source_id)
            await asyncio.sleep(2.0)  # let the replicas settle before memory is read
            result.memory_mb = service_memory_mb(proc.pid)
            results.append(result)
        return results
    finally:
        _stop(proc)


@dataclass
class StopResult:
    answers: BurstResult
    exit_code: int | None
    exit_s: float
    all_gone_s: float


async def run_stop(plan: BurstPlan) -> StopResult:
    """SIGTERM ``sigterm_after_s`` into a burst: every answer, the exit status, how long the stop took."""
    async def during(base: str, source_id: str) -> Callable[[], Awaitable[BurstResult]]:
        sent = asyncio.Event()
        running = asyncio.create_task(burst(base, plan, source_id, during=sent))
        await sent.wait()
        await asyncio.sleep(plan.sigterm_after_s)
        return lambda: running

    return await _stop_run(plan, during)


async def hostile_streams(base: str, plan: BurstPlan, source_id: str) -> None:
    """Live streams a red team opens: a nested start message, frames with old sequence numbers,
    a stream whose source is deleted under it. Each is left as the server leaves it."""
    import aiohttp

    from fusion_ray.live.protocol import pack_frame

    ws_url = base.replace("http", "ws", 1) + "/v1/stream"
    image = plan.target.read_bytes()
    async with aiohttp.ClientSession() as session:
        nested = await session.ws_connect(ws_url)
        await nested.send_str(json.dumps({"source_id": source_id, "x": [[[[{"a": [1]}]]]]}))
        old = await session.ws_connect(ws_url)
        await old.send_str(json.dumps({"source_id": source_id}))
        await old.receive(timeout=30)
        for seq in (5, 4, 3, 2, 1, 0):
            await old.send_bytes(pack_frame(seq, time.time() * 1000, image))
        deleted_id = await register_source(base, plan.source)
        deleted = await session.ws_connect(ws_url)
        await deleted.send_str(json.dumps({"source_id": deleted_id}))
        await deleted.receive(timeout=30)
        async with session.delete(f"{base}/v1/sources/{deleted_id}") as resp:
            await resp.read()
        await asyncio.sleep(1.0)
        for ws in (nested, old, deleted):
            await ws.close()


async def run_stop_after_hostile_streams(plan: BurstPlan) -> StopResult:
    """The stop's time after :func:`hostile_streams`, with nothing else in flight."""
    async def before(base: str, source_id: str) -> Callable[[], Awaitable[BurstResult]]:
        await hostile_streams(base, plan, source_id)

        async def nothing() -> BurstResult:
            return BurstResult()
        return nothing

    return await _stop_run(plan, before)


async def _stop_run(plan: BurstPlan,
                    before: Callable[[str, str], Awaitable[Callable[[], Awaitable[BurstResult]]]]) -> StopResult:
    """Start the service, run ``before`` (which gives how to collect the answers), send SIGTERM,
    then time the command's exit and the end of every Ray process it started."""
    base = f"http://127.0.0.1:{plan.port}"
    proc = start_service(plan)
    try:
        await wait_ready(base, proc)
        source_id = await register_source(base, plan.source)
        children = psutil.Process(proc.pid).children(recursive=True)
        answers = await before(base, source_id)
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        answered = await answers()
        code = await asyncio.to_thread(_wait, proc, 60.0)
        exit_s = time.monotonic() - signalled
        while _own_ray_processes(children) and time.monotonic() - signalled < 60.0:
            await asyncio.sleep(0.1)
        return StopResult(answered, code, exit_s, time.monotonic() - signalled)
    finally:
        _stop(proc)


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        if _wait(proc, 30.0) is None:
            os.killpg(proc.pid, signal.SIGKILL)


def burst_table(results: list[BurstResult]) -> str:
    lines = ["| burst | s | 200 | 503 JSON | other | non-JSON errors | /metrics refused | MB all | MB ingress | MB chain |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for i, res in enumerate(results, 1):
        refused_json = res.statuses[503] - sum(n for key, n in res.not_json_errors.items() if key.startswith("503"))
        other = sum(n for status, n in res.statuses.items() if status not in (200, 503))
        mem = res.memory_mb
        lines.append(f"| {i} | {res.seconds:.1f} | {res.statuses[200]} | {refused_json} | {other} | "
                     f"{sum(res.not_json_errors.values())} | {res.metrics_refused}/{res.metrics_polls} | "
                     f"{mem.get('all', 0):.0f} | {mem.get('Ingress', 0):.0f} | {mem.get('Fused', 0):.0f} |")
    kinds = Counter[str]()
    for res in results:
        kinds.update(res.not_json_errors)
    if kinds:
        lines.append("non-JSON errors: " + "; ".join(f"{k} x{n}" for k, n in kinds.most_common(5)))
    return "\n".join(lines)


def stop_table(results: list[StopResult]) -> str:
    lines = ["| run | answers | 500 | non-JSON errors | exit status | exit s | all Ray gone s |",
             "|---|---|---|---|---|---|---|"]
    for i, res in enumerate(results, 1):
        answers = ", ".join(f"{status}: {n}" for status, n in sorted(res.answers.statuses.items()))
        lines.append(f"| {i} | {answers} | {res.answers.statuses[500]} | {sum(res.answers.not_json_errors.values())} "
                     f"| {res.exit_code} | {res.exit_s:.1f} | {res.all_gone_s:.1f} |")
    return "\n".join(lines)
