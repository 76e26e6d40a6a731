"""``fusion-ray serve`` as a user runs it: from any folder, stopped by SIGTERM (a real local Ray).

One command per test (each starts its own local Ray, about 15 s on 2 cores): the CLI must not
share the test session's cluster. Run under the Ray lock, like every Ray test.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import requests

from fusion_ray.cli.serve import STOP_MARGIN_S
from fusion_ray.serve.metrics import parse_exposition
from tests.live.webrtc_peer import Published, publish
from tests.procs import free_port, kill_9_leaves, kill_all, left_after

pytestmark = pytest.mark.ray

FUSION_RAY = Path(sys.executable).with_name("fusion-ray")



def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            answer = requests.get(f"{url}/v1/sources/none", timeout=2)
            if answer.status_code == 404 and "not found. Ping" not in answer.text:  # the app, not the proxy
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise AssertionError("the service did not come up")


def _descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)



def test_sigterm_stops_serve_cleanly_from_any_folder(tmp_path, models_config, images_dir):
    """No --config, started in an empty folder (the packaged default config). SIGTERM ends an open
    live stream with an error event and close 1001 (going away), and an open WebRTC session (held
    in the fused replica) with the same event on its data channel and its connection closed, then
    shuts Serve and the local Ray down: exit 0, no traceback, every Ray process gone within 15 s
    of the signal."""
    port = free_port()
    models = [a for name, path in models_config.paths.items() for a in ("--model", f"{name}={path}")]
    env = {**os.environ, "FUSION_RAY_API_TOKEN": "", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen([str(FUSION_RAY), "serve", "--port", str(port), "--models-dir",
                             str(models_config.models_dir), *models],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        source = _register(url, (images_dir / "obama.jpg").read_bytes())
        ray_processes = _descendants(proc.pid)
        assert ray_processes, "the local Ray's processes should be children of the command"
        signalled: list[float] = []
        frames = [np.full((360, 640, 3), 90, np.uint8)]

        async def both() -> tuple[tuple[list[dict], int | None], Published]:
            answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            rtc = asyncio.create_task(publish(url, f"source_id={source}", None, frames, seconds=60, delete=False,
                                              on_location=answered.set_result))
            await asyncio.wait_for(answered, 60)
            ws = await _stream_until_closed(f"ws://127.0.0.1:{port}/v1/stream", source, lambda: _sigterm(proc, signalled))
            return ws, await rtc

        (events, close_code), session = asyncio.run(both())
        _, stderr = proc.communicate(timeout=60)
        left = left_after(ray_processes, max(0.0, 15.0 - (time.monotonic() - signalled[0])))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert events and events[-1]["type"] == "error" and events[-1]["code"] == "shutting_down", (close_code, stderr[-3000:])
    assert close_code == 1001
    assert session.status == 201 and session.closed_by_server, session
    assert [json.loads(e)["code"] for e in session.events if '"error"' in e] == ["shutting_down"], session.events
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "stopping" in stderr, stderr
    assert not left, left


def _register(url: str, image: bytes) -> str:
    """A source id; retried: the first POST right after start-up was once answered by a closed
    connection (seen twice on this 2-core host, not understood yet)."""
    answers = []
    for _ in range(3):
        try:
            response = requests.post(f"{url}/v1/sources", timeout=60, files={"image": ("a.jpg", image, "image/jpeg")})
        except requests.RequestException as exc:
            answers.append(repr(exc))
            continue
        if response.status_code == 201:
            return str(response.json()["source_id"])
        answers.append(f"{response.status_code} {response.text[:200]}")
    raise AssertionError(answers)


def _sigterm(proc: subprocess.Popen, signalled: list[float]) -> None:
    signalled.append(time.monotonic())
    proc.send_signal(signal.SIGTERM)


async def _stream_until_closed(ws_url: str, source: str, then) -> tuple[list[dict], int | None]:
    """Open a stream, call ``then()``, keep it open; (the text events, the close code)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    events: list[dict] = []
    async with connect(ws_url) as conn:
        await conn.send(json.dumps({"source_id": source}))
        assert json.loads(await conn.recv())["type"] == "ready"
        then()
        try:
            while True:
                message = await asyncio.wait_for(conn.recv(), 30)
                if isinstance(message, str):
                    events.append(json.loads(message))
        except (ConnectionClosed, TimeoutError):
            pass
    return events, conn.close_code


