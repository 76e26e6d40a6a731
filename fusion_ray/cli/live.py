"""``fusion-ray live`` (stream a camera or a video to a live endpoint) and ``fusion-ray bench live``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from fusion_ray.cli.common import add_engine_arguments, check_stream_output, engine_config_from_args
from fusion_ray.cli.live_outputs import Outputs, add_output_arguments, wants_window
from fusion_ray.core.facefusion_options import FACEFUSION_OPTIONS
from fusion_ray.errors import InputError
from fusion_ray.live.client import ClientReport, http_base, register_source, run_stream
from fusion_ray.live.frame_sources import CaptureSource
from fusion_ray.types import STREAM_SELECT_MODES

TOKEN_ENV = "FUSION_RAY_API_TOKEN"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    live = sub.add_parser("live", help="swap a camera or a video live, in this process or through a live endpoint",
                          description="Without --url: run the stream policy in this process, no server (latest frame "
                          "wins, per-frame deadline, degradation ladder, tracking at level 3) and show the result in "
                          "a window, write it with --output, send it to a virtual camera (--virtual-camera) or publish it "
                          "to a WHIP endpoint (--whip). With --url: stream the frames to "
                          "ws://HOST:PORT/v1/stream (fusion-ray serve) instead. A video file plays at its real rate "
                          "as a fake camera. Prints fps, latency and drops.")
    live.add_argument("--url", help="ws://HOST:PORT/v1/stream (default: run locally, with the engine options)")
    who = live.add_mutually_exclusive_group(required=True)
    who.add_argument("--source", type=Path, help="source face photo (with --url: registered via POST /v1/sources)")
    who.add_argument("--source-id", help="with --url: a source already registered")
    feed = live.add_mutually_exclusive_group(required=True)
    feed.add_argument("--camera", type=int, help="camera index (OpenCV)")
    feed.add_argument("--input", type=Path, help="video file played at its frame rate as a camera")
    live.add_argument("--fps", type=float, help="send rate (default: the video's rate; 30 for a camera)")
    live.add_argument("--seconds", type=float, help="stop after this long (default: the video's end; camera: 10)")
    add_output_arguments(live)
    _stream_options(live)
    _local_options(live)
    add_engine_arguments(live)
    live.set_defaults(run=run_live)


def register_bench(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``fusion-ray bench live`` (``sub``: the benchmarks' subcommands)."""
    bench = sub.add_parser("live", help="N simulated live streams vs a Deep-Live-Cam-style loop",
                           description="Play a 640x360 30 fps clip as N cameras against a live endpoint (--url, or an "
                           "in-process host with the engine options), with a Deep-Live-Cam-style baseline on the "
                           "same clip and models; report latency percentiles, fps per stream, drops and levels.")
    bench.add_argument("--url", help="ws://HOST:PORT/v1/stream (default: start the in-process host)")
    bench.add_argument("--direct", action="store_true",
                       help="without --url: run the streams in this process with no socket, as `fusion-ray live` "
                       "without --url does (BMP frames in), instead of the in-process host's WebSocket")
    bench.add_argument("--source", type=Path, required=True, help="source face photo")
    bench.add_argument("--clip-face", type=Path, help="face photo the clip is made of (default: --source)")
    bench.add_argument("--streams", default="1,2,4,8", help="comma-separated stream counts (default 1,2,4,8)")
    bench.add_argument("--seconds", type=float, default=10.0, help="seconds per run (default 10)")
    bench.add_argument("--fps", type=float, default=30.0, help="frames per second per stream (default 30)")
    bench.add_argument("--no-baseline", action="store_true", help="skip the Deep-Live-Cam-style loop")
    _local_options(bench)
    bench.add_argument("--json", type=Path, help="write the result as JSON")
    bench.add_argument("--markdown", type=Path, help="write the result as a Markdown table")
    _stream_options(bench)
    add_engine_arguments(bench)
    bench.set_defaults(run=run_bench)


def _stream_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("stream")
    group.add_argument("--token", help=f"API token (default: ${TOKEN_ENV})")
    group.add_argument("--faces", dest="stream_select", choices=STREAM_SELECT_MODES, default=None,
                       help="which faces to swap (default: the server's engine.selection, all unless configured)")
    group.add_argument("--index", dest="stream_index", type=int, default=None,
                       help="face index for --faces index (default: the server's)")
    group.add_argument("--deadline-ms", type=int, default=300, help="per-frame deadline (default 300)")
    group.add_argument("--quality", type=int, default=85, help="JPEG quality of results (default 85)")


