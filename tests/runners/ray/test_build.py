"""Stage specs (no Ray started): which stages run their models on the GPU."""

import pytest

from fusion_ray.config import EngineConfig, EnhanceConfig, MaskConfig, RuntimeConfig, SwapConfig
from fusion_ray.core import steps
from fusion_ray.core.steps import Step
from fusion_ray.jobs.config import PipelineConfig, StageResources
from fusion_ray.runners.ray.build import (
    Sink,
    _gets_gpu,
    _pool_args,
    build_pipeline,
    stage_pools,
    stage_specs,
)
from fusion_ray.runners.ray.encode_stage import EncodeStage

CUDA = EngineConfig(runtime=RuntimeConfig(providers=["cuda"]), enhance=EnhanceConfig(enabled=True))


def _providers(pipeline, gpus_available):
    specs = stage_specs(CUDA, pipeline, {}, None, Sink([]), gpus_available=gpus_available)
    return {spec.name: spec.args[0].runtime.providers for spec in specs if spec.cls is not EncodeStage}


def test_on_a_gpu_cluster_only_the_gpu_stages_keep_gpu_providers():
    providers = _providers(PipelineConfig(), gpus_available=True)
    assert providers == {"detect": ["cpu"], "swap": ["cuda"], "paste": ["cpu"], "enhance": ["cuda"],
                         "paste_enhanced": ["cpu"]}


@pytest.mark.parametrize("fuse", ["auto", "never", "always"])
def test_without_a_gpu_every_stage_runs_on_cpu(fuse):
    assert set(map(tuple, _providers(PipelineConfig(fuse=fuse), gpus_available=False).values())) == {("cpu",)}


def test_a_fused_pool_runs_on_cpu_even_on_a_gpu_cluster():
    assert set(map(tuple, _providers(PipelineConfig(fuse="always"), gpus_available=True).values())) == {("cpu",)}


def test_a_gpu_stage_given_no_gpu_runs_on_cpu():
    pipeline = PipelineConfig(swap=StageResources(num_gpus=0.0))
    assert _providers(pipeline, gpus_available=True)["swap"] == ["cpu"]


def test_the_rest_of_the_engine_config_is_kept():
    spec = stage_specs(CUDA, PipelineConfig(), {}, None, None, gpus_available=True)[0]
    assert spec.args[0].model_dump(exclude={"runtime"}) == CUDA.model_dump(exclude={"runtime"})
    assert spec.args[0].runtime.device_id == CUDA.runtime.device_id


@pytest.mark.parametrize("gpus_available", [True, False])
def test_pools_ask_ray_for_a_gpu_exactly_when_their_stage_keeps_gpu_providers(gpus_available):
    pipeline = PipelineConfig(fuse="never")
    for spec in stage_specs(CUDA, pipeline, {}, None, None, gpus_available=gpus_available):
        args = _pool_args(spec.resources, _gets_gpu(spec.resources, pipeline, gpus_available))
        assert ("num_gpus" in args) == (spec.args[0].runtime.providers == ["cuda"]), spec.name


def test_gpu_stages_use_device_0_because_ray_shows_each_actor_only_its_gpu():
    on_gpu1 = CUDA.model_copy(update={"runtime": RuntimeConfig(providers=["cuda"], device_id=1)})
    specs = stage_specs(on_gpu1, PipelineConfig(), {}, None, None, gpus_available=True)
    devices = {spec.name: (spec.args[0].runtime.providers, spec.args[0].runtime.device_id) for spec in specs}
    assert devices["swap"] == (["cuda"], 0) and devices["enhance"] == (["cuda"], 0)


class _Recorder:
    """A dataset that records the actor pools ``build_pipeline`` asks Ray Data for."""

    def __init__(self) -> None:
        self.pools: list[dict] = []

    def map_batches(self, fn, **kwargs):
        self.pools.append(kwargs)
        return self


_GPU_STEP = Step("occlusion", "target_mask", lambda tools, rows, batch: batch, ("crops",), ("masks",),
                 wants_gpu=True)


@pytest.mark.parametrize("engine", [
    CUDA,
    CUDA.model_copy(update={"enhance": EnhanceConfig(enabled=False)}),
    CUDA.model_copy(update={"masks": MaskConfig(types=["box", "occlusion", "region"])}),
    CUDA.model_copy(update={"swap": SwapConfig(weight=0.3)}),
    "a new GPU step",
])
@pytest.mark.parametrize("fuse", ["never", "auto"])
@pytest.mark.parametrize("gpus_available", [True, False])
def test_every_pool_the_pipeline_starts_is_budgeted(engine, fuse, gpus_available, monkeypatch):
    """The CPUs and GPUs a job is checked for are those of the pools build_pipeline starts, whatever
    stages the chain makes (a mask model's, the target embedding's, a step added tomorrow)."""
    if engine == "a new GPU step":
        monkeypatch.setattr(steps, "STEPS", (*steps.STEPS, _GPU_STEP))
        engine = CUDA
    pipeline = PipelineConfig(fuse=fuse)
    ds = _Recorder()
    build_pipeline(ds, engine, pipeline, {}, gpus_available=gpus_available, sink=Sink([]))  # type: ignore[arg-type]
    pools = stage_pools(engine, pipeline, gpus_available=gpus_available)
    assert len(pools) == len(ds.pools)
    started_cpus = sum(args["num_cpus"] * args["compute"].min_size for args in ds.pools)
    started_gpus = sum(args.get("num_gpus", 0.0) * args["compute"].min_size for args in ds.pools)
    writers = pipeline.writers_for(pipeline.read_tasks) * pipeline.writer_num_cpus
    assert pipeline.reserved_cpus(pools) == pytest.approx(started_cpus + writers)
    assert pipeline.reserved_gpus(pools) == pytest.approx(started_gpus)


def test_a_gpu_stage_a_new_step_makes_counts_against_the_cluster(monkeypatch):
    from fusion_ray.errors import ConfigError

    pipeline = PipelineConfig(fuse="never")
    pipeline.check_fits(16.0, stage_pools(CUDA, pipeline, gpus_available=True), cluster_gpus=1.0)  # swap + enhance
    monkeypatch.setattr(steps, "STEPS", (*steps.STEPS, _GPU_STEP))
    with pytest.raises(ConfigError, match="need 1.5 GPUs but the cluster has 1"):
        pipeline.check_fits(16.0, stage_pools(CUDA, pipeline, gpus_available=True), cluster_gpus=1.0)