def test_a_busy_port_is_refused_before_ray_starts(tmp_path):
    """A second service on a port that is in use: exit 2 at once, naming the port and its holder
    (it started a whole Ray cluster first and failed with an internal error, exit 70)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        began = time.monotonic()
        done = subprocess.run([str(FUSION_RAY), "serve", "--port", str(port)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=60, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
        took = time.monotonic() - began
    assert done.returncode == 2, done.stderr
    assert f"127.0.0.1:{port}" in done.stderr and f"pid {os.getpid()}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "ray" not in done.stderr.lower(), done.stderr
    assert took < 20, took  # no Ray started (that alone takes 10 s and more here)


def test_kill_9_of_serve_leaves_no_ray_process_behind(tmp_path, models_config):
    """The reaper ends the local Ray's agents and workers within seconds of the driver's death
    (without it, ray::DashboardAgent and ray::RuntimeEnvAgent outlived a kill -9 by over 40 s)."""
    port = free_port()
    models = [a for name, path in models_config.paths.items() for a in ("--model", f"{name}={path}")]
    env = {**os.environ, "FUSION_RAY_API_TOKEN": "", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen([str(FUSION_RAY), "serve", "--port", str(port), "--models-dir",
                             str(models_config.models_dir), *models],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ray_processes: list = []
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc)
        time.sleep(1.0)  # the reaper polls every 0.5 s
        ray_processes = [p for p in _descendants(proc.pid) if "fusion_ray.cli.reaper" not in " ".join(p.cmdline())]
        left = kill_9_leaves(proc, ray_processes)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(ray_processes)  # never leave them to the next test, even when the assertion fails
    assert not left, left


def _uploads(url: str) -> float:
    samples = parse_exposition(requests.get(f"{url}/metrics", timeout=30).text)
    return sum(v for _, v in samples.get("fusion_ray_uploads_in_progress", []))


def _partial_head(port: int, source: str, head: bytes, timeout_s: float = 30) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s, source_address=(source, 0))
    sock.sendall(head)
    return sock


STALLED_UPLOAD = (b"POST /v1/swap HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                  b"Content-Length: 100000\r\n\r\n--b\r\n")
"""An upload's head and the start of its body, then nothing more."""


