"""What the notebooks call, so that no logic lives in them.

Parameters come from environment variables, so that CI can execute the notebooks at a tiny
size (``tests/test_notebooks.py``) and a user can run them at full size unchanged:

=============================  ==============================================  =================
variable                       meaning                                         default
=============================  ==============================================  =================
FUSION_RAY_NB_FRAMES           frames of the generated video                   120
FUSION_RAY_NB_SIZE             its size, WxH                                   640x360
FUSION_RAY_NB_STANDINS         stand-ins for absent models (serial/pipeline)   with a GPU:
                                                                               cost_faithful;
                                                                               on CPU: light
                                                                               (about 1 s per
                                                                               face otherwise)
FUSION_RAY_NB_SWEEP_STANDINS   stand-ins for absent models in the sweep        cost_faithful
FUSION_RAY_NB_SWEEP_BATCHES    batch sizes of the sweep                        1,2,4,8,16,32
FUSION_RAY_NB_SWEEP_REPEATS    timed calls per batch size                      3
FUSION_RAY_NB_SWEEP_CAPS       NAME=N,... largest batch per model              on CPU only:
                                                                               inswapper_128=8,
                                                                               gfpgan_1.4=8
                                                                               ("none": no cap)
FUSION_RAY_NB_SKIP_RAY         1: skip the Ray pipeline part (tests)           0
FUSION_RAY_NB_WORK_DIR         where videos and generated models go            a temp directory
FUSION_RAY_MODELS              models directory (real models found there       the user cache
                               are used instead of stand-ins)
FUSION_RAY_ASSETS              shared assets (photos, real SCRFD detector)     ../shared/assets
=============================  ==============================================  =================
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.bench.models import Variant, prepare_models
from fusion_ray.bench.report import BenchReport
from fusion_ray.bench.runner import BenchOptions, run_bench, shared_assets_dir
from fusion_ray.config import EngineConfig, ModelsConfig, RuntimeConfig, SwapConfig
from fusion_ray.engine import Engine
from fusion_ray.errors import InputError
from fusion_ray.image import load_sources
from fusion_ray.imageio import read_image
from fusion_ray.models.session import cuda_device_count
from fusion_ray.pipeline.config import PipelineConfig

HEAVY_CPU_CAPS = {"inswapper_128": 8, "gfpgan_1.4": 8}


def _env(name: str, default: str) -> str:
    value = os.environ.get(name, "").strip()
    return value or default


def _caps(text: str) -> dict[str, int]:
    caps: dict[str, int] = {}
    if text.lower() == "none":
        return caps
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, size = item.partition("=")
        caps[name.strip()] = int(size)
    return caps


def _variant(text: str) -> Variant:
    if text not in ("light", "cost_faithful"):
        raise InputError(f"stand-in variant must be light or cost_faithful, got {text!r}")
    return "light" if text == "light" else "cost_faithful"


@dataclass(frozen=True)
class NotebookParams:
    """The notebooks' parameters (see the module docstring)."""

    frames: int
    size_wh: tuple[int, int]
    standins: Variant
    sweep_standins: Variant
    sweep_batches: tuple[int, ...]
    sweep_repeats: int
    sweep_caps: dict[str, int]
    skip_ray: bool
    work_dir: Path
    assets: Path | None
    models_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        lines = [f"{key}: {value}" for key, value in self.__dict__.items() if key != "extra"]
        return "\n".join(lines)


def notebook_params() -> NotebookParams:
    """Read the parameters from the environment (defaults: a full-size run)."""
    width, _, height = _env("FUSION_RAY_NB_SIZE", "640x360").lower().partition("x")
    gpu = cuda_device_count() > 0
    default_caps = "" if gpu else ",".join(f"{k}={v}" for k, v in HEAVY_CPU_CAPS.items())
    work = os.environ.get("FUSION_RAY_NB_WORK_DIR", "").strip()
    models_dir = os.environ.get("FUSION_RAY_MODELS", "").strip()
    return NotebookParams(
        frames=int(_env("FUSION_RAY_NB_FRAMES", "120")),
        size_wh=(int(width), int(height)),
        standins=_variant(_env("FUSION_RAY_NB_STANDINS", "cost_faithful" if gpu else "light")),
        sweep_standins=_variant(_env("FUSION_RAY_NB_SWEEP_STANDINS", "cost_faithful")),
        sweep_batches=tuple(int(b) for b in _env("FUSION_RAY_NB_SWEEP_BATCHES", "1,2,4,8,16,32").split(",")),
        sweep_repeats=int(_env("FUSION_RAY_NB_SWEEP_REPEATS", "3")),
        sweep_caps=_caps(_env("FUSION_RAY_NB_SWEEP_CAPS", default_caps or "none")),
        skip_ray=_env("FUSION_RAY_NB_SKIP_RAY", "0") not in ("0", "false", "no"),
        work_dir=Path(work) if work else Path(tempfile.mkdtemp(prefix="fusion_ray_nb_")),
        assets=shared_assets_dir(),
        models_dir=Path(models_dir) if models_dir else None,
    )


