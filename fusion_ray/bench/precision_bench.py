"""INT8 against FP32 detection: speed per call and quality, in one run.

Speed: the same input tensor (a 640x360 frame on its 640x384 canvas, the real clip's shape)
through the FP32 and INT8 sessions, alternating call by call so that both see the same load,
on one and on two intra-op threads; the median of ``runs`` calls after ``warmup``.

Quality: :func:`fusion_ray.bench.precision.compare_detections` on :func:`evaluation_frames`,
and on the crops tracking re-detects faces in (:func:`roi_quality`: square 192 and 320 canvases,
which calibration at the 640 canvases does not see).
The calibration study quantises the detector from several calibration sets (the photos alone,
their augmentations, one photo's augmentations: a user whose calibration comes from one input)
and compares each against FP32 on the same frames.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.bench.precision import compare_detections
from fusion_ray.config import DetectorConfig, RuntimeConfig
from fusion_ray.core.tracking.redetect import roi_for
from fusion_ray.models import calibration as cal
from fusion_ray.models.cpu_int8 import int8_weight_bits
from fusion_ray.models.detector import DetectorCanvases, ScrfdDetector
from fusion_ray.models.quantize import quantize_model
from fusion_ray.models.registry import get_spec
from fusion_ray.models.session import create_session
from fusion_ray.types import Frame
from fusion_ray.video import decode_all, make_test_video

EVALUATION_SEED = 7
"""Seed of the evaluation augmentations (calibration uses :class:`CalibrationRecipe`'s 0)."""


def detector(path: Path, threads: int = 1, threshold: float = 0.5) -> ScrfdDetector:
    """The SCRFD wrapper over a CPU session of ``path`` with ``threads`` intra-op threads, made
    as the engine makes its sessions."""
    session, _ = create_session(path, RuntimeConfig(providers=["cpu"], intra_op_threads=threads), cpu_budget=None)
    return ScrfdDetector(session, get_spec("scrfd_2.5g"), DetectorConfig(score_threshold=threshold))


def evaluation_frames(photos: Sequence[Frame], work: Path, *, augmented: int = 24, collages: int = 12,
                      clip_frames: int = 60) -> list[Frame]:
    """The photos, augmentations drawn with :data:`EVALUATION_SEED` (not the calibration's), and
    every 10th frame of a generated clip (H.264, decoded) of each of the first two photos
    sweeping across a background."""
    frames = list(photos)
    recipe = cal.CalibrationRecipe(augmented=augmented, collages=collages, seed=EVALUATION_SEED)
    frames += list(cal.calibration_frames(photos, recipe))[len(photos):]
    for k, photo in enumerate(photos[:2]):
        clip = make_test_video(work / f"eval_clip{k}.mp4", face_image=photo, n_frames=clip_frames, audio=False)
        frames += [d.frame for d in decode_all(clip) if d.index % 10 == 0]
    return frames


def compare_models(fp32: Path, int8: Path, frames: Sequence[Frame]) -> dict[str, Any]:
    """The INT8 detector's quality figures for ``int8`` against ``fp32`` on ``frames`` (FP32 run at 0.4 so the
    extra-face margin can be checked)."""
    reference, candidate = detector(fp32, threshold=0.4), detector(int8)
    result = compare_detections([reference.detect(f) for f in frames], [candidate.detect(f) for f in frames])
    return {**{k: round(v, 4) if isinstance(v, float) else v for k, v in result.as_dict().items()},
            "failures": result.failures()}


def roi_quality(fp32: Path, int8: Path, frames: Sequence[Frame], *, canvases: Sequence[int] = (192, 320),
                growth: float = 1.6) -> list[dict[str, Any]]:
    """The same figures on the crops that tracking re-detects faces in (``roi_for`` around each
    FP32 face, ``growth`` x its longest side, at least the canvas), run on square canvases."""
    full = detector(fp32)
    crops = []
    for frame in frames:
        for face in full.detect(frame):
            box = roi_for(face.bbox_xyxy, frame.shape[:2], growth, min(canvases))
            if box is not None:
                crops.append(np.ascontiguousarray(frame[box[1]:box[3], box[0]:box[2]]))
    rows = []
    for canvas in canvases:
        reference = DetectorCanvases(detector(fp32, threshold=0.4)).get(canvas, square=True)
        candidate = DetectorCanvases(detector(int8)).get(canvas, square=True)
        result = compare_detections([reference.detect(c) for c in crops], [candidate.detect(c) for c in crops])
        rows.append({"canvas": canvas, "crops": len(crops), "failures": result.failures(),
                     **{k: round(v, 4) if isinstance(v, float) else v for k, v in result.as_dict().items()}})
    return rows


def time_per_call(paths: dict[str, Path], threads: Sequence[int], *, runs: int = 30, warmup: int = 5,
                  frame_hw: tuple[int, int] = (360, 640)) -> list[dict[str, Any]]:
    """Median ms per detector call for each model at each thread count, calls interleaved."""
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (*frame_hw, 3), dtype=np.uint8)
    rows = []
    for count in threads:
        sessions = {name: detector(path, count) for name, path in paths.items()}
        blob, _ = next(iter(sessions.values())).preprocess(frame)
        samples: dict[str, list[float]] = {name: [] for name in sessions}
        for i in range(warmup + runs):
            for name, model in sessions.items():
                start = time.perf_counter()
                model.forward(blob)
                if i >= warmup:
                    samples[name].append(1000 * (time.perf_counter() - start))
        row: dict[str, Any] = {"threads": count, "canvas": list(blob.shape[2:])}
        row.update({f"{name}_ms": round(statistics.median(v), 2) for name, v in samples.items()})
        if "fp32_ms" in row and "int8_ms" in row:
            row["speedup"] = round(row["fp32_ms"] / row["int8_ms"], 2)
        rows.append(row)
    return rows


