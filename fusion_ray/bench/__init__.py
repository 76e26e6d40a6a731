"""Side-by-side throughput experiments (``fusion-ray bench NAME`` and the notebooks).

- :func:`run_bench`: the serial loop (one frame at a time, every model at batch 1, as FaceFusion
  runs) on a square and a fitted detector canvas, and the Ray Data pipeline (Ray start-up
  included), in one process on the same frames and the same model files; frames/s, per-stage
  ms per frame, idle ratios, peak memory, and the pipeline/serial ratio.
- :func:`run_sweep`: per-face latency and throughput of the batched models at batch 1..32.
- :class:`BenchReport`: JSON and Markdown, with the machine and the stand-in models named.

Models absent from the models directory are replaced by labelled stand-ins
(cost-faithful by default); every result says which models were stand-ins.
"""

from fusion_ray.bench.machine import machine_info
from fusion_ray.bench.memory import MemoryPeak, PeakMemorySampler, tree_rss
from fusion_ray.bench.models import BenchModel, BenchModels, prepare_models
from fusion_ray.bench.pipeline import PipelineResult, run_pipeline
from fusion_ray.bench.report import BenchReport, VideoSpec
from fusion_ray.bench.runner import PARTS, BenchOptions, run_bench, shared_assets_dir
from fusion_ray.bench.serial import SerialResult, run_serial
from fusion_ray.bench.sweep import DEFAULT_BATCHES, ModelSweep, SweepPoint, SweepResult, run_sweep

__all__ = [
    "DEFAULT_BATCHES",
    "PARTS",
    "BenchModel",
    "BenchModels",
    "BenchOptions",
    "BenchReport",
    "MemoryPeak",
    "ModelSweep",
    "PeakMemorySampler",
    "PipelineResult",
    "SerialResult",
    "SweepPoint",
    "SweepResult",
    "VideoSpec",
    "machine_info",
    "prepare_models",
    "run_bench",
    "run_pipeline",
    "run_serial",
    "run_sweep",
    "shared_assets_dir",
    "tree_rss",
]
