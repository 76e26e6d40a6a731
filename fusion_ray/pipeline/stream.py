"""A group's input as a stream of Ray Data tasks: items planned near the data, then decoded.

Past the few items planned on the driver (``plan_on_driver``), nothing per item happens on
the driver before frames move:

- :class:`ItemSource` is a datasource whose read tasks each plan a few items
  (:func:`plan_items`): ``plan_item`` (probe, keyframe segments, checks) where the driver
  left an item unplanned, the parts key, the output folders, and a video's segments finished
  by an earlier run (:mod:`fusion_ray.pipeline.parts`). It emits one row per unit to decode
  (a video segment still to do, or a group of images sized by bytes); the first row also
  carries the items' :class:`ItemInfo` (the plan without its frame timestamps, and the
  resumed segments).
- :func:`decode_units` (``map_batches``, one row at a time, at most ``read_tasks +
  image_read_tasks`` at once: the decode-ahead bound) turns the infos into frame-less info
  rows that every stage skips and that tell the driver about their items, and decodes a unit
  into frame blocks (:mod:`fusion_ray.pipeline.datasource`).

Later items are planned while the first segments are processed, so the time to the first
frame does not grow with the number of items.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray.data.block import Block, BlockAccessor, BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from fusion_ray.errors import describe_error
from fusion_ray.imageio import FORMAT_CHANGES_KEY
from fusion_ray.pipeline.config import JobConfig
from fusion_ray.pipeline.datasource import (
    ReadUnit,
    image_groups,
    info_block,
    object_column,
    pack,
    read_images,
    read_unit,
    unpack,
)
from fusion_ray.pipeline.parts import ResumedSegment, finished_segments
from fusion_ray.pipeline.plan import ItemPlan, Output, plan_item, with_parts_key
from fusion_ray.pipeline.report import ItemKind, ItemStatus
from fusion_ray.pipeline.track_read import TrackedRead
from fusion_ray.pipeline.writer import ImageTarget, VideoTarget
from fusion_ray.storage import Location, Storage, StorageConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ItemInfo:
    """What planning found of one item, for the driver: compact (no frame timestamps)."""

    plan: ItemPlan
    resumed: Mapping[int, ResumedSegment] = dataclasses.field(default_factory=dict)
    """Segments an earlier run finished, by index: the file and its frames' counts."""


@dataclass(frozen=True)
class Units:
    """The read units of one decode call: a video segment, or a group of images."""

    units: tuple[ReadUnit, ...]


@dataclass(frozen=True)
class GroupContext:
    """What the planning tasks need to know of the group."""

    cfg: JobConfig
    models: str
    """The group's :func:`fusion_ray.pipeline.parts.models_fingerprint`."""
    source_of: Mapping[int, str]
    metadata: Mapping[str, str]
    """The provenance written into every image output."""
    storage: StorageConfig = StorageConfig()
    output_root: Output | None = None
    force: bool = False


def plan_items(items: Sequence[ItemPlan], ctx: GroupContext) -> Iterator[Block]:
    """One read task: plan ``items`` (see the module docstring); one block of rows, one per unit
    to decode. The infos of all the items ride on the first row (decoded as one info block:
    few rows per item travel the pipeline), or on a row of their own when nothing is decoded."""
    storage = Storage(ctx.storage)
    infos: list[ItemInfo] = []
    videos: list[ReadUnit] = []
    images: list[ReadUnit] = []
    for given in items:
        info, units = _plan_one(given, ctx, storage)
        infos.append(info)
        videos += [u for u in units if u.segment is not None]
        images += [u for u in units if u.segment is None]
    groups = [(u,) for u in videos] + [tuple(g) for g in image_groups(images, int(ctx.cfg.pipeline.image_task_mb * 2**20))]
    rows: dict[str, list[Any]] = {"item": [], "infos": [], "units": []}
    for k, group in enumerate(groups or [()]):
        rows["item"].append(group[0].item if group else items[0].index)
        rows["infos"].append(pack(tuple((i.plan.index, pack(i)) for i in infos)) if k == 0 else b"")
        rows["units"].append(pack(Units(group)) if group else b"")
    yield BlockAccessor.batch_to_block({"item": np.asarray(rows["item"], np.int64),
                                        "infos": object_column(rows["infos"]), "units": object_column(rows["units"])})


