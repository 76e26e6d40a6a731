"""The models a local runner's compute thread loads come from the chain's steps: with decoders
that track (and so detect), it leaves out the detect step's models only, and keeps the others'
(the swapper weight's target embedding). On STAND-INs (labelled, not real models) and the real SCRFD."""

from __future__ import annotations

from fusion_ray.config import EngineConfig, RuntimeConfig, SwapConfig
from fusion_ray.jobs.config import JobConfig
from fusion_ray.runners.job import JobItem, run_job
from tests.runners.conftest import job_config


def test_a_tracked_video_with_a_swapper_weight_runs_locally(tmp_path, runner_media, scrfd_path, models_config):
    base = job_config(scrfd_path, tracking=True)
    engine = EngineConfig(models=models_config, runtime=RuntimeConfig(providers=["cpu"]), tracking=True,
                          swap=SwapConfig(weight=0.3))
    cfg: JobConfig = base.model_copy(update={"engine": engine})
    item = JobItem((runner_media["source"],), runner_media["clip"], tmp_path / "clip.mp4")
    report = run_job([item], cfg, output_root=tmp_path, report_path=tmp_path / "report.json", runner="local")
    (result,) = report.items
    assert result.status == "done" and result.frames_failed == 0, result.error
    assert result.faces_swapped > 0
