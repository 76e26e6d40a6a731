"""``build_pipeline``: the one function that chains the ``map_batches`` stages.

Two layouts of the same stage classes:

- **pools** (a GPU cluster): detect on CPU actors, swap and enhance on GPU actor pools, paste
  and encode on CPU actors; every stage has its own pool, sized from the pipeline config.
- **fused** (no GPU in the cluster, the default there): one CPU actor pool whose actors run
  the whole chain on each batch. With no GPU to feed, separate pools only add processes and
  a serialisation hop per stage; fusing keeps every core on frames.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
from ray.data import ActorPoolStrategy, Dataset

from fusion_ray.config import EngineConfig
from fusion_ray.core.steps import Chain
from fusion_ray.jobs.config import FUSED_POOL, PipelineConfig, StagePool, StageResources
from fusion_ray.jobs.stages import Batch, ChainStage, Stage, stage_groups
from fusion_ray.runners.ray.encode_stage import EncodeStage
from fusion_ray.types import Embedding, SourceIdentity

log = logging.getLogger(__name__)


def cluster_gpus() -> float:
    """GPUs in the connected Ray cluster (0 on a CPU-only machine)."""
    return float(ray.cluster_resources().get("GPU", 0.0))


@dataclass(frozen=True)
class Sink:
    """Where the last stage sends frames: the segment writer actors (each row names its own
    target); ``images``: whether image items may come (detect then loads a detector even when
    the videos are tracked in their read tasks)."""

    writers: Sequence[Any]
    images: bool = True


@dataclass(frozen=True)
class StageSpec:
    """A stage class and its constructor arguments (built inside the actor that runs it)."""

    cls: type[Stage]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    resources: StageResources
    gets_gpu: bool = False
    """Whether its actors ask Ray for a GPU (they keep GPU providers only then)."""

    @property
    def name(self) -> str:
        """The stage's name (a chain stage's group, else its class's)."""
        return str(self.args[1]) if self.cls is ChainStage else self.cls.name

    @property
    def pool(self) -> StagePool:
        """The actor pool it runs in when the stages are not fused."""
        return StagePool(self.name, self.resources, self.gets_gpu)

    def build(self) -> Stage:
        return self.cls(*self.args, **self.kwargs)


