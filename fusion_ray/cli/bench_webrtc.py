"""``fusion-ray bench webrtc``: N WHIP streams through an endpoint (default: the plain echo server)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from fusion_ray.errors import ConfigError

TOKEN_ENV = "FUSION_RAY_WHIP_TOKEN"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "webrtc", help="N WebRTC (WHIP) streams through an endpoint: fps and glass-to-glass latency",
        description="Play a 640x360 clip as N cameras through a WHIP endpoint (--url; default: the plain aiortc "
                    "echo server, started in a child process: the transport's floor), each on one sendrecv "
                    "video transceiver, with a sequence number drawn into every frame; report fps per stream, "
                    "aggregate fps and p50/p95/p99 latency from send to the returned frame. "
                    "--echo-server only serves the echo endpoint.")
    parser.add_argument("--url", help="WHIP endpoint (default: start the echo server)")
    parser.add_argument("--token", help=f"bearer token (default: ${TOKEN_ENV})")
    parser.add_argument("--streams", default="1", help="comma-separated stream counts (default 1)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per run (default 10)")
    parser.add_argument("--fps", type=float, default=30.0, help="frames per second per stream (default 30)")
    parser.add_argument("--codec", choices=["h264", "vp8"], default="h264", help="video codec (default h264)")
    parser.add_argument("--separate", action="store_true",
                        help="a sendonly and a recvonly transceiver instead of one sendrecv")
    parser.add_argument("--face", type=Path, help="face photo of the clip (default: a generated cartoon face)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    serve = parser.add_argument_group("echo server only")
    serve.add_argument("--echo-server", action="store_true", help="serve the echo endpoint until interrupted")
    serve.add_argument("--host", default="127.0.0.1", help="echo server address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8890, help="echo server port (default 8890; 0: a free one)")
    parser.set_defaults(run=run)


def _counts(text: str) -> list[int]:
    try:
        counts = [int(c) for c in text.split(",") if c.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ConfigError(f"--streams expects positive integers separated by commas, got {text!r}")
    return counts


def _serve(args: argparse.Namespace, token: str | None) -> int:
    from fusion_ray.bench.webrtc_echo import EchoServer

    server = EchoServer(host=args.host, port=args.port, token=token)
    print(f"echo server: {server.url}", flush=True)
    asyncio.run(server.serve())
    return 0


def run(args: argparse.Namespace) -> int:
    from fusion_ray.bench.webrtc import (
        CLIP_SIZE,
        EchoProcess,
        make_frames,
        render_markdown,
        run_webrtc_bench,
    )

    token = args.token or os.environ.get(TOKEN_ENV)
    if args.echo_server:
        return _serve(args, token)
    counts = _counts(args.streams)
    face = None
    if args.face is not None:
        from fusion_ray.imageio import read_image

        face = read_image(args.face).frame
    frames = make_frames(face, fps=args.fps)
    echo = EchoProcess(token) if args.url is None else None
    url = args.url or (echo.url if echo else "")
    try:
        results = run_webrtc_bench(url, token, frames, stream_counts=counts, seconds=args.seconds, fps=args.fps,
                                   codec=args.codec, separate=args.separate)
    finally:
        if echo is not None:
            echo.stop()
    print(render_markdown(results, url if args.url else f"the plain aiortc echo server ({url})", CLIP_SIZE))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0
