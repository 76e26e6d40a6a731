"""The pipeline configuration: the checked-in file and the Ray Data settings of a job."""

from ray.data import DataContext

from fusion_ray.pipeline.config import PipelineConfig, load_job_config
from fusion_ray.pipeline.job import _data_context
from tests.conftest import REPO_ROOT


def test_checked_in_pipeline_config_loads():
    cfg = load_job_config(REPO_ROOT / "configs" / "pipeline.yaml")
    assert cfg.pipeline.detect.min_actors == 2 and cfg.engine.detector.canvas == "fit"
    assert cfg.pipeline == PipelineConfig()  # the file documents the defaults
    cfg.pipeline.check_fits(2.0, enhance=True, gpus_available=False)  # fits this 2-core machine


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