def _asset(params: NotebookParams, name: str) -> Path:
    if params.assets is None or not (params.assets / name).is_file():
        raise InputError(f"shared asset {name} not found (set FUSION_RAY_ASSETS to the assets folder)")
    return params.assets / name


def _engine_config(params: NotebookParams, swapper: str = "inswapper") -> EngineConfig:
    return EngineConfig(models=ModelsConfig(models_dir=params.models_dir), runtime=RuntimeConfig(providers=None),
                        swap=SwapConfig(swapper="classic" if swapper == "classic" else "inswapper"))


# --------------------------------------------------------------------------- quickstart
@dataclass
class QuickstartResult:
    """A swapped photo and what made it."""

    source: np.ndarray
    before: np.ndarray
    after: np.ndarray
    faces_detected: int
    faces_swapped: int
    swapper: str
    stand_in_models: list[str]
    model_files: dict[str, str]
    timings_ms: dict[str, float]

    @property
    def label(self) -> str:
        if self.stand_in_models:
            return (f"made with STAND-IN models ({', '.join(self.stand_in_models)}): NOT a real face swap; "
                    "the stand-ins only have the real models' interfaces")
        if self.swapper == "classic":
            return "real SCRFD detector + classic (landmark-aligned warp and blend) swapper: a real swap"
        return "real models: a real swap"


def quickstart_swap(params: NotebookParams, *, source: str = "images/biden.jpg", target: str = "images/obama.jpg",
                    swapper: str = "classic") -> QuickstartResult:
    """Swap the face of ``source`` into ``target`` (shared photos) with the real detector.

    ``swapper="classic"`` needs no other model, so the result is a real swap; ``"inswapper"``
    uses the real inswapper when it is in the models directory, else a labelled light stand-in.
    """
    source_path, target_path = _asset(params, source), _asset(params, target)
    models = prepare_models(_engine_config(params, swapper), standins="light", work_dir=params.work_dir,
                            batch_dynamic=False, detector_fallback=_asset(params, "models/scrfd_2.5g.onnx"))
    engine = Engine.load(models.engine, cpu_budget=float(os.cpu_count() or 1))
    identity = load_sources(engine, [source_path])
    before = read_image(target_path).frame
    result = engine.process_frame(before, identity)
    return QuickstartResult(
        source=read_image(source_path).frame, before=before, after=result.frame,
        faces_detected=result.faces_detected, faces_swapped=result.faces_swapped, swapper=swapper,
        stand_in_models=engine.stand_in_models,
        model_files={name: info.path for name, info in engine.model_info.items()},
        timings_ms=result.timings_ms)


# --------------------------------------------------------------------------- throughput
def throughput_report(params: NotebookParams) -> BenchReport:
    """Serial loops (square and fit canvas) and, unless ``skip_ray``, the Ray pipeline."""
    parts = ("serial",) if params.skip_ray else ("serial", "pipeline")
    options = BenchOptions(
        engine=_engine_config(params), pipeline=PipelineConfig(progress_bars=False), work_dir=params.work_dir,
        standins=params.standins, parts=parts, frames=params.frames, size_wh=params.size_wh,
        command=f"notebook 02_throughput: frames={params.frames} size={params.size_wh} standins={params.standins}")
    report = run_bench(options)
    if params.skip_ray:
        report.notes.append("the Ray pipeline part was skipped (FUSION_RAY_NB_SKIP_RAY=1)")
    return report


def sweep_report(params: NotebookParams) -> BenchReport:
    """The batch-size sweep of the embedder, swapper and enhancer."""
    options = BenchOptions(
        engine=_engine_config(params), pipeline=PipelineConfig(progress_bars=False), work_dir=params.work_dir,
        standins=params.sweep_standins, parts=("sweep",), sweep_batches=params.sweep_batches,
        sweep_repeats=params.sweep_repeats, sweep_caps=params.sweep_caps,
        command=(f"notebook 02_throughput sweep: standins={params.sweep_standins} batches={params.sweep_batches} "
                 f"repeats={params.sweep_repeats} caps={params.sweep_caps}"))
    return run_bench(options)


def as_markdown(text: str) -> Any:
    """A notebook-renderable Markdown object (IPython's), or the text outside IPython."""
    try:
        from IPython.display import Markdown
    except ImportError:  # not in IPython
        return text
    return Markdown(text)
