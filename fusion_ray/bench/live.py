"""``fusion-ray bench live``: N simulated camera streams against a live endpoint, next to a Deep-Live-Cam-style loop.

- **Streams.** N clients each play the same 640x360 clip at 30 fps (pre-encoded JPEG, so the
  clients cost little) over loopback to any ``ws://.../v1/stream`` (the Serve ingress, or the
  in-process host :class:`~fusion_ray.live.localhost.LocalServer`). Per N: glass-to-glass
  latency (client send to client receive) p50/p95/p99, delivered fps per stream, drops by
  reason, the degradation level over time (from ``stats`` events).
- **Baseline.** One process, frame by frame, as Deep-Live-Cam runs: a capture thread feeds a
  drop-oldest queue of 2 at the clip's rate, one processing thread detects every
  ``round(fps * 0.08)`` frames and reuses the last face in between, on raw frames (no JPEG,
  no network). Latency is capture to processed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.live.backend import FramePlan, Processed
from fusion_ray.live.client import ClientReport, run_stream
from fusion_ray.live.direct import run_direct
from fusion_ray.live.frame_sources import JpegClip, encode_frame
from fusion_ray.live.hub import LiveHub
from fusion_ray.live.stats import percentile
from fusion_ray.video.decode import decode_all
from fusion_ray.video.synthetic import make_test_video

CLIP_SIZE = (640, 360)
CLIP_FPS = 30.0
DLC_DETECT_INTERVAL_S = 0.08
DLC_QUEUE = 2

ProcessSync = Callable[[np.ndarray, FramePlan], Processed]


def make_clip(face_image: np.ndarray, path: Path, n_frames: int = 90) -> list[np.ndarray]:
    """A 640x360, 30 fps clip of ``face_image`` moving over a background (decoded frames)."""
    written = make_test_video(path, face_image=face_image, n_frames=n_frames, fps=Fraction(30), size_wh=CLIP_SIZE,
                              audio=False)
    return [decoded.frame for decoded in decode_all(written)]


def latency_percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p95 and p99 of latencies in ms, rounded to 0.1 (None when there are none)."""
    return {f"p{q}": None if (v := percentile(values, q)) is None else round(v, 1) for q in (50, 95, 99)}


@dataclass
class BaselineResult:
    frames_captured: int = 0
    frames_processed: int = 0
    dropped_oldest: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    duration_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {"fps": round(self.frames_processed / self.duration_s, 2) if self.duration_s else 0.0,
                "captured": self.frames_captured, "processed": self.frames_processed,
                "dropped_oldest": self.dropped_oldest, "latency_ms": latency_percentiles(self.latencies_ms)}


