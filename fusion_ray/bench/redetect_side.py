"""Crop re-detection before and after, side by side: the same clip through two checkouts.

``clip`` writes the three-face clip (:func:`~fusion_ray.bench.tracking_clips.group_clip`: a
face turning, one crossing behind it, one hidden twice) as ``clip.mp4`` (for ``fusion-ray
swap``) and ``clip.npz`` (frames and truth). ``track`` runs the tracking detector of whichever
``fusion_ray`` is importable on the saved clip (run this file by its path with ``PYTHONPATH``
set to a checkout, so an older checkout without this module is measured the same way) and
prints one JSON line: detector calls (every ``session.run``), crops, full detections, wall and
CPU seconds per frame, and the tracking bench's quality numbers against the truth.

Run: ``python fusion_ray/bench/redetect_side.py clip --out DIR`` then
``PYTHONPATH=CHECKOUT python fusion_ray/bench/redetect_side.py track --clip DIR/clip.npz``.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from fusion_ray.bench.runner import shared_assets_dir
from fusion_ray.bench.tracking import FPS, Result, evaluate, load_detector, run_tracker
from fusion_ray.bench.tracking_clips import Clip
from fusion_ray.config import DetectorConfig, RuntimeConfig, TrackingConfig
from fusion_ray.core.tracking.tracks import track_segment
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.registry import get_spec
from fusion_ray.models.session import create_session

CLIP_FPS = 25


def write_clip(assets: Path, out: Path, n_frames: int) -> Path:
    """The group clip at ``n_frames`` as ``out/clip.mp4`` and ``out/clip.npz``."""
    from fusion_ray.bench.tracking_clips import group_clip, photo_sprite

    detector = load_detector(assets / "models" / "scrfd_2.5g.onnx")
    sprites = [photo_sprite(assets / "images" / f"{n}.jpg", detector) for n in ("obama", "biden", "obama_and_biden")]
    clip = group_clip(sprites[0], sprites[1], sprites[2], n_frames=n_frames)
    out.mkdir(parents=True, exist_ok=True)
    h, w = clip.frames[0].shape[:2]
    writer = cv2.VideoWriter(str(out / "clip.mp4"), cv2.VideoWriter.fourcc(*"mp4v"), CLIP_FPS, (w, h))
    for frame in clip.frames:
        writer.write(frame)
    writer.release()
    np.savez_compressed(out / "clip.npz", frames=np.stack(clip.frames), truth=clip.truth, visible=clip.visible,
                        hidden=clip.hidden)
    return out / "clip.npz"


def load_clip(path: Path) -> Clip:
    data = np.load(path)
    return Clip("group", list(data["frames"]), data["truth"], data["visible"], data["hidden"], "group clip")


def detector_for(model: Path, threads: int, *, batch: bool = True) -> ScrfdDetector:
    """The real SCRFD at ``threads``; without ``batch`` (or in a checkout before batching) it
    does not know its file, so its crops go one call each."""
    session, _ = create_session(model, RuntimeConfig(providers=["cpu"], intra_op_threads=threads), cpu_budget=threads)
    if batch and "model_path" in inspect.signature(ScrfdDetector).parameters:
        return ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig(), model_path=model)
    return ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig())


def measure(clip: Clip, detector: ScrfdDetector, cfg: TrackingConfig) -> dict[str, Any]:
    """One pass of the tracking detector over ``clip``, its detector calls counted."""
    calls = [0]
    forward = ScrfdDetector.forward

    def counted(self: ScrfdDetector, blob: Any) -> list[np.ndarray]:
        calls[0] += 1
        return forward(self, blob)

    ScrfdDetector.forward = counted  # type: ignore[method-assign]
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        raw, _, _, tracking, _ = run_tracker(detector, clip, cfg)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        ScrfdDetector.forward = forward  # type: ignore[method-assign]
    n = len(clip.frames)
    frame_hw = (clip.frames[0].shape[0], clip.frames[0].shape[1])
    result = evaluate(clip, track_segment(raw, cfg, fps=FPS, frame_hw=frame_hw),
                      Result(clip.name, "tracked", {}, n, 1000 * cpu / n), cfg.max_gap)
    return {"frames": n, "calls": calls[0], "calls_per_frame": round(calls[0] / n, 3),
            "full": tracking.counters.full, "crops": tracking.counters.roi,
            "skipped": getattr(tracking.counters, "skipped", 0), "wall_ms_per_frame": round(1000 * wall / n, 2),
            "cpu_ms_per_frame": round(1000 * cpu / n, 2), "missed_visible": result.missed_visible,
            "visible": result.visible, "missed_hidden": result.missed_hidden, "hidden": result.hidden,
            "id_switches": result.id_switches, "tracks": result.tracks, "false_faces": result.false_faces,
            "error": round(result.error, 4), "jitter": round(result.jitter, 4),
            "reasons": dict(tracking.counters.reasons)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["clip", "track"])
    parser.add_argument("--assets", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("runs/redetect_side"))
    parser.add_argument("--frames", type=int, default=275)
    parser.add_argument("--clip", type=Path, default=None, help="track: the clip.npz that `clip` wrote")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--label", default="")
    parser.add_argument("--no-batch", dest="batch", action="store_false", help="track: one call per crop")
    parser.add_argument("--skip-motion", type=float, default=None,
                        help="track: tracking.roi_skip_motion (0: no skipped crops; a checkout before it: leave out)")
    args = parser.parse_args(argv)
    assets = args.assets or shared_assets_dir()
    if assets is None:
        parser.error("the shared assets were not found; pass --assets")
    if args.what == "clip":
        sys.stdout.write(f"{write_clip(assets, args.out, args.frames)}\n")
        return 0
    clip = load_clip(args.clip or args.out / "clip.npz")
    cfg = TrackingConfig() if args.skip_motion is None else TrackingConfig(roi_skip_motion=args.skip_motion)
    row = measure(clip, detector_for(assets / "models" / "scrfd_2.5g.onnx", args.threads, batch=args.batch), cfg)
    sys.stdout.write(json.dumps({"label": args.label, "threads": args.threads, **row}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
