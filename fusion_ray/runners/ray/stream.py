"""A group's input as a stream of Ray Data tasks: items planned near the data, then decoded.

Past the few items planned on the driver (``plan_on_driver``), nothing per item happens on
the driver before frames move:

- :class:`ItemSource` is a datasource whose read tasks each plan a few items
  (:func:`plan_items`): ``plan_item`` (probe, keyframe segments, checks) where the driver
  left an item unplanned, the parts key, the output folders, and a video's segments finished
  by an earlier run (:mod:`fusion_ray.jobs.parts`). It posts the items' :class:`ItemInfo`
  (the plan without its frame timestamps, and the resumed segments) to the driver beside the
  stream (:mod:`fusion_ray.runners.ray.plans`), then emits one row per unit to decode (a video
  segment still to do, or a group of images sized by bytes).
- :func:`decode_units` (``map_batches``, one row at a time, at most ``read_tasks +
  image_read_tasks`` at once: the decode-ahead bound) decodes a unit into frame blocks
  (:mod:`fusion_ray.runners.ray.datasource`). Every row of the stream is a frame (or a unit's
  ``read_failed`` row).

Later items are planned while the first segments are processed, so the time to the first
frame does not grow with the number of items.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray.data.block import Block, BlockAccessor, BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from fusion_ray.jobs.items import GroupContext, ItemInfo, plan_one
from fusion_ray.jobs.plan import ItemPlan
from fusion_ray.jobs.track_read import TrackedRead
from fusion_ray.runners.ray.datasource import (
    ReadUnit,
    image_groups,
    object_column,
    pack,
    read_images,
    read_unit,
    unpack,
)
from fusion_ray.storage import Storage, StorageConfig

__all__ = ["GroupContext", "ItemInfo", "ItemSource", "Units", "chunks", "decode_units", "one_row_blocks",
           "plan_items"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Units:
    """The read units of one decode call: a video segment, or a group of images."""

    units: tuple[ReadUnit, ...]


PostInfos = Callable[[Sequence[tuple[int, bytes]]], None]
"""Hands (item, packed :class:`ItemInfo`) pairs to the driver (:class:`~fusion_ray.runners.ray.plans.PostPlans`)."""


def plan_items(items: Sequence[ItemPlan], ctx: GroupContext, post: PostInfos) -> Iterator[Block]:
    """One read task: plan ``items`` (see the module docstring), ``post`` their infos, then one
    block of rows, one per unit to decode (a row with no unit when nothing is decoded)."""
    storage = Storage(ctx.storage)
    infos: list[ItemInfo] = []
    videos: list[ReadUnit] = []
    images: list[ReadUnit] = []
    for given in items:
        info, units = plan_one(given, ctx, storage)
        infos.append(info)
        videos += [u for u in units if u.segment is not None]
        images += [u for u in units if u.segment is None]
    groups = [(u,) for u in videos] + [tuple(g) for g in image_groups(images, int(ctx.cfg.pipeline.image_task_mb * 2**20))]
    post([(i.plan.index, pack(i)) for i in infos])
    rows: dict[str, list[Any]] = {"item": [], "units": []}
    for group in groups or [()]:
        rows["item"].append(group[0].item if group else items[0].index)
        rows["units"].append(pack(Units(group)) if group else b"")
    yield BlockAccessor.batch_to_block({"item": np.asarray(rows["item"], np.int64),
                                        "units": object_column(rows["units"])})


def decode_units(batch: Mapping[str, Any], *, block_frames: int, block_mb: float, tracking: TrackedRead | None,
                 storage: StorageConfig) -> Iterator[Block]:
    """``map_batches`` over the planned rows, one at a time: a unit is decoded into blocks of at
    most ``block_frames`` frames and ``block_mb`` (a row with no unit yields nothing)."""
    for units in batch["units"]:
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

    def __init__(self, items: Sequence[ItemPlan], ctx: GroupContext, chunk: int, post: PostInfos) -> None:
        super().__init__()
        if not items:
            raise ValueError("ItemSource needs at least one item")
        self.items = list(items)
        self.ctx = ctx
        self.chunk = chunk
        self.post = post

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
            tasks.append(ReadTask(functools.partial(plan_items, chunk, ctx, self.post), metadata))
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
