"""Tracking benchmark: per-frame SCRFD against the tracker with crop re-detection.

Clips with known motion (:mod:`fusion_ray.bench.tracking_clips`) from the shared photos, the
real SCRFD 2.5g (one thread, CPU). For each clip and method:

- ``det_ms``: detector CPU ms per frame (process time of the detection calls; for the
  tracker, of its whole per-frame step: policy, crops, detections, online linking);
- ``jitter``: mean frame-to-frame second difference of the 5 landmarks over the true eye
  distance (the true motion's own value is ``truth_jitter``);
- ``error``: mean distance of the 5 landmarks to the true ones, in true eye distances;
- ``missed_visible``: visible faces left without landmarks; ``missed_hidden``: faces under a
  black box for at most G frames left without landmarks;
- ``id_switches``: changes of track id along a true face (tracker only).

Methods: ``per_frame`` (full detection on every frame, no tracking), ``tracked`` (the video
job's path: crop re-detection, then :func:`track_segment` with the centred window) and
``online`` (the live path: the same detections, One Euro, held faces).

Run: ``python -m fusion_ray.bench.tracking [--sweep] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.bench.machine import machine_info
from fusion_ray.bench.runner import shared_assets_dir
from fusion_ray.bench.tracking_clips import (
    Clip,
    crossing_clip,
    group_clip,
    motion_clip,
    photo_sprite,
    still_clip,
)
from fusion_ray.config import DetectorConfig, RuntimeConfig, TrackingConfig
from fusion_ray.core.tracking.matching import assign
from fusion_ray.core.tracking.redetect import TrackingDetector, merge
from fusion_ray.core.tracking.tracks import FrameFaces, Tracker, track_segment
from fusion_ray.errors import InputError
from fusion_ray.models.detector import ScrfdDetector
from fusion_ray.models.registry import get_spec
from fusion_ray.models.session import create_session

FPS = 30.0
MATCH_GATE = 0.5
"""An output face is taken for a true face within half an eye distance (mean of the 5 points)."""


@dataclass
class Result:
    """One method on one clip."""

    clip: str
    method: str
    settings: dict[str, Any]
    frames: int
    det_ms: float
    full: int = 0
    roi: int = 0
    jitter: float = 0.0
    truth_jitter: float = 0.0
    error: float = 0.0
    missed_visible: int = 0
    visible: int = 0
    missed_hidden: int = 0
    hidden: int = 0
    false_faces: int = 0
    id_switches: int | None = None
    tracks: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def load_detector(model_path: Path) -> ScrfdDetector:
    session, _ = create_session(model_path, RuntimeConfig(providers=["cpu"], intra_op_threads=1), cpu_budget=1)
    return ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig(), model_path=model_path)


def build_clips(detector: ScrfdDetector, images_dir: Path) -> list[Clip]:
    sprites = {name: photo_sprite(images_dir / f"{name}.jpg", detector)  # the group photo's third face
               for name in ("obama", "biden", "obama_and_biden")}
    return [motion_clip(sprites["obama"]), crossing_clip(sprites["obama"], sprites["biden"]),
            still_clip(sprites["biden"]), group_clip(sprites["obama"], sprites["biden"], sprites["obama_and_biden"])]


def run_per_frame(detector: ScrfdDetector, clip: Clip) -> tuple[list[FrameFaces], float]:
    outputs, cpu = [], 0.0
    for frame in clip.frames:
        start = time.process_time()
        outputs.append(FrameFaces.from_faces(detector.detect(frame)))
        cpu += time.process_time() - start
    return outputs, cpu


def run_tracker(detector: ScrfdDetector, clip: Clip, cfg: TrackingConfig) -> tuple[
        list[FrameFaces], list[FrameFaces], list[FrameFaces], TrackingDetector, float]:
    """The tracking detector's detections (with and without backfill), online outputs, CPU seconds."""
    tracking = TrackingDetector(detector, cfg, FPS)
    raw: list[FrameFaces] = []
    causal: list[FrameFaces] = []
    online: list[FrameFaces] = []
    cpu = 0.0
    for f, frame in enumerate(clip.frames):
        start = time.process_time()
        step = tracking.step(f, frame)
        cpu += time.process_time() - start
        for idx, faces in step.backfill.items():
            raw[idx] = merge(raw[idx], faces)
        raw.append(step.raw)
        causal.append(step.raw)
        online.append(step.online)
    start = time.process_time()
    for idx, faces in tracking.finish().items():
        raw[idx] = merge(raw[idx], faces)
    cpu += time.process_time() - start
    return raw, causal, online, tracking, cpu


