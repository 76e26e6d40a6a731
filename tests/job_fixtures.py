"""Fixtures of the job tests (tests/jobs and tests/runners): the engine and job configs."""

import pytest

from fusion_ray.config import EngineConfig, RuntimeConfig
from fusion_ray.jobs.config import JobConfig, PipelineConfig
from fusion_ray.video import EncodeOptions


@pytest.fixture(scope="module")
def engine_cfg(models_config):
    # Per-frame detection (tracking off): the job tests compare each frame with the engine's, and
    # frames without a face must pass through (tracking would fill a gap of at most G frames).
    # tests/runners/test_tracking_job.py runs jobs with tracking.
    return EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), tracking=False)


@pytest.fixture(scope="module")
def job_cfg(engine_cfg):
    pipeline = PipelineConfig(segment_seconds=0.5, block_frames=8, progress_bars=False,
                              encode_options=EncodeOptions(preset="ultrafast", crf=12), writers=2,
                              no_progress_timeout_s=120)
    return JobConfig(engine=engine_cfg, pipeline=pipeline)

