"""``fusion-ray serve`` as a user runs it: from any folder, stopped by SIGTERM (a real local Ray).

One command per test (each starts its own local Ray, about 15 s on 2 cores): the CLI must not
share the test session's cluster. Run under the Ray lock, like every Ray test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.procs import free_port, kill_9_leaves, kill_all, left_after

pytestmark = pytest.mark.ray

FUSION_RAY = Path(sys.executable).with_name("fusion-ray")



def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        try:
            if requests.get(f"{url}/v1/sources/none", timeout=2).status_code == 404:  # the app answers
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise AssertionError("the service did not come up")


def _descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)



def test_sigterm_stops_serve_cleanly_from_any_folder(tmp_path, models_config):
    """No --config, started in an empty folder (the packaged default config); SIGTERM then shuts
    Serve and the local Ray down: exit 0, no traceback, no Ray process left behind."""
    port = free_port()
    models = [a for name, path in models_config.paths.items() for a in ("--model", f"{name}={path}")]
    env = {**os.environ, "FUSION_RAY_API_TOKEN": "", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen([str(FUSION_RAY), "serve", "--port", str(port), "--models-dir",
                             str(models_config.models_dir), *models],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", proc)
        ray_processes = _descendants(proc.pid)
        assert ray_processes, "the local Ray's processes should be children of the command"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr and "stopping..." in stderr, stderr
    left = left_after(ray_processes, 10)
    assert not left, left


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