def match_truth(clip: Clip, outputs: Sequence[FrameFaces]) -> list[dict[int, int]]:
    """Per frame: true face index -> output row, within :data:`MATCH_GATE`."""
    matches = []
    for f, faces in enumerate(outputs):
        truth = clip.truth[f]
        eye = np.linalg.norm(truth[:, 1] - truth[:, 0], axis=1)
        if len(faces):
            dist = np.linalg.norm(truth[:, None] - faces.landmarks_5[None].astype(np.float64), axis=-1).mean(-1)
            cost = np.where(dist / eye[:, None] <= MATCH_GATE, dist / eye[:, None], np.inf)
            matches.append(dict(assign(cost)))
        else:
            matches.append({})
    return matches


def evaluate(clip: Clip, outputs: Sequence[FrameFaces], result: Result, max_gap: int) -> Result:
    """Fill ``result``'s quality fields from ``outputs`` against the clip's truth."""
    matches = match_truth(clip, outputs)
    n, k = clip.visible.shape
    errors, jitters, truth_jitters = [], [], []
    within = _hidden_within(clip.hidden, max_gap)
    switches, track_ids = 0, set()
    for j in range(k):
        last_id = None
        for f in range(n):
            row = matches[f].get(j)
            eye = float(np.linalg.norm(clip.truth[f, j, 1] - clip.truth[f, j, 0]))
            result.visible += int(clip.visible[f, j])
            result.hidden += int(within[f, j])
            if row is None:
                result.missed_visible += int(clip.visible[f, j])
                result.missed_hidden += int(within[f, j])
                continue
            points = outputs[f].landmarks_5[row].astype(np.float64)
            if clip.visible[f, j]:
                errors.append(np.linalg.norm(points - clip.truth[f, j], axis=-1).mean() / eye)
            tid = int(outputs[f].track_id[row])
            if tid >= 0:
                switches += int(last_id is not None and tid != last_id)
                last_id = tid
                track_ids.add(tid)
            if 0 < f < n - 1 and all(clip.visible[g, j] and j in matches[g] for g in (f - 1, f, f + 1)):
                trio = [outputs[g].landmarks_5[matches[g][j]].astype(np.float64) for g in (f - 1, f, f + 1)]
                jitters.append(np.linalg.norm(trio[2] - 2 * trio[1] + trio[0], axis=-1).mean() / eye)
                t = clip.truth[f - 1:f + 2, j]
                truth_jitters.append(np.linalg.norm(t[2] - 2 * t[1] + t[0], axis=-1).mean() / eye)
    result.false_faces = sum(len(o) - len(m) for o, m in zip(outputs, matches, strict=True))
    result.error = float(np.mean(errors)) if errors else float("nan")
    result.jitter = float(np.mean(jitters)) if jitters else float("nan")
    result.truth_jitter = float(np.mean(truth_jitters)) if truth_jitters else float("nan")
    if track_ids:
        result.id_switches, result.tracks = switches, len({int(t) for o in outputs for t in o.track_id})
    return result


def _hidden_within(hidden: np.ndarray, max_gap: int) -> np.ndarray:
    """Hidden frames that belong to runs of at most ``max_gap`` frames."""
    out = np.zeros_like(hidden)
    for j in range(hidden.shape[1]):
        f = 0
        while f < len(hidden):
            if hidden[f, j]:
                end = f
                while end < len(hidden) and hidden[end, j]:
                    end += 1
                out[f:end, j] = end - f <= max_gap
                f = end
            else:
                f += 1
    return out


def bench_settings(cfg: TrackingConfig) -> dict[str, Any]:
    return {"N": cfg.full_every, "canvas": cfg.roi_canvas, "growth": cfg.roi_growth, "hold": cfg.roi_hold,
            "G": cfg.max_gap,
            "lookback": cfg.lookback, "keep_lost": cfg.keep_lost}