def run_baseline(process: ProcessSync, frames: Sequence[np.ndarray], seconds: float,
                 fps: float = CLIP_FPS) -> BaselineResult:
    """The Deep-Live-Cam-style loop (see the module docstring) for ``seconds``."""
    result = BaselineResult()
    queue: deque[tuple[float, int, np.ndarray]] = deque()
    lock = threading.Condition()
    stop = threading.Event()
    detect_every = max(1, round(fps * DLC_DETECT_INTERVAL_S))

    def capture() -> None:
        start = time.perf_counter()
        for index in range(int(seconds * fps)):
            delay = start + index / fps - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            with lock:
                if len(queue) >= DLC_QUEUE:
                    queue.popleft()
                    result.dropped_oldest += 1
                queue.append((time.perf_counter(), index, frames[index % len(frames)]))
                result.frames_captured += 1
                lock.notify()
        stop.set()
        with lock:
            lock.notify()

    def processing() -> None:
        landmarks: np.ndarray | None = None
        count = 0
        while True:
            with lock:
                while not queue and not stop.is_set():
                    lock.wait(0.1)
                if not queue:
                    return
                captured, index, frame = queue.popleft()
            reuse = landmarks is not None and len(landmarks) > 0 and count % detect_every != 0
            plan = FramePlan(seq=index, level=0, enhance=False, landmarks=landmarks if reuse else None)
            out = process(frame, plan)
            if not reuse:
                landmarks = out.landmarks
            count += 1
            result.frames_processed += 1
            result.latencies_ms.append((time.perf_counter() - captured) * 1000.0)

    started = time.perf_counter()
    threads = [threading.Thread(target=capture), threading.Thread(target=processing)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.duration_s = time.perf_counter() - started
    return result


async def _streams(url: str, start: dict[str, Any], jpegs: list[bytes], n: int, seconds: float,
                   fps: float, hub: LiveHub | None = None) -> list[ClientReport]:
    async def one(i: int) -> ClientReport:
        await asyncio.sleep(i * 0.5 / max(1, n) / fps)  # cameras are not frame-synchronised
        if hub is not None:
            return await run_direct(hub, start, JpegClip(jpegs, fps), seconds=seconds)
        return await run_stream(url, start, JpegClip(jpegs, fps), seconds=seconds)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


def summarise_streams(n: int, reports: Sequence[ClientReport], deadline_ms: float) -> dict[str, Any]:
    """One row of the live benchmark's result: latency, rates, fairness, drops, levels."""
    latencies = [v for r in reports for v in r.latencies_ms]
    rates = [round(r.fps, 2) for r in reports]
    mean = sum(rates) / len(rates) if rates else 0.0
    dropped: dict[str, int] = {}
    for report in reports:
        for reason, count in report.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + count
    return {
        "streams": n, "latency_ms": latency_percentiles(latencies), "fps_per_stream": rates,
        "aggregate_fps": round(sum(rates), 2), "min_over_mean": round(min(rates) / mean, 3) if mean else 0.0,
        "sent": sum(r.sent for r in reports), "received": sum(r.received for r in reports), "dropped": dropped,
        "glass_to_glass_over_deadline": sum(1 for v in latencies if v > deadline_ms),
        "levels": [r.levels() for r in reports], "max_level": max((lv for r in reports for _, lv in r.levels()),
                                                                   default=0),
    }


def run_live_bench(url: str, start: dict[str, Any], frames: Sequence[np.ndarray], *, stream_counts: Sequence[int],
                   seconds: float, fps: float = CLIP_FPS, deadline_ms: float = 300.0,
                   baseline: ProcessSync | None = None, quality: int = 80,
                   progress: Callable[[str], None] | None = None, hub: LiveHub | None = None) -> dict[str, Any]:
    """The whole benchmark: the baseline (if given), then each N in turn. With ``hub`` the streams
    run in this process with no socket (``fusion-ray live`` without a server: BMP frames in)."""
    jpegs = [encode_frame(f, quality, "bmp" if hub is not None else "jpeg") for f in frames]
    result: dict[str, Any] = {"url": url if hub is None else "in-process (no socket)",
                              "clip": {"size": list(frames[0].shape[1::-1]), "fps": fps,
                                       "frames": len(frames), "jpeg_quality": quality},
                              "seconds": seconds, "deadline_ms": deadline_ms, "runs": []}
    if baseline is not None:
        if progress:
            progress("baseline (Deep-Live-Cam-style loop)")
        result["baseline"] = run_baseline(baseline, frames, seconds, fps).summary()
    for n in stream_counts:
        if progress:
            progress(f"{n} stream(s)")
        reports = asyncio.run(_streams(url, start, jpegs, n, seconds, fps, hub))
        result["runs"].append(summarise_streams(n, reports, deadline_ms))
    return result


def render_markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown table (for BENCHMARKS.md)."""
    lines = [f"Clip {result['clip']['size'][0]}x{result['clip']['size'][1]} at {result['clip']['fps']} fps, "
             f"{result['seconds']} s per run, deadline {result['deadline_ms']} ms.", ""]
    if "baseline" in result:
        b = result["baseline"]
        lines.append(f"Baseline (Deep-Live-Cam-style loop, 1 stream): {b['fps']} fps, latency p50/p95/p99 "
                     f"{b['latency_ms']['p50']}/{b['latency_ms']['p95']}/{b['latency_ms']['p99']} ms, "
                     f"{b['dropped_oldest']} frames dropped by its queue.")
        lines.append("")
    lines += ["| streams | p50 ms | p95 ms | p99 ms | fps per stream | aggregate fps | min/mean | drops | max level |",
              "|---|---|---|---|---|---|---|---|---|"]
    for run in result["runs"]:
        lat = run["latency_ms"]
        drops = ", ".join(f"{k} {v}" for k, v in run["dropped"].items() if v) or "none"
        lines.append(f"| {run['streams']} | {lat['p50']} | {lat['p95']} | {lat['p99']} | "
                     f"{', '.join(str(r) for r in run['fps_per_stream'])} | {run['aggregate_fps']} | "
                     f"{run['min_over_mean']} | {drops} | {run['max_level']} |")
    return "\n".join(lines) + "\n"
