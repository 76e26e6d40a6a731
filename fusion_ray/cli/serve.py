"""``fusion-ray serve`` (the online API on a local Ray) and ``fusion-ray bench serve`` (its load test)."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Any

from fusion_ray.cli import reaper
from fusion_ray.cli.common import parse_model_paths
from fusion_ray.errors import ConfigError
from fusion_ray.serve.guard import GuardConfig, HeaderGuard, start_guard

DEFAULT_CONFIG_NAME = "default_serve.yaml"
"""The default Serve config, shipped in the package (configs/serve.yaml is its editable copy)."""


def default_config() -> Path:
    """The packaged default Serve config (found from any working folder)."""
    return Path(str(resources.files("fusion_ray.serve").joinpath(DEFAULT_CONFIG_NAME)))


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("serve", help="run the HTTP API on Ray Serve",
                            description="Start the fusion_ray Serve application (the packaged default config, "
                            "or --config) on a local Ray (or --address) and serve until interrupted (Ctrl-C or "
                            "SIGTERM stop it cleanly).")
    _common(parser)
    parser.add_argument("--host", help="listen address (default: the config's http_options, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default: the config's http_options, else 8000)")
    parser.add_argument("--address", help="Ray cluster address to join (default: start a local Ray)")
    parser.add_argument("--header-timeout-s", type=float, default=GuardConfig().header_timeout_s,
                        help="close a connection whose request headers are not complete in this time (408; "
                        "default %(default)s); 0: no deadline, Serve's proxy listens on the address itself")
    parser.set_defaults(run=run_serve)


def register_bench(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``fusion-ray bench serve`` (``sub``: the benchmarks' subcommands)."""
    load = sub.add_parser("serve", help="bounded loopback load test of the HTTP API",
                          description="Deploy the service on a local Ray, send a fixed number of swap requests "
                          "at each concurrency, with batching on and off, and report latency percentiles and "
                          "throughput next to the engine's in-process time.")
    _common(load)
    load.add_argument("--target", type=Path, required=True, help="target image")
    load.add_argument("--source", type=Path, required=True, help="source face image")
    load.add_argument("--requests", type=int, default=64, help="requests per concurrency level (default 64)")
    load.add_argument("--concurrency", default="1,8,32", help="comma-separated concurrency levels (default 1,8,32)")
    load.add_argument("--batch-sizes", default="8,1", help="swap batch sizes to compare; 1 = batching off")
    load.add_argument("--time-limit", type=float, default=60.0, help="seconds per level before it stops sending")
    load.add_argument("--format", choices=["png", "jpeg"], default="png", help="output format requested")
    load.add_argument("--port", type=int, default=8137, help="loopback port for the service")
    load.add_argument("--no-retry-after", action="store_true",
                      help="do not wait Retry-After after a 503 before the next request")
    load.set_defaults(run=run_load)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None,
                        help="Serve config file (default: the packaged copy of configs/serve.yaml)")
    parser.add_argument("--models-dir", type=Path, help="model directory (overrides engine.models.models_dir)")
    parser.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                        help="use this file for model NAME (repeatable)")