def run_tracked_methods(detector: ScrfdDetector, clip: Clip, cfg: TrackingConfig,
                        smoothing_variants: Sequence[TrackingConfig] = ()) -> list[Result]:
    """The tracker's offline and online results for one setting (and smoothing variants of it)."""
    raw, causal, online, tracking, cpu = run_tracker(detector, clip, cfg)
    frame_hw = (clip.frames[0].shape[0], clip.frames[0].shape[1])
    base: dict[str, Any] = {"frames": len(clip.frames), "det_ms": 1000 * cpu / len(clip.frames),
            "full": tracking.counters.full, "roi": tracking.counters.roi}
    start = time.process_time()
    offline = track_segment(raw, cfg, fps=FPS, frame_hw=frame_hw)
    extra = {"track_segment_ms": 1000 * (time.process_time() - start) / len(clip.frames),
             "reasons": dict(tracking.counters.reasons)}
    results = [evaluate(clip, offline, Result(clip.name, "tracked", {**bench_settings(cfg), "smoothing": "window"},
                                              extra=extra, **base), cfg.max_gap),
               evaluate(clip, online, Result(clip.name, "online", {**bench_settings(cfg), "smoothing": "one_euro"},
                                             **base), cfg.max_gap)]
    for variant in smoothing_variants:
        smoothing = {"smoothing": variant.smoothing, "radius": variant.window_radius, "order": variant.window_order,
                     "min_cutoff": variant.one_euro_min_cutoff, "beta": variant.one_euro_beta}
        if variant.smoothing == "one_euro":
            tracker = Tracker(variant, FPS)
            outputs = [tracker.update(f, r, frame_hw) for f, r in enumerate(causal)]
            method = "online"
        else:
            outputs, method = track_segment(raw, variant, fps=FPS, frame_hw=frame_hw), "tracked"
        results.append(evaluate(clip, outputs, Result(clip.name, method, {**bench_settings(cfg), **smoothing},
                                                      **base), cfg.max_gap))
    return results


def smoothing_variants(cfg: TrackingConfig) -> list[TrackingConfig]:
    variants = [cfg.model_copy(update={"smoothing": "off"})]
    variants += [cfg.model_copy(update={"smoothing": "window", "window_radius": r, "window_order": o})
                 for r, o in ((1, 1), (3, 1), (4, 1), (3, 2), (5, 2))]
    variants += [cfg.model_copy(update={"smoothing": "one_euro", "one_euro_min_cutoff": c, "one_euro_beta": b})
                 for c, b in ((0.5, 5.0), (1.0, 2.0), (1.0, 5.0), (1.0, 20.0), (2.0, 10.0))]
    return variants


def run(model_path: Path, images_dir: Path, *, sweep: bool) -> dict[str, Any]:
    """Every clip: per-frame detection, the tracker at the defaults, and (``sweep``) other settings."""
    detector = load_detector(model_path)
    clips = build_clips(detector, images_dir)
    default = TrackingConfig()
    settings = [default]
    if sweep:
        settings += [default.model_copy(update=u) for u in (
            {"full_every": 5}, {"full_every": 15}, {"full_every": 20}, {"roi_canvas": 160}, {"roi_canvas": 224},
            {"roi_growth": 1.3}, {"roi_growth": 2.0}, {"roi_canvas": 160, "roi_growth": 2.0}, {"roi_hold": 0.0},
            {"max_gap": 1}, {"lookback": False}, {"keep_lost": 10})]
    results: list[Result] = []
    for clip in clips:
        outputs, cpu = run_per_frame(detector, clip)
        per_frame = Result(clip.name, "per_frame", {}, len(clip.frames), 1000 * cpu / len(clip.frames),
                           full=len(clip.frames))
        results.append(evaluate(clip, outputs, per_frame, default.max_gap))
        for i, cfg in enumerate(settings):
            results += run_tracked_methods(detector, clip, cfg, smoothing_variants(cfg) if sweep and i == 0 else ())
    return {"machine": machine_info(), "clips": {c.name: c.description for c in clips},
            "defaults": default.model_dump(), "results": [asdict(r) for r in results]}


def _key(r: dict[str, Any]) -> str:
    s = r["settings"]
    if not s:
        return "per_frame"
    smooth = s["smoothing"]
    if "radius" in s:
        smooth += f" r={s['radius']} o={s['order']}" if smooth == "window" else ""
        smooth += f" fc={s['min_cutoff']} b={s['beta']}" if smooth == "one_euro" else ""
    return (f"{r['method']} N={s['N']} c={s['canvas']} g={s['growth']} h={s['hold']} G={s['G']} K={s['keep_lost']}"
            f"{'' if s['lookback'] else ' no-lookback'} {smooth}")


