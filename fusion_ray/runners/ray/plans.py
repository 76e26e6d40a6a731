"""Item plans from the planning tasks to the driver, beside the frame stream, never in it.

A planning task (:func:`fusion_ray.runners.ray.stream.plan_items`, a Ray Data read task on any node)
hands what it found of its items (their :class:`~fusion_ray.jobs.items.ItemInfo`) to a
:class:`PlanBoard` actor of the group *before* it emits the units to decode, through
:class:`PostPlans`. The driver takes the new plans from the board (:class:`PlanInbox`) whenever
an output batch holds an item it has not heard of (its plan is then on the board already), every
``poll_s`` otherwise (items with nothing to decode: resumed, refused, animated), and once the
stream has ended. The frame stream carries frames only, and planning adds no hop before the
first frame: a planning task waits for one actor call (a few ms) per chunk of items.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from fusion_ray.jobs.items import ItemInfo
from fusion_ray.jobs.reading import unpack

log = logging.getLogger(__name__)


class PlanBoard:
    """The group's plans as the planning tasks post them (an actor: :func:`start_board`); each
    item's first post counts (a retried task posts again)."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._new: list[tuple[int, bytes]] = []

    def post(self, infos: Sequence[tuple[int, bytes]]) -> None:
        for n, info in infos:
            if n not in self._seen:
                self._seen.add(n)
                self._new.append((n, info))

    def take(self) -> list[tuple[int, bytes]]:
        """The plans posted since the last take."""
        new, self._new = self._new, []
        return new


def start_board() -> Any:
    """A plan board for one group's run (no CPU: it only holds the compact plans), on the driver's
    node (not soft): the loss of a worker node cannot take it, and with it every later planning
    task's post, down."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(PlanBoard).options(num_cpus=0, scheduling_strategy=here).remote()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class PostPlans:
    """What a planning task calls with its items' infos: posted to ``board``, waited for (so a
    plan is on the board before any frame of its item can reach the driver)."""

    board: Any

    def __call__(self, infos: Sequence[tuple[int, bytes]]) -> None:
        ray.get(self.board.post.remote(list(infos)))


class PlanInbox:
    """The driver's side of the board: the plans not taken yet."""

    def __init__(self, board: Any, poll_s: float = 0.5) -> None:
        self.board = board
        self.poll_s = poll_s
        self._last = time.monotonic()

    def take(self, *, now: bool) -> list[tuple[int, ItemInfo]]:
        """The new plans: always when ``now``, else at most every ``poll_s``."""
        if not now and time.monotonic() - self._last < self.poll_s:
            return []
        self._last = time.monotonic()
        return [(n, unpack(info)) for n, info in ray.get(self.board.take.remote())]

    def close(self) -> None:
        """Stop the board; a failure to stop it is logged, never raised (it must not hide the error
        the run is being cleaned up after)."""
        try:
            ray.kill(self.board)
        except Exception as exc:
            log.warning("cannot stop the plan board: %s: %s", type(exc).__name__, exc)
