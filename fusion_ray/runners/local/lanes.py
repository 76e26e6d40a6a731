"""What the local runner's threads share: the frame on its way (:class:`Work`) and the lanes
between the stages (:class:`Lanes`: bounded queues, the stop flag, the busy/idle clocks)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusion_ray.jobs.config import LocalConfig
from fusion_ray.jobs.reading import ReadUnit
from fusion_ray.jobs.track_read import TrackedFrame
from fusion_ray.runners.local.queues import Clock

NO_FRAME = np.zeros((2, 2, 3), np.uint8)
"""The pixels of a frame that could not be read (nothing is written for it)."""


@dataclass
class Work:
    """One frame on its way: its unit, index, pixels, and what happened to it."""

    unit: ReadUnit
    index: int
    frame: np.ndarray
    alpha: bytes = b""
    error: str = ""
    read_failed: bool = False
    tracked: TrackedFrame | None = None
    faces_swapped: int = 0


class Lanes:
    """The queues from the planner to the decoders (units), the decoders to the compute workers
    (decoded), the workers to the encoder (processed) and every thread to the main thread
    (events: small messages only); the stop flag; one clock per stage name."""

    def __init__(self, local: LocalConfig, stage_names: Iterable[str]) -> None:
        self.units: queue.Queue[Any] = queue.Queue(maxsize=local.decoders)
        self.decoded: queue.Queue[Any] = queue.Queue(maxsize=local.decode_queue)
        self.processed: queue.Queue[Any] = queue.Queue(maxsize=local.encode_queue)
        self.events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.stop = threading.Event()
        self.clocks = {name: Clock() for name in stage_names}
        self._left = {"decoders": local.decoders, "workers": local.workers}
        self._left_lock = threading.Lock()

    def last(self, kind: str) -> bool:
        """Whether the calling thread is the last of its kind (``decoders``, ``workers``) to end."""
        with self._left_lock:
            self._left[kind] -= 1
            return self._left[kind] == 0
