"""Benchmarks of the mask and pixel-boost building blocks: pixel boost batched against batch-1 tile calls, and
each mask's cost per face.

Pixel boost runs the inswapper STAND-IN (``light`` or ``cost_faithful``, made batch-dynamic by
:func:`~fusion_ray.models.dynamic.make_batch_dynamic`) through the same :class:`InswapperSwapper`
both ways: every tile of every face in one call (:func:`~fusion_ray.ops.pixel_boost.boosted_call`)
against FaceFusion's k^2 batch-1 calls per face (:func:`~fusion_ray.ops.pixel_boost.per_tile_calls`).
Both must give the same pixels; each row says by how much they differ.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from fusion_ray.models.dynamic import make_batch_dynamic
from fusion_ray.models.registry import get_spec
from fusion_ray.models.standins import build_standin
from fusion_ray.models.standins_quality import synthetic_face_68
from fusion_ray.models.swapper import InswapperSwapper, read_emap
from fusion_ray.ops.face_masks import (
    area_mask,
    box_mask_percent,
    combine_masks,
    mouth_keep_mask,
    without,
)
from fusion_ray.ops.pixel_boost import boost_factor, boosted_call, per_tile_calls


def _median_seconds(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def inswapper_standin(work_dir: Path, variant: str, threads: int) -> InswapperSwapper:
    """The inswapper stand-in of ``variant``, batch-dynamic, on the CPU with ``threads`` threads."""
    fixed = build_standin("inswapper_128", work_dir / f"inswapper_128_{variant}.onnx", variant=variant)
    dynamic = work_dir / f"inswapper_128_{variant}_dynamic.onnx"
    make_batch_dynamic(fixed, dynamic, threads=threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(dynamic), sess_options=options, providers=["CPUExecutionProvider"])
    return InswapperSwapper(session, get_spec("inswapper_128"), read_emap(dynamic))


def pixel_boost_bench(work_dir: Path, *, sizes: Sequence[int] = (256, 512, 1024), faces: int = 1,
                      repeats: int = 3, variant: str = "light", threads: int = 2) -> list[dict[str, Any]]:
    """One row per boost size: seconds per face for one batched call and for k^2 batch-1 calls."""
    swapper = inswapper_standin(work_dir, variant, threads)
    rng = np.random.default_rng(0)
    latents = rng.standard_normal((faces, 512)).astype(np.float32)
    latents /= np.linalg.norm(latents, axis=1, keepdims=True)
    rows = []
    for size in sizes:
        k = boost_factor(size, swapper.crop_size)
        crops = rng.integers(0, 256, (faces, size, size, 3), dtype=np.uint8)
        batched_s, batched = _median_seconds(partial(boosted_call, crops, k, swapper.swap, latents), repeats)
        single_s, single = _median_seconds(partial(per_tile_calls, crops, k, swapper.swap, latents), repeats)
        rows.append({
            "bench": "pixel_boost", "model": f"inswapper_128 STAND-IN ({variant})", "boost": size,
            "tiles_per_face": k * k, "faces": faces, "threads": threads, "repeats": repeats,
            "batched_calls": 1, "batch1_calls": faces * k * k,
            "batched_ms_per_face": round(1000 * batched_s / faces, 2),
            "batch1_ms_per_face": round(1000 * single_s / faces, 2),
            "speedup": round(single_s / batched_s, 2),
            "max_pixel_difference": int(np.abs(batched.astype(np.int16) - single.astype(np.int16)).max()),
        })
    return rows


def mask_bench(*, crop_size: int = 256, repeats: int = 20) -> list[dict[str, Any]]:
    """Milliseconds per face of each landmark mask (pure functions) on a ``crop_size`` crop."""
    face = synthetic_face_68() * crop_size
    box = box_mask_percent(crop_size)
    cases: dict[str, Callable[[], Any]] = {
        "box": lambda: box_mask_percent(crop_size, 0.3, (0, 0, 0, 0)),
        "area (lower-face)": lambda: area_mask(crop_size, face, ["lower-face"]),
        "area (upper+lower+mouth)": lambda: area_mask(crop_size, face, ["upper-face", "lower-face", "mouth"]),
        "mouth (Deep-Live-Cam)": lambda: mouth_keep_mask(crop_size, face),
        "minimum of 3": lambda: combine_masks([box, box, without(box)]),
    }
    rows = []
    for name, run in cases.items():
        seconds, _ = _median_seconds(run, repeats)
        rows.append({"bench": "mask", "mask": name, "crop": crop_size, "repeats": repeats,
                     "ms_per_face": round(1000 * seconds, 3)})
    return rows
