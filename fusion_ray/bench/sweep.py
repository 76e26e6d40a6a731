"""Batch-size sweep: per-face latency and throughput of each batched model.

Each model is called through its wrapper (``ArcFaceEmbedder.embed_crops``,
``InswapperSwapper.swap``, ``SpecEnhancer.enhance``): pre-processing, ``session.run`` and
post-processing, i.e. what a pipeline stage pays per batch. Inputs are random crops (and unit
latents) of the model's crop size, the same for every batch size. For every batch size the
first ``warmup`` calls are discarded, then ``repeats`` calls are timed; the median call time
gives per-face latency (median / batch) and throughput (batch / median). A model whose export
keeps a fixed batch dimension is looped at that batch by its wrapper; the result says so.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.bench.memory import PeakMemorySampler
from fusion_ray.bench.models import BenchModels
from fusion_ray.config import RuntimeConfig
from fusion_ray.models.embedder import ArcFaceEmbedder
from fusion_ray.models.enhancer import SpecEnhancer
from fusion_ray.models.registry import get_spec
from fusion_ray.models.session import create_session
from fusion_ray.models.swapper import InswapperSwapper, read_emap

log = logging.getLogger(__name__)

DEFAULT_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
SWEEP_ROLES: tuple[str, ...] = ("embedder", "swapper", "enhancer")


@dataclass
class SweepPoint:
    batch: int
    calls_ms: list[float]
    peak_rss_mib: float = 0.0
    """This process's peak RSS while the batch size ran (activations grow with the batch)."""

    @property
    def median_ms(self) -> float:
        return statistics.median(self.calls_ms)

    @property
    def per_face_ms(self) -> float:
        return self.median_ms / self.batch

    @property
    def faces_per_s(self) -> float:
        return 1000.0 * self.batch / self.median_ms if self.median_ms > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "calls_ms": [round(c, 2) for c in self.calls_ms],
                "median_call_ms": round(self.median_ms, 2), "min_call_ms": round(min(self.calls_ms), 2),
                "per_face_ms": round(self.per_face_ms, 2), "faces_per_s": round(self.faces_per_s, 2),
                "peak_rss_mib": round(self.peak_rss_mib, 1)}


@dataclass
class ModelSweep:
    role: str
    name: str
    path: str
    stand_in: bool
    variant: str | None
    batch_dynamic_copy_of: str | None
    fixed_batch: int | None
    """The export's fixed batch (its wrapper loops at it); None when batch-dynamic."""
    providers: list[str]
    cap: int | None = None
    points: list[SweepPoint] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    """Batch sizes not run because they exceed ``cap``."""

    def to_json(self) -> dict[str, Any]:
        return {"role": self.role, "name": self.name, "path": self.path, "stand_in": self.stand_in,
                "variant": self.variant, "batch_dynamic_copy_of": self.batch_dynamic_copy_of,
                "fixed_batch": self.fixed_batch, "providers": self.providers, "cap": self.cap,
                "points": [p.to_json() for p in self.points], "skipped_batches": self.skipped}


@dataclass
class SweepResult:
    batches: list[int]
    repeats: int
    warmup: int
    intra_op_threads: int
    models: dict[str, ModelSweep] = field(default_factory=dict)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"batches": self.batches, "repeats": self.repeats, "warmup": self.warmup,
                "intra_op_threads": self.intra_op_threads, "wall_s": round(self.wall_s, 2),
                "what": "wrapper call (pre-processing + session.run + post-processing) on random crops; "
                        "median of the timed calls after warm-up",
                "models": {name: m.to_json() for name, m in self.models.items()}}


def _caller(role: str, name: str, path: Path, runtime: RuntimeConfig, threads: int
            ) -> tuple[Callable[[np.ndarray, np.ndarray], Any], int, int | None, list[str]]:
    """(call(crops, latents), crop_size, fixed batch, providers) for the model at ``path``."""
    session, info = create_session(path, runtime, cpu_budget=threads)
    providers = list(info.providers)
    if role == "embedder":
        embedder = ArcFaceEmbedder(session, get_spec(name))
        return (lambda crops, latents: embedder.embed_crops(crops)), embedder.crop_size, embedder.batch, providers
    if role == "swapper":
        swapper = InswapperSwapper(session, get_spec(name), read_emap(path))
        return swapper.swap, swapper.crop_size, swapper.batch, providers
    enhancer = SpecEnhancer(session, get_spec(name))
    return (lambda crops, latents: enhancer.enhance(crops, 0.8)), enhancer.crop_size, enhancer.batch, providers


def run_sweep(models: BenchModels, *, batches: Sequence[int] = DEFAULT_BATCHES, repeats: int = 3, warmup: int = 1,
              caps: Mapping[str, int] | None = None, roles: Sequence[str] = SWEEP_ROLES,
              threads: int = 1, seed: int = 0,
              progress: Callable[[str, int], None] | None = None) -> SweepResult:
    """Time each batched model of ``models`` at every batch size (see the module docstring).

    ``caps`` maps a model name to the largest batch to run (larger ones are recorded as
    skipped): cost-faithful stand-ins take about a second per face on one CPU core.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}")
    sizes = sorted({int(b) for b in batches})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"batch sizes must be positive, got {list(batches)}")
    caps = dict(caps or {})
    rng = np.random.default_rng(seed)
    result = SweepResult(batches=sizes, repeats=repeats, warmup=warmup, intra_op_threads=threads)
    start = time.perf_counter()
    runtime = models.engine.runtime
    for role in roles:
        model = models.models[role]
        call, crop_size, fixed, providers = _caller(role, model.name, Path(model.path), runtime, threads)
        sweep = ModelSweep(role=role, name=model.name, path=model.path, stand_in=model.stand_in,
                           variant=model.variant, batch_dynamic_copy_of=model.batch_dynamic_copy_of,
                           fixed_batch=fixed, providers=providers, cap=caps.get(model.name))
        largest = max(sizes)
        crops = rng.integers(0, 256, (largest, crop_size, crop_size, 3), dtype=np.uint8)
        latents = rng.standard_normal((largest, 512)).astype(np.float32)
        latents /= np.linalg.norm(latents, axis=1, keepdims=True)
        for batch in sizes:
            if sweep.cap is not None and batch > sweep.cap:
                sweep.skipped.append(batch)
                continue
            if progress is not None:
                progress(model.name, batch)
            part, lat = crops[:batch], latents[:batch]
            calls = []
            with PeakMemorySampler(0.5, pss=False) as sampler:
                for _ in range(warmup):
                    call(part, lat)
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    call(part, lat)
                    calls.append((time.perf_counter() - t0) * 1000.0)
            assert sampler.result is not None
            sweep.points.append(SweepPoint(batch, calls, sampler.result.peak_rss_mib))
        result.models[model.name] = sweep
    result.wall_s = time.perf_counter() - start
    return result
