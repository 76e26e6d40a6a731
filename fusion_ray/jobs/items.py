"""What planning an item yields, without Ray: its info for the driver and the units to decode.

``plan_one`` plans an item the driver left unplanned (``plan_item``), gives it its parts key,
makes its output folders, finds a video's segments an earlier run finished (to resume) and
lists the units still to read (none for an animated image: the runner swaps it whole,
:mod:`fusion_ray.jobs.animated`). The Ray planning tasks (:mod:`fusion_ray.runners.ray.stream`) and
the local runner call it.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Mapping
from dataclasses import dataclass

from fusion_ray.errors import describe_error
from fusion_ray.imageio import FORMAT_CHANGES_KEY
from fusion_ray.jobs.config import JobConfig
from fusion_ray.jobs.parts import ResumedSegment, finished_segments
from fusion_ray.jobs.plan import ItemPlan, Output, plan_item, with_parts_key
from fusion_ray.jobs.reading import ReadUnit
from fusion_ray.jobs.report import ItemKind, ItemStatus
from fusion_ray.jobs.writer import ImageTarget, VideoTarget
from fusion_ray.storage import Location, Storage, StorageConfig


def pack_target(value: VideoTarget | ImageTarget) -> bytes:
    """A unit's target for its rows' ``target`` column (:func:`fusion_ray.jobs.reading.unpack`
    reads it); targets hold plain values, so plain pickle does (no Ray here)."""
    return pickle.dumps(value)


@dataclass(frozen=True)
class ItemInfo:
    """What planning found of one item, for the driver: compact (no frame timestamps)."""

    plan: ItemPlan
    resumed: Mapping[int, ResumedSegment] = dataclasses.field(default_factory=dict)
    """Segments an earlier run finished, by index: the file and its frames' counts."""


@dataclass(frozen=True)
class GroupContext:
    """What the planning tasks need to know of the group."""

    cfg: JobConfig
    models: str
    """The group's :func:`fusion_ray.jobs.parts.models_fingerprint`."""
    source_of: Mapping[int, str]
    metadata: Mapping[str, str]
    """The provenance written into every image output."""
    storage: StorageConfig = StorageConfig()
    output_root: Output | None = None
    force: bool = False


def plan_one(given: ItemPlan, ctx: GroupContext, storage: Storage) -> tuple[ItemInfo, list[ReadUnit]]:
    """An item's info and the units still to decode (none when it does not run)."""
    plan = given
    if not plan.planned:
        plan = with_parts_key(plan_item(given.index, given.item, ctx.cfg, output_root=ctx.output_root,
                                        force=ctx.force, storage=storage), ctx.cfg, ctx.models)
    resumed: dict[int, ResumedSegment] = {}
    units: list[ReadUnit] = []
    if plan.runs:
        try:
            make_folders(plan, storage)
            if plan.kind is ItemKind.VIDEO:
                if not plan.parts_key:
                    raise ValueError(f"item {plan.index}: a video planned without its parts key")
                resumed = finished_segments(storage, plan.work_dir, plan.segments)
                units = video_units(plan, ctx, set(resumed))
            elif plan.frames == 1:  # an animated image is swapped whole, apart (jobs.animated)
                units = [ReadUnit(plan.index, str(plan.item.target), ctx.source_of[plan.index], None, plan.frame_hw,
                                  target=image_target(plan, ctx))]
        except Exception as exc:  # this item fails alone (a model or Ray error is no planning error)
            plan = dataclasses.replace(plan, status=ItemStatus.FAILED, error=describe_error(exc))
            units = []
    compact = dataclasses.replace(plan, frame_times=None, cause=None)
    return ItemInfo(compact, resumed), units


def video_units(plan: ItemPlan, ctx: GroupContext, resumed: set[int]) -> list[ReadUnit]:
    video = plan.video
    assert video is not None
    target = pack_target(VideoTarget(video.fps, video.width, video.height, str(plan.work_dir), ctx.storage,
                               plan.pix_fmt))
    source_id = ctx.source_of[plan.index]
    return [ReadUnit(plan.index, str(plan.item.target), source_id, s, plan.frame_hw, float(video.fps), target)
            for s in plan.segments if s.index not in resumed]


def image_target(plan: ItemPlan, ctx: GroupContext) -> bytes:
    """An image's output and its metadata: the provenance, and what writing it changed (as the
    image command), packed."""
    metadata = dict(ctx.metadata)
    if plan.format_changes:
        metadata[FORMAT_CHANGES_KEY] = "; ".join(plan.format_changes)
    return pack_target(ImageTarget(str(plan.output), metadata, ctx.storage))


def make_folders(plan: ItemPlan, storage: Storage) -> None:
    """The output's folder and a video's parts folder; in a bucket there are no folders to make."""
    if isinstance(plan.output, Location) or isinstance(plan.work_dir, Location):
        return
    plan.output.parent.mkdir(parents=True, exist_ok=True)
    if plan.kind is ItemKind.VIDEO:
        plan.work_dir.mkdir(parents=True, exist_ok=True)


