"""The pipeline configuration: the checked-in files and the Ray Data settings of a job."""

import pytest
from ray.data import DataContext

from fusion_ray.config import EngineConfig, EnhanceConfig
from fusion_ray.jobs.config import PipelineConfig, load_job_config
from fusion_ray.runners.ray.build import stage_pools
from fusion_ray.runners.ray.run import _data_context
from tests.conftest import REPO_ROOT


def test_checked_in_pipeline_config_loads():
    cfg = load_job_config(REPO_ROOT / "configs" / "pipeline.yaml")
    assert cfg.pipeline.detect.min_actors == 2 and cfg.engine.detector.canvas == "fit"
    assert cfg.pipeline == PipelineConfig()  # the file documents the defaults
    enhanced = cfg.engine.model_copy(update={"enhance": EnhanceConfig(enabled=True)})
    cfg.pipeline.check_fits(2.0, stage_pools(enhanced, cfg.pipeline, gpus_available=False))  # fits this 2-core machine


def test_job_settings_apply_to_ray_data_and_are_restored():
    ctx = DataContext.get_current()
    before = (ctx.wait_for_min_actors_s, ctx.target_max_block_size, ctx.enable_progress_bars)
    pipeline = PipelineConfig(actor_start_timeout_s=42, block_mb=2.0, progress_bars=False)
    with _data_context(pipeline):
        # dispatch waits for every pool's min_actors (else a short clip runs on one actor)
        assert ctx.wait_for_min_actors_s == 42
        assert ctx.target_max_block_size == 2 * 2**20
        assert ctx.enable_progress_bars is False
        assert ctx.execution_options.resource_limits.object_store_memory == 128 * 2**20
    assert (ctx.wait_for_min_actors_s, ctx.target_max_block_size, ctx.enable_progress_bars) == before


@pytest.mark.parametrize("setting,cluster_gpus,expected", [
    ("auto", 0.0, False), ("auto", 1.0, True), ("always", 0.0, True), ("never", 2.0, False)])
def test_gpu_stages_ask_for_gpus(setting, cluster_gpus, expected):
    pipeline = PipelineConfig(gpus=setting)
    assert pipeline.uses_gpus(cluster_gpus) is expected
    assert pipeline.fused(pipeline.uses_gpus(cluster_gpus)) is not expected  # fuse: auto


def test_cluster_pipeline_config_asks_for_gpus_before_any_gpu_node_is_up():
    """cluster.yaml's GPU workers autoscale from zero: the job must request GPUs anyway."""
    cfg = load_job_config(REPO_ROOT / "configs" / "pipeline_cluster.yaml")
    assert cfg.pipeline.uses_gpus(0.0) and not cfg.pipeline.fused(True)
    enhanced = cfg.engine.model_copy(update={"enhance": EnhanceConfig(enabled=True)})
    cfg.pipeline.check_fits(16.0, stage_pools(enhanced, cfg.pipeline, gpus_available=True))  # cluster.yaml's 16-CPU head


def test_gpu_pools_that_cannot_start_are_refused():
    from fusion_ray.errors import ConfigError
    from fusion_ray.jobs.config import StageResources

    pipeline = PipelineConfig(swap=StageResources(num_gpus=0.5, min_actors=3, max_actors=3))
    plain = stage_pools(EngineConfig(), pipeline, gpus_available=True)
    pipeline.check_fits(16.0, plain, cluster_gpus=2.0)  # 1.5 of 2
    enhanced = stage_pools(EngineConfig(enhance=EnhanceConfig(enabled=True)), pipeline, gpus_available=True)
    with pytest.raises(ConfigError, match="need 2 GPUs but the cluster has 1"):
        pipeline.check_fits(16.0, enhanced, cluster_gpus=1.0)  # + enhance 0.5
    # gpus: always waits for the autoscaler instead
    always = pipeline.model_copy(update={"gpus": "always"})
    always.check_fits(16.0, stage_pools(EngineConfig(enhance=EnhanceConfig(enabled=True)), always,
                                        gpus_available=True), cluster_gpus=0.0)


def test_segment_writers_follow_the_segments_in_flight():
    """One writer per segment decoded at once (read_tasks), capped by `writers`, none for images."""
    pipeline = PipelineConfig(read_tasks=3, writers=4)
    assert [pipeline.writers_for(n) for n in (0, 1, 2, 3, 10)] == [0, 1, 2, 3, 3]
    assert PipelineConfig(read_tasks=16, writers=4).writers_for(100) == 4
    # the CPUs the job reserves count the writers it can start
    pipeline = PipelineConfig(read_tasks=1, writers=4, writer_num_cpus=0.5)
    assert pipeline.reserved_cpus(stage_pools(EngineConfig(), pipeline, gpus_available=False)) == 0.8 + 0.5
