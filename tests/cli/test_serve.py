"""``fusion-ray serve``'s stop path is bounded when Ray hangs (no Ray here: a hang of Ray cannot be
produced on demand, so these stand-ins for ``serve`` and ``ray`` hang where the real calls could).
The real stop after stalled uploads is test_serve_cli.py's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

DRAIN_S = 0.5
MARGIN_S = 2.0
"""The stop's bound is drain + margin (8 s in the command; shorter here to keep the test fast)."""

_SCRIPT = """
import threading, time
from fusion_ray.cli.serve import stop

HANG = {hang!r}

def forever(*args, **kwargs):
    threading.Event().wait()

class Serve:
    def get_deployment_handle(self, *args, **kwargs):
        forever() if HANG == "handle" else (_ for _ in ()).throw(RuntimeError("no app"))
    def delete(self, name):
        forever() if HANG == "delete" else None
    def shutdown(self):
        forever()

class Ray:
    def shutdown(self):
        forever() if HANG == "ray.shutdown" else None

if HANG == "thread":  # something of Ray's that never ends keeps the interpreter from exiting
    threading.Thread(target=forever, daemon=False).start()
stop(Serve(), None if HANG == "serve.shutdown" else Ray(), "app", {drain_s}, None, margin_s={margin_s})
"""


def _stop(hang: str) -> tuple[subprocess.CompletedProcess[str], float]:
    script = textwrap.dedent(_SCRIPT.format(hang=hang, drain_s=DRAIN_S, margin_s=MARGIN_S))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    return proc, time.monotonic() - start


@pytest.mark.parametrize("hang", ["handle", "delete", "ray.shutdown", "serve.shutdown", "thread"])
def test_the_stop_ends_within_its_bound_whatever_hangs_and_says_so_in_its_status(hang):
    proc, took = _stop(hang)
    assert took < DRAIN_S + MARGIN_S + 2.0 + 2.0, (took, proc.stderr)  # the watchdog's 2 s, Python's start
    assert proc.returncode == 1, proc.stderr  # a stop that hung is not a clean one
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "stopping anyway" in proc.stderr or "exiting now" in proc.stderr, proc.stderr
    assert "with status 1" in proc.stderr, proc.stderr


def test_a_stop_where_nothing_hangs_exits_0():
    proc, _ = _stop("none")  # (the stand-in has no application to tell: a step that raised has ended)
    assert proc.returncode == 0 and "exiting now" not in proc.stderr, proc.stderr


def test_cli_overlays_model_paths(tmp_path):
    from fusion_ray.cli import build_parser
    from fusion_ray.cli.serve import app_args_from_cli

    config = yaml.safe_load((REPO / "configs" / "serve.yaml").read_text())
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    args = build_parser().parse_args(["serve", "--config", str(path), "--models-dir", "/m",
                                      "--model", "scrfd_2.5g=/x/scrfd.onnx", "--port", "9001"])
    data, app, _ = app_args_from_cli(args)
    assert data["engine"]["models"]["models_dir"] == "/m"
    assert data["engine"]["models"]["paths"] == {"scrfd_2.5g": "/x/scrfd.onnx"}
    assert app["name"] == "fusion_ray" and args.port == 9001
    load_args = build_parser().parse_args(["bench", "serve", "--config", str(path), "--target", "t.jpg",
                                           "--source", "s.jpg"])
    assert load_args.concurrency == "1,8,32" and load_args.batch_sizes == "8,1"


def test_the_packaged_default_config_equals_configs_serve_yaml():
    from fusion_ray.cli.serve import default_config

    assert default_config().read_bytes() == (REPO / "configs" / "serve.yaml").read_bytes()


def test_the_guard_passes_on_what_the_ingress_takes_with_places_kept_for_monitoring():
    """The guard's cap comes from the ingress's Serve options: replicas x max_ongoing_requests in
    all, 8 of them (at most a quarter) kept for /metrics and the probes; Retry-After from the limits."""
    from fusion_ray.cli.serve import guard_config
    from fusion_ray.serve.settings import parse_settings

    cfg = guard_config(parse_settings({}).model_dump(mode="json"), 3.0)
    assert (cfg.max_requests, cfg.ops_reserve, cfg.header_timeout_s) == (56, 8, 3.0)
    args = {"deployments": {"ingress": {"num_replicas": 2, "max_ongoing_requests": 100}},
            "limits": {"retry_after_s": 7}}
    cfg = guard_config(parse_settings(args).model_dump(mode="json"), 3.0, "/api/")
    assert (cfg.max_requests, cfg.ops_reserve, cfg.retry_after_s) == (192, 8, 7)
    assert cfg.is_monitoring("/api/metrics") and not cfg.is_monitoring("/metrics")
