"""``build_pipeline``: the one function that chains the ``map_batches`` stages."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import ray
from ray.data import ActorPoolStrategy, Dataset

from fusion_ray.config import EngineConfig
from fusion_ray.pipeline.config import PipelineConfig, StageResources
from fusion_ray.pipeline.stages import (
    DetectStage,
    EnhanceStage,
    PasteEnhancedStage,
    PasteStage,
    SwapStage,
)
from fusion_ray.types import Embedding, SourceIdentity

log = logging.getLogger(__name__)


def cluster_gpus() -> float:
    """GPUs in the connected Ray cluster (0 on a CPU-only machine)."""
    return float(ray.cluster_resources().get("GPU", 0.0))


def _stage_args(resources: StageResources, gpus_available: bool) -> dict[str, Any]:
    num_gpus = resources.num_gpus if gpus_available else 0.0
    args: dict[str, Any] = {
        "batch_size": resources.batch_size,
        "compute": ActorPoolStrategy(min_size=resources.min_actors, max_size=resources.max_actors),
        "num_cpus": resources.num_cpus,
        "batch_format": "numpy",
        "udf_modifying_row_count": False,
    }
    if num_gpus > 0:
        args["num_gpus"] = num_gpus
    return args


def build_pipeline(ds: Dataset, engine: EngineConfig, pipeline: PipelineConfig,
                   identities: Mapping[str, SourceIdentity], *, reference: Embedding | None = None,
                   gpus_available: bool | None = None) -> Dataset:
    """Chain detect -> swap -> paste (-> enhance -> paste_enhanced) on ``ds``.

    GPU stages ask for ``num_gpus`` only when the cluster has GPUs; otherwise they run on CPU
    with the same batching. Each actor's ONNX sessions get threads from its own CPU budget.
    """
    gpus = cluster_gpus() > 0 if gpus_available is None else gpus_available
    if not gpus:
        log.info("no GPU in the cluster: GPU stages run on CPU")
    ds = ds.map_batches(DetectStage, fn_constructor_args=(engine,),
                        fn_constructor_kwargs={"cpu_budget": pipeline.detect.cpu_budget, "reference": reference},
                        **_stage_args(pipeline.detect, gpus))
    ds = ds.map_batches(SwapStage, fn_constructor_args=(engine, dict(identities)),
                        fn_constructor_kwargs={"cpu_budget": pipeline.swap.cpu_budget},
                        **_stage_args(pipeline.swap, gpus))
    ds = ds.map_batches(PasteStage, fn_constructor_args=(engine,),
                        fn_constructor_kwargs={"cpu_budget": pipeline.paste.cpu_budget},
                        **_stage_args(pipeline.paste, gpus))
    if engine.enhance.enabled:
        ds = ds.map_batches(EnhanceStage, fn_constructor_args=(engine,),
                            fn_constructor_kwargs={"cpu_budget": pipeline.enhance.cpu_budget},
                            **_stage_args(pipeline.enhance, gpus))
        ds = ds.map_batches(PasteEnhancedStage, fn_constructor_args=(engine,),
                            fn_constructor_kwargs={"cpu_budget": pipeline.paste_enhanced.cpu_budget},
                            **_stage_args(pipeline.paste_enhanced, gpus))
    return ds