def app_args_from_cli(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(validated app args as JSON-ready data, the application entry, the whole Serve config)."""
    from fusion_ray.serve.settings import find_application, parse_settings, read_serve_config

    if args.config is None:
        args.config = default_config()
    config = read_serve_config(args.config)
    app = find_application(config, str(args.config))
    data: dict[str, Any] = dict(app.get("args") or {})
    if not isinstance(data, dict):
        raise ConfigError(f"{args.config}: the application's args must be a mapping")
    engine = dict(data.get("engine") or {})
    models = dict(engine.get("models") or {})
    if args.models_dir:
        models["models_dir"] = str(args.models_dir)
    if args.model:
        models["paths"] = {**(models.get("paths") or {}), **{k: str(v) for k, v in parse_model_paths(args.model).items()}}
    engine["models"] = models
    data["engine"] = engine
    settings = parse_settings(data, source=str(args.config))
    return settings.model_dump(mode="json"), app, config


def resolve_metrics_public(app_args: dict[str, Any], host: str) -> None:
    """``auth.metrics_public: null`` (the default) becomes whether ``host`` is a loopback bind:
    /metrics answers without the token only there."""
    from fusion_ray.serve.auth import is_loopback

    auth = app_args.setdefault("auth", {})
    if auth.get("metrics_public") is None:
        auth["metrics_public"] = is_loopback(host)


class _Stop(Exception):
    """SIGTERM: stop as Ctrl-C does."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def run_serve(args: argparse.Namespace) -> int:
    app_args, app, config = app_args_from_cli(args)
    http = dict(config.get("http_options") or {})
    host = args.host or http.get("host") or "127.0.0.1"
    port = args.port or int(http.get("port") or 8000)
    check_port_free(host, port)  # before Ray starts (about 10 s), not after

    import ray
    from ray import serve

    from fusion_ray.serve.app import build_app

    name = app.get("name", "fusion_ray")
    prefix = app.get("route_prefix", "/")
    drain_s = float(app_args["shutdown"]["drain_timeout_s"])
    resolve_metrics_public(app_args, host)
    started = not ray.is_initialized()
    reaper_pid = None
    if started:
        if args.address is None:
            reaper_pid = reaper.start()  # a kill -9 of this process must not orphan the local Ray's agents
        ray.init(address=args.address, include_dashboard=False)
    # After ray.init, which installs its own SIGTERM handler (sys.exit): SIGTERM now takes the
    # same path as Ctrl-C, so Serve and the local Ray it started are shut down in order.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_stop)
    guard = None
    try:
        if args.header_timeout_s > 0:  # Serve's proxy on loopback, behind the header deadline
            upstream = ("127.0.0.1", _free_loopback_port())
            serve.start(http_options={"host": upstream[0], "port": upstream[1]})
            guard = HeaderGuard(upstream, guard_config(app_args, args.header_timeout_s, prefix))
            start_guard(guard, host, port)
        else:
            serve.start(http_options={"host": host, "port": port})
        print(f"starting {name} on http://{host}:{port}{prefix} (models load in the replicas)...", file=sys.stderr)
        serve.run(build_app(app_args), name=name, route_prefix=prefix, blocking=False)
        print(f"ready: http://{host}:{port}{prefix.rstrip('/')}/openapi.json  (Ctrl-C or SIGTERM stops it)",
              file=sys.stderr)
        while True:
            time.sleep(3600)
    except (KeyboardInterrupt, _Stop):
        print(f"stopping: live streams end, requests in flight get up to {drain_s:g} s...", file=sys.stderr)
    finally:
        stop(serve, ray if started and args.address is None else None, name, drain_s, reaper_pid, guard=guard)
    return 0


def guard_config(app_args: dict[str, Any], header_timeout_s: float, route_prefix: str = "/") -> GuardConfig:
    """The guard's limits from the service's settings: it passes on at most what the ingress
    replicas take at once (Serve's ``max_ongoing_requests``), a few places kept for monitoring, so
    Serve never queues a request nor refuses one in plain text."""
    from fusion_ray.serve.settings import ServeSettings

    settings = ServeSettings.model_validate(app_args)
    ingress = settings.deployments.ingress
    places = ingress.num_replicas * settings.ingress_max_ongoing()
    reserve = min(GuardConfig.ops_reserve, places // 4)
    return GuardConfig(header_timeout_s=header_timeout_s, max_requests=max(places - reserve, 1), ops_reserve=reserve,
                       retry_after_s=settings.limits.retry_after_s, route_prefix=route_prefix)


def check_port_free(host: str, port: int) -> None:
    """:class:`ConfigError` (exit 2) when ``host:port`` cannot be listened on, naming the port and,
    when it can be told, the process that holds it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no obstacle
        try:
            probe.bind((host, port))
        except OSError as exc:
            holder = port_holder(port)
            held = f"; it is held by {holder}" if holder else ""
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{held}. "
                              "Stop that process or choose another port (--port)") from exc


def port_holder(port: int) -> str | None:
    """'pid N (name)' of a process listening on TCP ``port``, when the system tells (None otherwise)."""
    import psutil

    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            try:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
            except psutil.Error:
                return f"pid {conn.pid}"
    return None


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


STOP_MARGIN_S = 8.0
"""The stop's bound beyond ``drain_timeout_s``: telling the streams (up to 4 s), Ray's shutdown
and the reaper (the rest). Past the bound a watchdog ends the process (a note says so)."""
HUNG_EXIT = 1
"""The exit status when a step of the stop hung or the watchdog ended it (0: a clean stop)."""
STREAMS_S = 2.0
"""At most this long to reach the state deployment, and again to let the replicas see the drain."""
STOP_GRACE_S = 1.0
"""After ray.shutdown, how long Ray's processes get to exit after SIGTERM before SIGKILL."""


def stop(serve: Any, ray: Any | None, name: str, drain_s: float, reaper_pid: int | None,
         margin_s: float = STOP_MARGIN_S, guard: HeaderGuard | None = None) -> None:
    """The service's stop (:func:`_shutdown`) within ``drain_s + margin_s``: when a step has not
    ended (its thread may hold Ray, whose atexit handler would call a hung ray.shutdown again) the
    process exits at once with :data:`HUNG_EXIT`, and a watchdog ends it (the same status) 2 s past
    the bound whatever still runs."""
    if not _shutdown(serve, ray, name, drain_s, reaper_pid, time.monotonic() + drain_s + margin_s, guard):
        print(f"note: a step of the stop hung (see above); exiting now with status {HUNG_EXIT}", file=sys.stderr)
        _exit_now(HUNG_EXIT)


def _shutdown(serve: Any, ray: Any | None, name: str, drain_s: float, reaper_pid: int | None,
              deadline: float, guard: HeaderGuard | None = None) -> bool:
    """Drain the application (its live streams end at once with close 1001; requests in flight get
    up to ``drain_s``), then stop: the local Ray this command started (``ray``), its processes
    ended rather than left to linger, or Serve on a cluster it joined (``ray`` None). Every step
    is bounded, the whole by ``deadline`` (monotonic; a watchdog ends the process 2 s past it);
    False when a step did not end, telling the streams included (its thread may still hold Ray:
    the caller exits at once)."""
    main = threading.current_thread() is threading.main_thread()
    if main:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the shutdown short
    _watchdog(deadline + 2.0)
    clean = True
    try:
        clean = _drain(serve, name, drain_s, deadline, guard)
        if ray is None:
            clean = _bounded("serve.shutdown", serve.shutdown, deadline - time.monotonic()) and clean
    finally:
        if ray is not None:
            # Serve's own shutdown waits out its proxy's draining period (up to 30 s); the app has
            # drained, so the cluster goes at once, and what ray.shutdown leaves is ended here.
            procs, sessions = reaper.own_ray(skip={reaper_pid} if reaper_pid else set())
            left = deadline - time.monotonic() - STOP_GRACE_S - 1.0
            clean = _bounded("ray.shutdown", ray.shutdown, max(left, 1.0)) and clean
            reaper.end(procs, sessions, STOP_GRACE_S, skip={os.getpid()})
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return clean


def _drain(serve: Any, name: str, drain_s: float, deadline: float, guard: HeaderGuard | None = None) -> bool:
    """Tell every ingress replica to end its live streams (through the state deployment), then
    delete the application: the ingress finishes its requests within ``drain_s``. False when either
    did not end in time (a step that raised has ended: the stop goes on, cleanly).

    Behind the guard, new requests get a JSON 503 at once, those in flight get until ``drain_s``
    to be answered by the application, and any still unanswered then get the guard's JSON 503
    before the application is deleted (its replicas would end them with a plain-text 500)."""
    drained_by = time.monotonic() + drain_s
    if guard is not None:
        guard.drain()

    def tell() -> None:
        handle = serve.get_deployment_handle("ServiceState", app_name=name)
        wait_s = handle.drain.remote().result(timeout_s=STREAMS_S)
        time.sleep(min(float(wait_s), STREAMS_S))  # the replicas with streams see it before the state goes

    # the app may have failed to start, its controller be slow: the streams' notice is best effort
    told = _bounded("telling the live streams to end", tell, min(2 * STREAMS_S, deadline - time.monotonic()),
                    note="could not tell the live streams to end")
    if guard is not None and not guard.wait_idle(max(drained_by - time.monotonic(), 0.0)):
        print(f"note: {guard.in_flight()} request(s) still open after {drain_s:g} s: those not answered yet get "
              "a 503, the rest are closed", file=sys.stderr)
        guard.refuse_waiting()
    deleted = _bounded("serve.delete", lambda: serve.delete(name), min(drain_s + 1.0, deadline - time.monotonic()),
                       note="the application did not drain cleanly")
    return told and deleted


def _bounded(what: str, step: Callable[[], object], timeout_s: float, note: str = "") -> bool:
    """Run ``step`` in a daemon thread for at most ``timeout_s``; True when it ended without an
    error, else a one-line note on stderr (stopping goes on) and False when it is still running."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - reported below; stopping goes on
            failed.append(exc)

    thread = threading.Thread(target=run, name=f"fusion-ray-stop: {what}", daemon=True)
    thread.start()
    thread.join(max(timeout_s, 0.0))
    if failed or thread.is_alive():
        reason = type(failed[0]).__name__ if failed else f"{what} not done within {max(timeout_s, 0.0):.1f} s"
        print(f"note: {note or what + ' failed'} ({reason}); stopping anyway", file=sys.stderr)
    return not thread.is_alive()


def _watchdog(at: float) -> None:
    """End this process at ``at`` (monotonic), whatever still runs: the last bound on a stop."""
    def watch() -> None:
        time.sleep(max(at - time.monotonic(), 0.0))
        print(f"note: the stop outlived its bound; exiting now with status {HUNG_EXIT}", file=sys.stderr)
        _exit_now(HUNG_EXIT)

    threading.Thread(target=watch, name="fusion-ray-stop-watchdog", daemon=True).start()


def _exit_now(code: int) -> None:
    """Exit without waiting for threads or atexit handlers (Ray's own would call a hung ray.shutdown again)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_load(args: argparse.Namespace) -> int:
    from fusion_ray.serve.load import LoadPlan, run_load_test

    app_args, _, _ = app_args_from_cli(args)
    try:
        levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
        batch_sizes = [int(x) for x in args.batch_sizes.split(",") if x.strip()]
    except ValueError as exc:
        raise ConfigError(f"--concurrency and --batch-sizes take comma-separated integers: {exc}") from exc
    plan = LoadPlan(target=args.target, source=args.source, requests=args.requests, concurrency=levels,
                    batch_sizes=batch_sizes, time_limit_s=args.time_limit, output_format=args.format,
                    port=args.port, honour_retry_after=not args.no_retry_after)
    print(f"load test: {args.requests} requests per level, concurrency {levels}, batch sizes {batch_sizes}, "
          f"time limit {args.time_limit:g} s per level", file=sys.stderr)
    report = run_load_test(app_args, plan, progress=lambda line: print(line, file=sys.stderr))
    print(report.table())
    if report.stand_in_models:
        print(f"note: the service ran STAND-IN models ({', '.join(report.stand_in_models)}): outputs are not real "
              "swaps; timings show the serving overhead, not the real models' cost", file=sys.stderr)
    return 0
