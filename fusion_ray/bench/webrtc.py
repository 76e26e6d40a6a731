"""N concurrent WHIP streams through an endpoint: fps per stream, aggregate fps, glass-to-glass latency.

Each stream plays the same clip as a camera at ``fps`` through :func:`~fusion_ray.live.whip_client.publish`
(one ``sendrecv`` video transceiver, as a browser makes) and reads what comes back by the stamps
drawn into the frames. Against :class:`~fusion_ray.bench.webrtc_echo.EchoServer` (in its own process,
:class:`EchoProcess`) this is the transport's floor: decode, re-encode, nothing else; against a swap
service the difference is the service's own cost.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.bench.live import latency_percentiles
from fusion_ray.errors import FusionRayError
from fusion_ray.live.whip_client import PublishReport, publish
from fusion_ray.video.decode import decode_all
from fusion_ray.video.synthetic import make_test_video

CLIP_SIZE = (640, 360)


def make_frames(face_image: np.ndarray | None = None, n_frames: int = 90, size_wh: tuple[int, int] = CLIP_SIZE,
                fps: float = 30.0) -> list[np.ndarray]:
    """A clip of a face moving over a background, decoded (a generated cartoon face without ``face_image``)."""
    with tempfile.TemporaryDirectory() as tmp:
        written = make_test_video(Path(tmp) / "clip.mp4", face_image=face_image, n_frames=n_frames,
                                  fps=Fraction(fps).limit_denominator(1001), size_wh=size_wh, audio=False)
        return [decoded.frame for decoded in decode_all(written)]


async def run_streams(url: str, token: str | None, frames: Sequence[np.ndarray], *, streams: int, seconds: float,
                      fps: float = 30.0, codec: str = "h264", separate: bool = False) -> dict[str, Any]:
    """``streams`` concurrent publishers of ``frames`` for ``seconds``; per-stream and pooled results."""
    reports: list[PublishReport] = await asyncio.gather(*(
        publish(url, token, itertools.cycle(frames), fps=fps, codec=codec, separate=separate, seconds=seconds)
        for _ in range(streams)))
    latencies = [ms for report in reports for ms in report.latencies_ms]
    return {"streams": streams, "codec": reports[0].codec, "fps_target": fps, "seconds": seconds,
            "fps_per_stream": [round(r.fps, 2) for r in reports],
            "fps_aggregate": round(sum(r.fps for r in reports), 2),
            "latency_ms": latency_percentiles(latencies), "sent": sum(r.sent for r in reports),
            "received": sum(r.received for r in reports),
            "order_violations": sum(r.order_violations for r in reports),
            "unreadable": sum(r.unreadable for r in reports)}


def run_webrtc_bench(url: str, token: str | None, frames: Sequence[np.ndarray], *, stream_counts: Sequence[int],
                     seconds: float, fps: float = 30.0, codec: str = "h264", separate: bool = False) -> list[dict[str, Any]]:
    """One :func:`run_streams` per stream count, in turn."""
    return [asyncio.run(run_streams(url, token, frames, streams=n, seconds=seconds, fps=fps, codec=codec,
                                    separate=separate)) for n in stream_counts]


def render_markdown(results: Sequence[dict[str, Any]], url: str, size_wh: tuple[int, int]) -> str:
    lines = [f"WebRTC (WHIP) streams through {url}, {size_wh[0]}x{size_wh[1]}, glass-to-glass latency "
             "from send to the returned frame", "",
             "| streams | codec | fps per stream | aggregate fps | p50 ms | p95 ms | p99 ms | sent | received | "
             "out of order |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lat = r["latency_ms"]
        lines.append(f"| {r['streams']} | {r['codec']} | {', '.join(f'{v:.1f}' for v in r['fps_per_stream'])} | "
                     f"{r['fps_aggregate']:.1f} | {lat['p50']} | {lat['p95']} | {lat['p99']} | {r['sent']} | "
                     f"{r['received']} | {r['order_violations']} |")
    return "\n".join(lines)


class EchoProcess:
    """The echo server in a child process (``fusion-ray bench webrtc --echo-server``), so its
    encoders do not share this process's interpreter with the publishers."""

    def __init__(self, token: str | None = None, timeout_s: float = 30.0) -> None:
        command = [sys.executable, "-m", "fusion_ray.cli", "bench", "webrtc", "--echo-server", "--port", "0"]
        if token:
            command += ["--token", token]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        first = self.process.stdout.readline().strip()  # "echo server: URL"
        if not first.startswith("echo server: "):
            self.stop()
            raise FusionRayError(f"the echo server did not start (it said {first!r})")
        self.url = first.removeprefix("echo server: ")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> EchoProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