def summarise(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per method and setting over all clips (frame-weighted means, summed counts)."""
    rows: dict[str, dict[str, Any]] = {}
    for r in results:
        row = rows.setdefault(_key(r), {"key": _key(r), "frames": 0, "det_ms": 0.0, "jitter": 0.0, "error": 0.0,
                                        "missed_visible": 0, "visible": 0, "missed_hidden": 0, "hidden": 0,
                                        "false_faces": 0, "id_switches": 0, "full": 0, "roi": 0})
        for name in ("det_ms", "jitter", "error"):
            row[name] += r[name] * r["frames"]
        for name in ("frames", "missed_visible", "visible", "missed_hidden", "hidden", "false_faces", "full", "roi"):
            row[name] += r[name]
        row["id_switches"] += r["id_switches"] or 0
    base = rows["per_frame"]
    for row in rows.values():
        for name in ("det_ms", "jitter", "error"):
            row[name] /= row["frames"]
    for row in rows.values():
        row["det_pct"] = 100 * row["det_ms"] / base["det_ms"]
        row["jitter_pct"] = 100 * row["jitter"] / base["jitter"]
    return list(rows.values())


def to_markdown(report: dict[str, Any]) -> str:
    lines = ["# Tracking benchmark", "", f"Machine: {report['machine'].get('cpu_model', '?')}, SCRFD 2.5g on CPU, 1 thread.",
             "", "Clips:"]
    lines += [f"- `{name}`: {text}" for name, text in report["clips"].items()]
    header = ("| method and setting | det ms/frame | % of per-frame | full / crops | jitter | % of per-frame | "
              "error | missed visible | missed hidden <= G | false | id switches |")
    lines += ["", "## All clips", "", header, "|" + "---|" * 11]
    for row in summarise(report["results"]):
        lines.append(f"| {row['key']} | {row['det_ms']:.1f} | {row['det_pct']:.0f}% | {row['full']} / {row['roi']} | "
                     f"{row['jitter']:.4f} | {row['jitter_pct']:.0f}% | {row['error']:.4f} | "
                     f"{row['missed_visible']}/{row['visible']} | {row['missed_hidden']}/{row['hidden']} | "
                     f"{row['false_faces']} | {row['id_switches']} |")
    lines += ["", "## Per clip", "", "| clip | method and setting | det ms/frame | full / crops | jitter (truth) | "
              "error | missed visible | missed hidden | id switches / tracks |", "|" + "---|" * 9]
    for r in report["results"]:
        ids = "" if r["id_switches"] is None else f"{r['id_switches']} / {r['tracks']}"
        lines.append(f"| {r['clip']} | {_key(r)} | {r['det_ms']:.1f} | {r['full']} / {r['roi']} | "
                     f"{r['jitter']:.4f} ({r['truth_jitter']:.4f}) | {r['error']:.4f} | "
                     f"{r['missed_visible']}/{r['visible']} | {r['missed_hidden']}/{r['hidden']} | {ids} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusion_ray.bench.tracking", description=__doc__.split("\n")[0])
    parser.add_argument("--assets", type=Path, default=None, help="shared assets (images/, models/scrfd_2.5g.onnx)")
    parser.add_argument("--out", type=Path, default=Path("runs/tracking_bench"),
                        help="folder for report.json and report.md")
    parser.add_argument("--sweep", action="store_true", help="also other N, canvas, growth, G and smoothing settings")
    args = parser.parse_args(argv)
    assets = args.assets or shared_assets_dir()
    if assets is None or not (assets / "models" / "scrfd_2.5g.onnx").is_file():
        raise InputError("the shared assets (images/ and models/scrfd_2.5g.onnx) were not found; pass --assets")
    report = run(assets / "models" / "scrfd_2.5g.onnx", assets / "images", sweep=args.sweep)
    report["command"] = "python -m fusion_ray.bench.tracking " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    markdown = to_markdown(report)
    (args.out / "report.md").write_text(markdown)
    sys.stdout.write(markdown)  # the entry point of a benchmark script: its report is its output
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
