"""The Ray Data pipeline side of the benchmark: ``run_job`` on the same video and models.

The timed region starts BEFORE Ray is started (when this process has no Ray yet), so the wall
time includes Ray's start-up, the actors loading their models, the driver embedding the source,
and the final join with the audio: everything a user waits for. Start-up is also recorded on
its own. When Ray is already running (a notebook, the test session), start-up is 0 and the
report says so. A Ray instance started here is shut down at the end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fusion_ray.bench.memory import MemoryPeak, PeakMemorySampler
from fusion_ray.errors import FusionRayError
from fusion_ray.jobs.config import JobConfig

log = logging.getLogger(__name__)


@dataclass
class PipelineResult:
    """One pipeline run."""

    frames: int
    wall_s: float
    """Ray start-up (when started here) + the whole job."""
    ray_startup_s: float
    ray_started_here: bool
    job_wall_s: float
    stages: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per stage: busy_s, idle_s, idle_ratio, ms_per_frame (busy time summed over the pool's actors)."""
    faces_swapped: int = 0
    frames_failed: int = 0
    status: str = ""
    error: str = ""
    stand_in_models: list[str] = field(default_factory=list)
    cluster_cpus: float = 0.0
    cluster_gpus: float = 0.0
    detector_canvas: str = "fit"
    pipeline: dict[str, Any] = field(default_factory=dict)
    first_output_s: float = 0.0
    """From the start of the timed region to the first processed batch reaching the driver."""
    steady_fps: float = 0.0
    """Frames/s between the first and the last processed batch (start-up costs excluded)."""
    memory: MemoryPeak | None = None
    tracking: bool = False
    """Whether the read tasks tracked faces (the serial loop always detects every frame)."""
    tracking_counters: dict[str, int] = field(default_factory=dict)
    """With tracking: full-frame and ROI detections, interpolated faces, tracks."""

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "frames": self.frames, "wall_s": round(self.wall_s, 3), "frames_per_s": round(self.fps, 2),
            "ray_startup_s": round(self.ray_startup_s, 3), "ray_started_here": self.ray_started_here,
            "job_wall_s": round(self.job_wall_s, 3), "first_output_s": round(self.first_output_s, 3),
            "steady_frames_per_s": round(self.steady_fps, 2), "faces_swapped": self.faces_swapped,
            "frames_failed": self.frames_failed, "status": self.status, "error": self.error,
            "stages": self.stages, "stand_in_models": self.stand_in_models,
            "cluster_cpus": self.cluster_cpus, "cluster_gpus": self.cluster_gpus,
            "detector_canvas": self.detector_canvas, "pipeline_config": self.pipeline,
            "memory": self.memory.to_json() if self.memory else None,
            "tracking": self.tracking, "tracking_counters": self.tracking_counters,
        }


def _steady_fps(marks: list[tuple[float, int]]) -> float:
    """Frames/s after the first output batch: (last done - first done) / (last time - first time)."""
    if len(marks) < 2 or marks[-1][0] <= marks[0][0]:
        return 0.0
    return (marks[-1][1] - marks[0][1]) / (marks[-1][0] - marks[0][0])


def run_pipeline(video: Path, sources: Sequence[Path], cfg: JobConfig, *, work_dir: Path,
                 address: str | None = None, num_cpus: int | None = None, shutdown: bool = True,
                 memory_interval_s: float = 0.5, memory_pss: bool = False) -> PipelineResult:
    """Run ``video`` through the Ray Data pipeline; FusionRayError when the job does not finish it."""
    import ray

    from fusion_ray.runners.job import JobItem, run_job
    from fusion_ray.runners.ray.runtime import connect

    work_dir.mkdir(parents=True, exist_ok=True)
    output = work_dir / "pipeline.mp4"
    output.unlink(missing_ok=True)
    # Ray workers started elsewhere are not our descendants: count them by name then.
    with PeakMemorySampler(memory_interval_s, include_ray_processes=address is not None,
                           pss=memory_pss) as sampler:
        start = time.perf_counter()
        started_here = not ray.is_initialized()
        connect(address, num_cpus=num_cpus)
        up = time.perf_counter()
        marks: list[tuple[float, int]] = []
        try:
            report = run_job([JobItem(tuple(sources), video, output)], cfg, force=True,
                             progress=lambda done, total, _report: marks.append((time.perf_counter(), done)))
            end = time.perf_counter()
            resources = ray.cluster_resources()
        finally:
            if started_here and shutdown:
                ray.shutdown()
    item = report.items[0]
    frames = max(report.frames, 1)
    stages = {name: {"busy_s": round(s.busy_s, 3), "idle_s": round(s.idle_s, 3),
                     "idle_ratio": round(s.idle_ratio, 3),
                     "ms_per_frame": round(1000.0 * s.busy_s / frames, 2)}
              for name, s in report.stages.items()}
    result = PipelineResult(
        frames=report.frames, wall_s=end - start, ray_startup_s=up - start if started_here else 0.0,
        ray_started_here=started_here, job_wall_s=report.wall_s, stages=stages,
        faces_swapped=item.faces_swapped, frames_failed=item.frames_failed, status=item.status, error=item.error,
        stand_in_models=list(report.stand_in_models), cluster_cpus=float(resources.get("CPU", 0.0)),
        cluster_gpus=float(resources.get("GPU", 0.0)), detector_canvas=cfg.engine.detector.canvas,
        pipeline=cfg.pipeline.model_dump(mode="json"), memory=sampler.result,
        first_output_s=marks[0][0] - start if marks else 0.0, steady_fps=_steady_fps(marks),
        tracking=cfg.engine.tracking.enabled,
        tracking_counters={"det_full": item.det_full, "det_roi": item.det_roi,
                           "faces_interpolated": item.faces_interpolated, "tracks": item.tracks})
    output.unlink(missing_ok=True)
    if item.status != "done":
        raise FusionRayError(f"the pipeline did not finish {video}: {item.error or item.status}")
    return result