def _local_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("in this process (no --url)")
    group.add_argument("--slots", type=int, default=2, help="frames processed at once (default 2)")
    group.add_argument("--stream-inflight", type=int, default=1, help="frames of one stream at once (default 1)")
    group.add_argument("--cpu-budget", type=float, default=2.0, help="CPU budget of the models' threads (default 2)")


def _start(args: argparse.Namespace, source_id: str) -> dict[str, Any]:
    start: dict[str, Any] = {"source_id": source_id, "quality": args.quality, "deadline_ms": args.deadline_ms}
    # no selection given: none sent, and the server takes its own (engine.selection)
    start.update({key: value for key, value in (("select", args.stream_select), ("face_index", args.stream_index))
                  if value is not None})
    if getattr(args, "enhance", None) is not None:
        start["enhance"] = True
    # FaceFusion's options given on the command line travel in the start message (a server checks
    # them against its models and caps; the ladder drops the costly ones first).
    start.update({name: value for name in FACEFUSION_OPTIONS if (value := getattr(args, name, None)) is not None})
    token = args.token or os.environ.get(TOKEN_ENV)
    if token:
        start["token"] = token
    return start


def _source_id(args: argparse.Namespace, url: str) -> str:
    if getattr(args, "source_id", None):
        return str(args.source_id)
    path: Path = args.source
    if not path.is_file():
        raise InputError(f"source image not found: {path}")
    return register_source(http_base(url), path.read_bytes(), path.name, args.token or os.environ.get(TOKEN_ENV))


def _print_report(report: ClientReport, outputs: Outputs) -> int:
    """The stream's summary (and the outputs': file written, virtual camera, WHIP); exit code 0."""
    summary = report.summary()
    lat = summary["latency_ms"]
    drops = ", ".join(f"{k} {v}" for k, v in summary["dropped"].items() if v) or "none"
    print(f"sent {summary['sent']} frames, received {summary['received']} in {summary['duration_s']} s "
          f"({summary['fps']} fps)")
    print(f"latency (send to receive) p50 {lat['p50']} ms, p95 {lat['p95']} ms, p99 {lat['p99']} ms")
    print(f"dropped: {drops}; highest degradation level {summary['max_level']}")
    if report.ready.get("stand_in_models"):
        print(f"note: the server used STAND-IN models ({', '.join(report.ready['stand_in_models'])}): not a real swap")
    for line in outputs.summary():
        print(line)
    if outputs.writer is not None:
        print(f"wrote {outputs.writer.path}")
    return 0


def _seconds(args: argparse.Namespace) -> float | None:
    """--seconds, else 10 s from a camera, else until the input ends."""
    return args.seconds if args.seconds is not None else (10.0 if args.camera is not None else None)


def run_live(args: argparse.Namespace) -> int:
    check_stream_output(args.output, [("--input", args.input)] if args.input else [])
    if args.url is None:
        return _run_here(args)
    source = CaptureSource(args.camera if args.camera is not None else args.input, fps=args.fps)
    try:
        outputs = Outputs(args, source, window=False)
    except BaseException:
        source.close()
        raise
    try:
        start = _start(args, _source_id(args, args.url))
        report = asyncio.run(_with_outputs(outputs, run_stream(args.url, start, source, seconds=_seconds(args),
                                                               on_result=outputs, blocking_source=True)))
    finally:
        source.close()
        outputs.close()
    return _print_report(report, outputs)


async def _with_outputs(outputs: Outputs, stream: Coroutine[Any, Any, ClientReport]) -> ClientReport:
    """Run ``stream`` between the outputs' start and stop (the WHIP session's lifetime)."""
    try:
        await outputs.start()
        return await stream
    finally:
        stream.close()  # never awaited when the start failed: no warning
        await outputs.stop()