class FusedStage:
    """Several stages run in order inside one actor.

    Each stage still reports its busy time and no waiting (inside the actor nothing waits for
    input). The actor itself reports as the stage ``FUSED_POOL``: busy for the whole chain,
    waiting for the time between the end of one chain and the next call, so its idle ratio is
    the pool's.
    """

    def __init__(self, specs: Sequence[StageSpec]) -> None:
        self.stages = [spec.build() for spec in specs]
        self._last_end = time.perf_counter()

    def __call__(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        for stage in self.stages:
            batch = stage(batch)
            batch[f"idle_ms_{stage.name}"] = np.zeros_like(batch[f"idle_ms_{stage.name}"])
        end = time.perf_counter()
        rows = len(batch[f"busy_ms_{self.stages[0].name}"])
        batch[f"busy_ms_{FUSED_POOL}"] = np.full(rows, (end - start) * 1000.0 / max(rows, 1))
        batch[f"idle_ms_{FUSED_POOL}"] = np.full(rows, (start - self._last_end) * 1000.0 / max(rows, 1))
        self._last_end = end
        return batch


def _gets_gpu(resources: StageResources, pipeline: PipelineConfig, gpus_available: bool) -> bool:
    """Whether a stage's actors ask Ray for a GPU (never in a fused pool or a GPU-less cluster)."""
    return gpus_available and not pipeline.fused(gpus_available) and resources.num_gpus > 0


def stage_specs(engine: EngineConfig, pipeline: PipelineConfig, identities: Mapping[str, SourceIdentity],
                reference: Embedding | None, sink: Sink | None, *, gpus_available: bool = False,
                tracked: bool = False) -> list[StageSpec]:
    """The chain's stages, in order (:func:`~fusion_ray.jobs.stages.stage_groups`: today
    detect, swap, paste (, enhance, paste_enhanced)), then encode when there is a sink.

    A stage whose actors get no GPU (see ``_gets_gpu``) runs its models on CPU, whatever
    providers ``engine`` asks for. In a fused pool every stage works within the pool's
    (``detect``'s) CPU budget. ``tracked``: the read tasks track the videos' faces, so detect
    only cuts crops (and loads a detector only when the sink has image items, or is unknown).
    """
    fused = pipeline.fused(gpus_available)
    images = sink is None or sink.images
    specs = []
    for group in stage_groups(Chain.of(engine)):
        resources = pipeline.resources(group.name, group.wants_gpu)
        gets_gpu = _gets_gpu(resources, pipeline, gpus_available)
        budget = (pipeline.detect if fused else resources).cpu_budget
        kwargs = {"cpu_budget": budget, "reference": reference, "tracked": tracked, "images": images}
        specs.append(StageSpec(ChainStage, (engine.in_ray_actor(gets_gpu), group.name, dict(identities)), kwargs,
                               resources, gets_gpu))
    if sink is not None:
        specs.append(StageSpec(EncodeStage, (list(sink.writers),), {}, pipeline.encode))
    return specs


def pools_of(specs: Sequence[StageSpec], pipeline: PipelineConfig, gpus_available: bool) -> list[StagePool]:
    """The actor pools :func:`build_pipeline` starts for ``specs``: one per stage, or the one CPU
    pool (``detect``'s resources) that runs them all fused."""
    if pipeline.fused(gpus_available):
        return [StagePool(FUSED_POOL, pipeline.detect)]
    return [spec.pool for spec in specs]


def stage_pools(engine: EngineConfig, pipeline: PipelineConfig, *, gpus_available: bool) -> list[StagePool]:
    """The actor pools a job's pipeline starts (its chain's stages and encode), from the stages
    :func:`stage_specs` builds: what :meth:`PipelineConfig.check_fits` budgets."""
    specs = stage_specs(engine, pipeline, {}, None, Sink([]), gpus_available=gpus_available)
    return pools_of(specs, pipeline, gpus_available)


def _pool_args(resources: StageResources, gets_gpu: bool) -> dict[str, Any]:
    num_gpus = resources.num_gpus if gets_gpu else 0.0
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
                   gpus_available: bool | None = None, sink: Sink | None = None, tracked: bool = False) -> Dataset:
    """Chain the stages on ``ds``, as separate pools or fused (see the module docstring).

    GPU stages ask for ``num_gpus`` only when the cluster has GPUs; otherwise they run on CPU
    with the same batching. Stages given no GPU run their models on CPU (``EngineConfig.in_ray_actor``). Each
    actor's ONNX sessions get threads from its own CPU budget. ``tracked``: ``ds`` comes from a
    ``FrameDatasource`` with tracking (its rows carry the tracked faces).
    """
    gpus = cluster_gpus() > 0 if gpus_available is None else gpus_available
    specs = stage_specs(engine, pipeline, identities, reference, sink, gpus_available=gpus, tracked=tracked)
    pools = pools_of(specs, pipeline, gpus)
    if pipeline.fused(gpus):
        (fused,) = pools
        log.info("running the stages fused in one CPU actor pool (%d actors)", fused.resources.max_actors)
        return ds.map_batches(FusedStage, fn_constructor_args=(specs,), **_pool_args(fused.resources, fused.gets_gpu))
    if not gpus:
        log.info("no GPU in the cluster: GPU stages run on CPU")
    for spec, pool in zip(specs, pools, strict=True):
        ds = ds.map_batches(spec.cls, fn_constructor_args=spec.args, fn_constructor_kwargs=spec.kwargs,
                            **_pool_args(pool.resources, pool.gets_gpu))
    return ds
