"""Animated images of a job (GIF, WebP, APNG): each swapped as a whole in one Ray task.

An animated image is a short video whose every frame must come back into one file, with its
frame durations and loop count. Rather than spread its frames over the stages and gather them
again, a task reads it (through ``Storage``, so from a bucket too), swaps every frame with an
in-process engine (:func:`fusion_ray.image.swap_animation`, no tracking) and publishes the
output whole. The planner has checked its size and that the output's format holds an
animation; the read tasks never see it.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray

from fusion_ray.animation import read_animation
from fusion_ray.config import EngineConfig
from fusion_ray.engine import Engine
from fusion_ray.image import swap_animation
from fusion_ray.imageio import DEFAULT_MAX_PIXELS, check_header
from fusion_ray.pipeline.plan import ItemPlan
from fusion_ray.storage import Storage, StorageConfig
from fusion_ray.types import Embedding, SourceIdentity


@dataclass(frozen=True)
class AnimatedResult:
    """What the task did: frames, faces swapped, and what writing the output changed."""

    frames: int
    faces_swapped: int
    changes: tuple[str, ...]


def swap_animated(plan: ItemPlan, cfg: EngineConfig, identity: SourceIdentity, reference: Embedding | None,
                  storage: StorageConfig) -> AnimatedResult:
    """Read, swap every frame of, and publish one animated image (see the module doc)."""
    store = Storage(storage)
    name = str(plan.item.target)
    data = store.read_bytes(plan.item.target)
    header = check_header(data, name, DEFAULT_MAX_PIXELS)
    animation = read_animation(data, header, name, DEFAULT_MAX_PIXELS)
    engine = Engine.load(cfg.in_ray_actor(gets_gpu=False), cpu_budget=1)
    swapped = swap_animation(engine, identity, animation, plan.output.suffix, reference=reference, name=name)
    store.write_bytes_atomic(plan.output, swapped.data)
    return AnimatedResult(len(animation.frames), swapped.faces_swapped, tuple(swapped.changes))


animated_task = ray.remote(num_cpus=1, max_retries=0)(swap_animated)
"""The Ray task (a whole CPU: the engine's sessions are sized to one)."""
