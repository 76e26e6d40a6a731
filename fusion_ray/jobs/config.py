"""Pipeline configuration: per-stage resources and the video read/encode settings."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from fusion_ray import options_table
from fusion_ray.config import EngineConfig, _Config, load_yaml_config, parse_config
from fusion_ray.core.facefusion_options import (
    apply_facefusion_options,
    check_options_used,
)
from fusion_ray.errors import ConfigError
from fusion_ray.video.encode import EncodeOptions

FUSED_POOL = "fused"
"""The stage name under which a fused pool (no GPU: one CPU pool runs the chain) reports its
own busy and waiting time."""


class StageResources(_Config):
    """Resources of one ``map_batches`` stage (an actor pool)."""

    num_cpus: float = Field(default=0.25, gt=0.0, description="Logical CPUs per actor (fractions avoid deadlocks on small machines).")
    num_gpus: float = Field(default=0.0, ge=0.0, description="GPUs per actor; set to 0 automatically when the cluster has none.")
    min_actors: int = Field(default=1, ge=1)
    max_actors: int = Field(default=1, ge=1)
    batch_size: int = Field(default=8, ge=1, description="Frames per batch (GPU stages batch all faces of these frames).")
    threads: int | None = Field(default=None, ge=1, description="ONNX Runtime / OpenCV threads per actor; None: ceil(num_cpus).")

    @model_validator(mode="after")
    def _pool_bounds(self) -> StageResources:
        if self.max_actors < self.min_actors:
            raise ValueError(f"max_actors ({self.max_actors}) is below min_actors ({self.min_actors})")
        return self

    @property
    def cpu_budget(self) -> float:
        return float(self.threads) if self.threads is not None else self.num_cpus


@dataclass(frozen=True)
class StagePool:
    """One actor pool a pipeline starts: its stage's name, its resources, and whether its actors
    ask Ray for GPUs (:func:`fusion_ray.runners.ray.build.stage_pools` lists a chain's)."""

    name: str
    resources: StageResources
    gets_gpu: bool = False


class PipelineConfig(_Config):
    """How frames are read, processed and written by the Ray Data pipeline."""

    segment_seconds: float = Field(default=4.0, gt=0.0, description="Target length of a decode/encode segment.")
    block_frames: int = Field(default=16, ge=1, description="Frames per block yielded by a read task.")
    read_num_cpus: float = Field(default=0.2, gt=0.0, description="Logical CPUs per read (decode) task.")
    read_tasks: int = Field(default=2, ge=1, description="Segments decoded at once (bounds decode-ahead).")
    plan_on_driver: int | None = Field(
        default=8, ge=0, description="The first N items of a job are planned on the driver before Ray starts "
        "(a small job of bad inputs fails at once); the others are planned in Ray tasks near the data, "
        "streamed: their first segments run while later items are still being planned. None: plan "
        "every item on the driver.")
    plan_chunk_items: int = Field(default=8, ge=1, description="Items planned by one Ray task.")
    plan_tasks: int = Field(default=2, ge=1, description="Planning tasks run at once.")
    image_task_mb: float = Field(default=16.0, gt=0.0, description="Images are read in groups of about this "
                                 "much decoded pixel data per read task (one block of up to block_frames "
                                 "images at a time), so that the stages get whole batches of them.")
    image_read_tasks: int = Field(default=1, ge=0, description="Image groups read at once, beside the "
                                  "read_tasks video segments (images do not count against that bound).")
    block_mb: float = Field(default=8.0, gt=0.0, description="A block holds at most this much pixel data (and "
                            "Ray Data's target block size), so frames stream a few at a time.")
    object_store_mb: float | None = Field(
        default=128.0, gt=0.0, description="Ray Data's object-store budget for this job's in-flight frames; "
        "keeps memory flat whatever the video length (None: Ray's default, a share of the node's memory).")
    detect: StageResources = StageResources(num_cpus=0.4, min_actors=2, max_actors=2, batch_size=4, threads=1)
    swap: StageResources = StageResources(num_cpus=0.2, num_gpus=0.5, batch_size=16)
    paste: StageResources = StageResources(num_cpus=0.1, batch_size=8)
    enhance: StageResources = StageResources(num_cpus=0.2, num_gpus=0.5, batch_size=8)
    paste_enhanced: StageResources = StageResources(num_cpus=0.1, batch_size=8)
    encode: StageResources = StageResources(num_cpus=0.1, batch_size=16, threads=1)
    gpus: Literal["auto", "always", "never"] = Field(
        default="auto", description="Whether GPU stages ask Ray for GPUs: 'auto' when the cluster has "
        "GPUs when the job starts; 'always' on an autoscaling cluster whose GPU workers start at zero "
        "(the requests make the autoscaler add them); 'never' runs everything on CPU.")
    fuse: Literal["auto", "always", "never"] = Field(
        default="auto", description="Run the whole chain in one CPU actor pool (sized by 'detect'): "
        "'auto' fuses when the cluster has no GPU.")
    writers: int = Field(
        default=4, ge=1, description="At most this many segment writer actors (each encodes the segments "
        "routed to it): a group starts one per segment it decodes at once (read_tasks), no more than its "
        "video segments, and none for images only.")
    writer_num_cpus: float = Field(default=0.1, gt=0.0)
    encode_options: EncodeOptions = EncodeOptions()
    actor_start_timeout_s: int = Field(
        default=600, ge=1, description="Frames are dispatched once every pool's min_actors have started, "
        "waiting at most this long (then the job fails: the cluster cannot host the pools). Without the "
        "wait, the first actor up takes every block of a short clip and Ray Data cancels the others.")
    no_progress_timeout_s: float | None = Field(
        default=None, gt=0.0, description="Fail the job when no progress is made for this long (None: Ray's default).")
    progress_bars: bool = Field(default=True, description="Show Ray Data's progress bars.")


    def resources(self, stage: str, wants_gpu: bool = False) -> StageResources:
        """A chain stage's pool resources: its own section, or (a stage a new step made) the
        swap pool's for a GPU stage and the paste pool's for a CPU one."""
        own = getattr(self, stage, None)
        if isinstance(own, StageResources):
            return own
        return self.swap if wants_gpu else self.paste

    def uses_gpus(self, cluster_gpus: float) -> bool:
        """Whether GPU stages request GPUs, given the GPUs the cluster has now (see ``gpus``)."""
        return self.gpus == "always" or (self.gpus == "auto" and cluster_gpus > 0)

    def fused(self, gpus_available: bool) -> bool:
        """Whether the chain runs fused in one CPU pool (``fuse: auto`` fuses when there is no GPU)."""
        return self.fuse == "always" or (self.fuse == "auto" and not gpus_available)

    def writers_for(self, video_segments: int) -> int:
        """Segment writers for a group with ``video_segments`` segments: the encode load is the
        segments in flight, which the decode-ahead (``read_tasks``) bounds; at most ``writers``."""
        return min(self.writers, self.read_tasks, video_segments)

    def reserved_cpus(self, pools: Sequence[StagePool]) -> float:
        """Logical CPUs the actor pools ``pools`` hold at their minimum size (GPU pools hold CPUs
        too), and the segment writers."""
        writers = self.writers_for(self.read_tasks)  # at most
        return sum(p.resources.num_cpus * p.resources.min_actors for p in pools) + writers * self.writer_num_cpus

    @staticmethod
    def reserved_gpus(pools: Sequence[StagePool]) -> float:
        """GPUs the pools whose actors ask for them hold at their minimum size."""
        return sum(p.resources.num_gpus * p.resources.min_actors for p in pools if p.gets_gpu)

    def check_fits(self, cluster_cpus: float, pools: Sequence[StagePool], *, cluster_gpus: float | None = None) -> None:
        """ConfigError when the pools the pipeline starts (``pools``, the stages it builds: see
        :func:`fusion_ray.runners.ray.build.stage_pools`) leave no CPU for a read task (the job would
        deadlock), or, with ``gpus: auto``, when the GPU pools' min_actors need more GPUs than the
        cluster has (they would never start). With ``gpus: always`` the autoscaler may still add GPUs."""
        reserved = self.reserved_cpus(pools)
        if reserved + self.read_num_cpus > cluster_cpus + 1e-9:
            raise ConfigError(
                f"the pipeline's actor pools reserve {reserved:g} CPUs and a read task needs "
                f"{self.read_num_cpus:g}, but the cluster has {cluster_cpus:g}: lower the stages' "
                "num_cpus or min_actors in the pipeline config (the job would deadlock)")
        if cluster_gpus is None or self.gpus != "auto":
            return
        needed = self.reserved_gpus(pools)
        if needed > cluster_gpus + 1e-9:
            names = "/".join(dict.fromkeys(p.name for p in pools if p.gets_gpu))
            raise ConfigError(
                f"the GPU pools' min_actors need {needed:g} GPUs but the cluster has {cluster_gpus:g}: "
                f"lower num_gpus or min_actors of {names} (or set gpus: always on a cluster that "
                "autoscales GPU workers)")


class LocalConfig(_Config):
    """The local runner (one process, no Ray): decode threads feed bounded queues, compute
    threads run the chain with dynamic batching, one encode thread writes in order.

    Frames held at once are at most ``decode_queue + workers * max_batch + encode_queue``, plus
    the frames a tracking decoder holds back (its look-ahead) and each open segment's encoder
    queue (32 frames; about ``decoders`` segments are open): with the defaults about
    16 + 2 * 8 + 16 + 2 * 32 = 112 frames, 77 MB at 640x360, 700 MB at 1920x1080."""

    decoders: int = Field(default=2, ge=1, description="Decode threads (a video's segments and image items, "
                          "each unit read by one; with tracking each also tracks its segment's faces).")
    workers: int = Field(default=2, ge=1, description="Compute threads running the chain's steps.")
    threads: int = Field(default=1, ge=1, description="ONNX Runtime / OpenCV threads per compute thread.")
    max_batch: int = Field(default=8, ge=1, description="Most frames a compute thread takes at once.")
    batch_wait_ms: float = Field(default=15.0, ge=0.0, description="How long a compute thread waits for more "
                                 "frames once it has one (dynamic batching).")
    decode_queue: int = Field(default=16, ge=1, description="Decoded frames waiting for a compute thread.")
    encode_queue: int = Field(default=16, ge=1, description="Processed frames waiting for the encode thread.")
    auto_ray_frames: int = Field(default=3500, ge=0, description="runner auto: use Ray when the job's known "
                                 "frames (videos' frames, one per image) exceed this; a cluster address "
                                 "always picks Ray (BENCHMARKS.md: the measured crossover).")


class JobConfig(_Config):
    """Everything a dataset job needs: the engine, the pipeline (Ray) and the local runner."""

    engine: EngineConfig = EngineConfig()
    pipeline: PipelineConfig = PipelineConfig()
    local: LocalConfig = LocalConfig()
    allow_truncated: bool = Field(
        default=False, description="Process a truncated video (its container declares more frames than "
        "its file holds) as far as it goes, with a warning and the missing frames in the report; "
        "otherwise such an item fails before any work.")


def load_job_config(path: Path | None) -> JobConfig:
    """configs/pipeline.yaml (sections ``engine``, ``pipeline`` and ``local``), or the defaults."""
    if path is None:
        return JobConfig()
    return load_yaml_config(path, JobConfig)


def with_overrides(cfg: JobConfig, options: str) -> JobConfig:
    """``cfg`` with an item's engine overrides (a JSON object) merged in: EngineConfig's own
    nesting (``{"masks": {"types": ["box", "area"]}}``) or FaceFusion's option names
    (``{"face_mask_types": ["box", "area"], "mouth_mask": true}``)."""
    try:
        overrides = json.loads(options or "{}")
    except json.JSONDecodeError as exc:
        raise ConfigError(f"item options are not valid JSON: {exc}") from exc
    if not isinstance(overrides, dict):
        raise ConfigError(f"item options must be a JSON object, got {options!r}")
    if not overrides:
        return cfg
    names = {option.name for option in options_table.OPTIONS}  # the table's rows as they are now
    facefusion = {key: overrides.pop(key) for key in list(overrides) if key in names}
    engine = _deep_merge(cfg.engine.model_dump(), overrides)
    apply_facefusion_options(facefusion, engine)
    parsed = parse_config(engine, EngineConfig, source="item options")
    check_options_used({k: v for k, v in facefusion.items() if v is not None}, parsed, enhanced=parsed.enhance.enabled)
    return cfg.model_copy(update={"engine": parsed})


def _deep_merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), dict) else value
    return out