def _serve_guarded(tmp_path: Path, models_config, port: int) -> subprocess.Popen:
    """``fusion-ray serve`` on ``port`` behind its header guard (a 2 s header deadline)."""
    models = [a for name, path in models_config.paths.items() for a in ("--model", f"{name}={path}")]
    env = {**os.environ, "FUSION_RAY_API_TOKEN": "", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen([str(FUSION_RAY), "serve", "--port", str(port), "--header-timeout-s", "2",
                             "--models-dir", str(models_config.models_dir), *models],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_the_guard_gives_headers_a_deadline_and_passes_each_client_on(tmp_path, models_config):
    """``fusion-ray serve`` listens through its header guard: a connection whose headers stall is
    answered 408 and closed after --header-timeout-s; requests and a WebSocket pass through; the
    ingress's per-client upload limit sees each client's own address (X-Forwarded-For from the
    guard), so one greedy address is refused while another is served."""
    from websockets.asyncio.client import connect

    port = free_port()
    proc = _serve_guarded(tmp_path, models_config, port)
    held: list[socket.socket] = []
    ray_processes: list = []
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)  # plain requests pass through
        ray_processes = _descendants(proc.pid)
        stalled = _partial_head(port, "127.0.0.1", b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        start = time.monotonic()
        answer = stalled.recv(200)
        assert answer.startswith(b"HTTP/1.1 408") and 1.5 < time.monotonic() - start < 20, answer
        assert stalled.recv(200) == b""  # and closed

        held = [_partial_head(port, "127.0.0.2", STALLED_UPLOAD) for _ in range(8)]  # the per-client limit
        deadline = time.monotonic() + 60
        while _uploads(url) < 8 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _uploads(url) == 8
        held.append(_partial_head(port, "127.0.0.2", STALLED_UPLOAD))  # a 9th from the same address
        reply = http.client.HTTPResponse(held[-1])  # answered at once, before its body is read
        reply.begin()
        assert reply.status == 503 and "your address has its limit" in json.loads(reply.read())["detail"]
        other = requests.get(f"{url}/v1/sources/none", timeout=30)  # another client: served
        assert other.status_code == 404, other.text

        async def stream_refusal() -> dict:
            async with connect(f"ws://127.0.0.1:{port}/v1/stream") as conn:
                await conn.send(json.dumps({"source_id": "nope"}))
                return json.loads(await conn.recv())

        assert asyncio.run(stream_refusal())["code"] == "unknown_source"  # the WebSocket passed through
    finally:
        for sock in held:
            sock.close()
        proc.send_signal(signal.SIGTERM)
        # Cleanup, not the subject: how SIGTERM stops the service is test_sigterm_stops_serve_cleanly_from_any_folder's,
        # and its bound after stalled uploads test_a_stop_after_stalled_uploads_through_the_guard_is_bounded's.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
        if proc.poll() is None:
            proc.kill()
        kill_all(ray_processes)


STOP_BOUND_S = 10.0 + STOP_MARGIN_S + 2.0 + 2.0
"""``shutdown.drain_timeout_s`` (the default, 10 s), the stop's margin for Ray to go, the watchdog's
2 s past it (it ends the process whatever still runs), 2 s for the signal and the process's end.
Measured: 13 s to 20 s (the watchdog once) on this 2-core host."""


def test_a_stop_after_stalled_uploads_through_the_guard_is_bounded(tmp_path, models_config):
    """Stalled uploads through the header guard (8 held, a 9th refused, all
    closed, as in the guard test; then 2 more left open), then SIGTERM: the command exits within
    ``drain_timeout_s`` + a few seconds (once, in a full CI run, it had not exited 120 s after)."""
    port = free_port()
    proc = _serve_guarded(tmp_path, models_config, port)
    held: list[socket.socket] = []
    ray_processes: list = []
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        ray_processes = _descendants(proc.pid)
        closed = [_partial_head(port, "127.0.0.2", STALLED_UPLOAD) for _ in range(9)]  # the 9th is refused (503)
        deadline = time.monotonic() + 60
        while _uploads(url) < 8 and time.monotonic() < deadline:
            time.sleep(0.5)
        for sock in closed:
            sock.close()
        held = [_partial_head(port, "127.0.0.3", STALLED_UPLOAD) for _ in range(2)]  # still stalled at the signal
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=120)
        took = time.monotonic() - signalled
        answers = [_until_closed(sock) for sock in held]
    finally:
        for sock in held:
            sock.close()
        if proc.poll() is None:
            proc.kill()
        kill_all(ray_processes)  # before reading stderr: they hold its pipe too
    stderr = proc.stderr.read() if proc.stderr else ""
    assert took < STOP_BOUND_S, (took, stderr[-3000:])
    # The two uploads still open hold the ingress' drain: Serve may not finish deleting the app within
    # drain_timeout_s, and then the stop says so and exits 1 (not a clean stop), still within the bound.
    assert proc.returncode == 0 or (proc.returncode == 1 and "exiting now with status 1" in stderr), stderr[-3000:]
    own = "\n".join(line for line in stderr.splitlines() if not line.lstrip("\x1b[0123456789m").startswith("("))
    assert "Traceback" not in own, own[own.find("Traceback") - 300:][:4000]  # the command's, not a replica's
    # the stalled uploads were never answered by the application: the guard answers them before it goes
    for reply in answers:
        assert reply.startswith(b"HTTP/1.1 503") and b'"shutting_down"' in reply, reply[:300]


def _until_closed(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    reply = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(4096):
            reply += chunk
    return reply


@pytest.mark.parametrize(("configured", "host", "public"), [
    (None, "127.0.0.1", True), (None, "::1", True), (None, "0.0.0.0", False), (None, "10.1.2.3", False),
    (True, "0.0.0.0", True), (False, "127.0.0.1", False),
])
def test_metrics_are_public_by_default_only_on_a_loopback_bind(configured, host, public):
    from fusion_ray.cli.serve import resolve_metrics_public

    args = {"auth": {"metrics_public": configured}}
    resolve_metrics_public(args, host)
    assert args["auth"]["metrics_public"] is public
