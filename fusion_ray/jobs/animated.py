"""Animated images of a job (GIF, WebP, APNG): each swapped as a whole, apart from the stages.

An animated image is a short video whose every frame must come back into one file, with its
frame durations and loop count. Rather than spread its frames over the stages and gather them
again, :func:`swap_animated` reads it (through ``Storage``, so from a bucket too), swaps every
frame with an in-process engine (:func:`fusion_ray.image.swap_animation`, no tracking) and
publishes the output whole. The planner has checked its size and that the output's format holds
an animation; the read tasks never see it. One function, two placements: the Ray runner starts
it as a task (``animated_task`` in :mod:`fusion_ray.runners.ray.run`), the local runner calls it in
a thread (:mod:`fusion_ray.runners.local.runner`). Nothing here imports Ray.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusion_ray.animation import read_animation
from fusion_ray.config import EngineConfig
from fusion_ray.image import swap_animation
from fusion_ray.imageio import DEFAULT_MAX_PIXELS, check_header
from fusion_ray.jobs.plan import ItemPlan
from fusion_ray.runners.inline import Engine
from fusion_ray.storage import Storage, StorageConfig
from fusion_ray.types import Embedding, SourceIdentity


@dataclass(frozen=True)
class AnimatedResult:
    """What the swap did: frames, faces swapped, and what writing the output changed."""

    frames: int
    faces_swapped: int
    changes: tuple[str, ...]


def swap_animated(plan: ItemPlan, cfg: EngineConfig, identity: SourceIdentity, reference: Embedding | None,
                  storage: StorageConfig, cpu_budget: float = 1.0) -> AnimatedResult:
    """Read, swap every frame of, and publish one animated image (see the module doc), with an
    engine loaded from ``cfg`` whose sessions are sized to ``cpu_budget``."""
    store = Storage(storage)
    name = str(plan.item.target)
    data = store.read_bytes(plan.item.target)
    header = check_header(data, name, DEFAULT_MAX_PIXELS)
    animation = read_animation(data, header, name, DEFAULT_MAX_PIXELS)
    engine = Engine.load(cfg, cpu_budget=cpu_budget)
    swapped = swap_animation(engine, identity, animation, plan.output.suffix, reference=reference, name=name)
    store.write_bytes_atomic(plan.output, swapped.data)
    return AnimatedResult(len(animation.frames), swapped.faces_swapped, tuple(swapped.changes))