def calibration_study(source: Path, photo_paths: Sequence[Path], frames: Sequence[Frame],
                      work: Path) -> list[dict[str, Any]]:
    """Quantise from several calibration sets and compare each against FP32 on ``frames``."""
    spec, cfg = get_spec("scrfd_2.5g"), DetectorConfig()
    photos = cal.read_photos(photo_paths)
    default = cal.CalibrationRecipe()
    variants: list[tuple[str, list[Frame], cal.CalibrationRecipe, bool]] = [
        ("photos only, heads quantised", photos, cal.CalibrationRecipe(augmented=0, collages=0), False),
        ("photos only", photos, cal.CalibrationRecipe(augmented=0, collages=0), True),
        ("augmented, heads quantised", photos, default, False),
        ("augmented (default)", photos, default, True),
        ("one photo augmented", photos[:1], default, True),
    ]
    rows: list[dict[str, Any]] = []
    for name, chosen, recipe, float_heads in variants:
        items = list(cal.calibration_frames(chosen, recipe))
        out = work / f"study_{len(rows)}.onnx"
        start = time.perf_counter()
        quantize_model(source, out, items, lambda f: cal.frame_blob(f, spec, cfg), float_heads=float_heads,
                       weight_bits=int8_weight_bits())
        row = {"calibration": name, "float_heads": float_heads, "build_s": round(time.perf_counter() - start, 1),
               **compare_models(source, out, frames), "calibration_frames": len(items)}
        row.update(time_per_call({"fp32": source, "int8": out}, [1], runs=15)[0])
        rows.append(row)
    return rows


def run(source: Path, int8: Path, photo_paths: Sequence[Path], *, runs: int = 30,
        study: bool = False) -> dict[str, Any]:
    """Speed at 1 and 2 threads, quality on the evaluation frames, and (``study``) the
    calibration study."""
    with tempfile.TemporaryDirectory(prefix="fusion_ray_precision_") as tmp:
        frames = evaluation_frames(cal.read_photos(photo_paths), Path(tmp))
        report: dict[str, Any] = {
            "speed": time_per_call({"fp32": source, "int8": int8}, [1, 2], runs=runs),
            "quality": {"frames": len(frames), **compare_models(source, int8, frames)},
            "roi_quality": roi_quality(source, int8, frames),
        }
        if study:
            report["calibration_study"] = calibration_study(source, photo_paths, frames, Path(tmp))
    return report