def _plan_one(given: ItemPlan, ctx: GroupContext, storage: Storage) -> tuple[ItemInfo, list[ReadUnit]]:
    """An item's info and the units still to decode (none when it does not run)."""
    plan = given
    if not plan.planned:
        plan = with_parts_key(plan_item(given.index, given.item, ctx.cfg, output_root=ctx.output_root,
                                        force=ctx.force, storage=storage), ctx.cfg, ctx.models)
    resumed: dict[int, ResumedSegment] = {}
    units: list[ReadUnit] = []
    if plan.runs:
        try:
            _make_folders(plan, storage)
            if plan.kind is ItemKind.VIDEO:
                if not plan.parts_key:
                    raise ValueError(f"item {plan.index}: a video planned without its parts key")
                resumed = finished_segments(storage, plan.work_dir, plan.segments)
                units = _video_units(plan, ctx, set(resumed))
            elif plan.frames == 1:  # an animated image is swapped whole by the driver's task (pipeline.animated)
                units = [ReadUnit(plan.index, str(plan.item.target), ctx.source_of[plan.index], None, plan.frame_hw,
                                  target=_image_target(plan, ctx))]
        except Exception as exc:  # this item fails alone (a model or Ray error is no planning error)
            plan = dataclasses.replace(plan, status=ItemStatus.FAILED, error=describe_error(exc))
            units = []
    compact = dataclasses.replace(plan, frame_times=None, cause=None)
    return ItemInfo(compact, resumed), units


def _video_units(plan: ItemPlan, ctx: GroupContext, resumed: set[int]) -> list[ReadUnit]:
    video = plan.video
    assert video is not None
    target = pack(VideoTarget(video.fps, video.width, video.height, str(plan.work_dir), ctx.storage,
                               plan.pix_fmt))
    source_id = ctx.source_of[plan.index]
    return [ReadUnit(plan.index, str(plan.item.target), source_id, s, plan.frame_hw, float(video.fps), target)
            for s in plan.segments if s.index not in resumed]


def _image_target(plan: ItemPlan, ctx: GroupContext) -> bytes:
    """An image's output and its metadata: the provenance, and what writing it changed (as the
    image command), packed."""
    metadata = dict(ctx.metadata)
    if plan.format_changes:
        metadata[FORMAT_CHANGES_KEY] = "; ".join(plan.format_changes)
    return pack(ImageTarget(str(plan.output), metadata, ctx.storage))


def _make_folders(plan: ItemPlan, storage: Storage) -> None:
    """The output's folder and a video's parts folder; in a bucket there are no folders to make."""
    if isinstance(plan.output, Location) or isinstance(plan.work_dir, Location):
        return
    plan.output.parent.mkdir(parents=True, exist_ok=True)
    if plan.kind is ItemKind.VIDEO:
        plan.work_dir.mkdir(parents=True, exist_ok=True)


def decode_units(batch: Mapping[str, Any], *, block_frames: int, block_mb: float, tracking: TrackedRead | None,
                 storage: StorageConfig) -> Iterator[Block]:
    """``map_batches`` over the planned rows, one at a time: an info row passes as one frame-less
    row, a unit is decoded into blocks of at most ``block_frames`` frames and ``block_mb``."""
    for infos, units in zip(batch["infos"], batch["units"], strict=True):
        if infos:
            yield info_block(unpack(infos), tracking is not None)
        if not units:
            continue
        group = unpack(units).units
        largest = max(u.frame_hw[0] * u.frame_hw[1] * 3 for u in group)
        frames = max(1, min(block_frames, int(block_mb * 2**20 // max(largest, 1))))
        if group[0].segment is None:
            yield from read_images(group, frames, tracking is not None, storage)
        else:
            yield from read_unit(group[0], frames, tracking, storage)


class ItemSource(Datasource):
    """The group's items, ``chunk`` per read task (each plans its items: :func:`plan_items`)."""

    def __init__(self, items: Sequence[ItemPlan], ctx: GroupContext, chunk: int) -> None:
        super().__init__()
        if not items:
            raise ValueError("ItemSource needs at least one item")
        self.items = list(items)
        self.ctx = ctx
        self.chunk = chunk

    def estimate_inmemory_data_size(self) -> int | None:
        return None

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        tasks = []
        for start in range(0, len(self.items), self.chunk):
            chunk = self.items[start:start + self.chunk]
            # each task carries its own items' source ids, not the whole job's
            ctx = dataclasses.replace(self.ctx, source_of={p.index: self.ctx.source_of[p.index] for p in chunk})
            metadata = BlockMetadata(num_rows=None, size_bytes=None, input_files=None, exec_stats=None)
            tasks.append(ReadTask(functools.partial(plan_items, chunk, ctx), metadata))
        return tasks

    def get_name(self) -> str:
        return "PlanItems"


def one_row_blocks(ds: Any, num_cpus: float) -> Any:
    """``ds`` split into one-row blocks, so that each unit is its own decode task (Ray Data
    bundles a block's rows into one task: a plan block's segments would be decoded one after
    another). The split is Ray Data's streaming repartition; its tasks would ask for a whole
    CPU, which the actor pools of a small machine may hold: they ask for ``num_cpus`` (Ray
    Data has no public argument for it; this sets its logical operator's remote args)."""
    ds = ds.repartition(target_num_rows_per_block=1)
    ds._logical_plan.dag.ray_remote_args["num_cpus"] = num_cpus  # a frozen dataclass: its dict is set in place
    return ds


def chunks(count: int, chunk: int) -> int:
    """Read tasks for ``count`` items."""
    return max(1, -(-count // chunk))