def _run_here(args: argparse.Namespace) -> int:
    """The stream policy in this process (no server): the same hub and stream as ``fusion-ray serve``."""
    from fusion_ray.imageio import read_image
    from fusion_ray.live.direct import run_direct
    from fusion_ray.live.local import EngineBackend, local_hub
    from fusion_ray.live.window import UntilQuit, window_problem
    from fusion_ray.runners.inline import Engine

    if args.source_id:
        raise InputError("--source-id names a source on a server (--url); here give the photo with --source")
    show = wants_window(args)
    problem = window_problem() if show else None
    if problem:
        raise InputError(f"cannot show a window: {problem}; write the stream to a file with --output out.mp4, "
                         "or send it to --virtual-camera or --whip URL")
    if not args.source.is_file():
        raise InputError(f"source image not found: {args.source}")
    source_image = read_image(args.source).frame
    capture = CaptureSource(args.camera if args.camera is not None else args.input, fps=args.fps, fmt="bmp")
    try:
        outputs = Outputs(args, capture, window=show)  # a missing virtual camera fails here, before the models
    except BaseException:
        capture.close()
        raise
    try:
        engine = Engine.load(engine_config_from_args(args), cpu_budget=args.cpu_budget)
        backend = EngineBackend(engine)
        start = _start(args, backend.add_source(source_image, str(args.source)))
        hub = local_hub(backend, slots=args.slots, stream_inflight=args.stream_inflight)
        print(f"running locally ({engine.cfg.swap.swapper} swapper, {args.slots} slots, no server); "
              f"{'q in the window stops' if outputs.window else 'Ctrl-C stops'}", file=sys.stderr)
        quit_requested = outputs.quit_requested
        played = UntilQuit(capture, quit_requested) if quit_requested is not None else capture
        report = asyncio.run(_with_outputs(outputs, run_direct(hub, start, played, seconds=_seconds(args),
                                                               blocking_source=True, on_result=outputs)))
    finally:
        capture.close()
        outputs.close()
    return _print_report(report, outputs)


def run_bench(args: argparse.Namespace) -> int:
    from fusion_ray.bench.live import make_clip, render_markdown, run_live_bench
    from fusion_ray.imageio import read_image
    from fusion_ray.live.config import LiveConfig
    from fusion_ray.live.hub import LiveHub
    from fusion_ray.live.local import EngineBackend, local_hub
    from fusion_ray.live.localhost import LocalServer
    from fusion_ray.live.protocol import StartMessage
    from fusion_ray.runners.inline import Engine

    if not args.swapper:
        args.swapper = "classic"
    counts = [int(x) for x in args.streams.split(",") if x.strip()]
    engine = Engine.load(engine_config_from_args(args), cpu_budget=args.cpu_budget)
    backend = EngineBackend(engine)
    face = read_image(args.clip_face or args.source).frame
    with tempfile.TemporaryDirectory() as tmp:
        frames = make_clip(face, Path(tmp) / "clip.mp4")
    baseline = None
    if not args.no_baseline:
        source_id = backend.add_source(read_image(args.source).frame)
        processor = asyncio.run(backend.open(StartMessage(source_id=source_id)))
        baseline = processor.process_sync
    server = None
    url = args.url
    hub = None
    if url is None and args.direct:
        hub = local_hub(backend, slots=args.slots, stream_inflight=args.stream_inflight, streams=max(counts + [1]))
        print(f"in this process, no socket ({engine.cfg.swap.swapper} swapper)")
    elif url is None:
        cfg = LiveConfig(slots=args.slots, stream_inflight=args.stream_inflight, max_streams=max(counts + [8]))
        server = LocalServer(LiveHub(cfg, backend), backend).start()
        url = server.ws_url
        print(f"in-process host at {server.http_url} ({engine.cfg.swap.swapper} swapper)")
    try:
        source_id = backend.add_source(read_image(args.source).frame) if hub is not None else _source_id(args, url or "")
        start = _start(args, source_id)
        result = run_live_bench(url or "", start, frames, stream_counts=counts, seconds=args.seconds, fps=args.fps,
                                deadline_ms=args.deadline_ms, baseline=baseline, hub=hub,
                                progress=lambda what: print(f"running: {what}", flush=True))
    finally:
        if server is not None:
            server.stop()
    result["stand_in_models"] = engine.stand_in_models
    text = render_markdown(result)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.markdown:
        args.markdown.write_text(text)
    return 0
