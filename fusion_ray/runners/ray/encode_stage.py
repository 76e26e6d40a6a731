"""The Ray runner's last stage: each segment's frames to its writer actor, image items written,
pixels dropped (see :mod:`fusion_ray.jobs.writer`)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from fusion_ray.jobs.reading import unpack
from fusion_ray.jobs.segment_status import SegmentKey
from fusion_ray.jobs.stages import Batch, Stage, num_rows
from fusion_ray.jobs.writer import IMAGE_WRITE_THREADS, ImageTarget, write_image, writer_for


class EncodeStage(Stage):
    """Last stage: routes video frames to their segment writer, writes image items, drops pixels."""

    name = "encode"
    consumes = ("frame", "alpha", "item", "segment", "index", "read_failed", "image", "seg_start", "seg_count",
                "target")
    retires = ("frame", "alpha", "target")
    """The driver needs no pixels: they leave here, not in a later drop_columns task (a task wants
    a whole CPU, which the actor pools may hold until the reads end)."""

    def __init__(self, writers: Sequence[Any]) -> None:
        self.writers = list(writers)
        self._pool = ThreadPoolExecutor(max_workers=IMAGE_WRITE_THREADS, thread_name_prefix="image-write")
        self._targets: dict[bytes, Any] = {}
        """Unpacked targets (the rows of a video share one)."""
        super().__init__()

    def _target(self, packed: bytes) -> Any:
        if packed not in self._targets:
            if len(self._targets) > 1024:
                self._targets.clear()
            self._targets[packed] = unpack(packed)
        return self._targets[packed]


    def process(self, batch: Batch, errors: list[str]) -> Batch:
        import ray

        n = num_rows(batch)
        groups: dict[SegmentKey, list[int]] = {}
        images: list[int] = []
        for row in range(n):
            if bool(batch["read_failed"][row]):
                continue  # nothing was read: nothing to write
            if bool(batch["image"][row]):
                # A failed image is not written: the job reports it failed, and an output
                # file would make a re-run skip it.
                if not errors[row]:
                    images.append(row)
            else:
                groups.setdefault((int(batch["item"][row]), int(batch["segment"][row])), []).append(row)
        if images:  # encoded and written in parallel (the encoders and the uploads release the GIL)
            jobs = [(row, self._target(batch["target"][row])) for row in images]
            list(self._pool.map(lambda job: self._write_image(batch, errors, *job), jobs))
        pending = []
        for key, rows in groups.items():
            first = rows[0]
            start, count = int(batch["seg_start"][first]), int(batch["seg_count"][first])
            writer = self.writers[writer_for(key, len(self.writers))]
            frames = [np.asarray(batch["frame"][r]) for r in rows]
            indices = [int(batch["index"][r]) for r in rows]
            faces = [int(batch["faces_swapped"][r]) if "faces_swapped" in batch else 0 for r in rows]
            pending.append(writer.push.remote(key, start, count, indices, frames, self._target(batch["target"][first]),
                                              [errors[r] for r in rows], faces))
        if pending:
            ray.get(pending)  # back-pressure: the stage waits for its writers
        return {}

    def _write_image(self, batch: Batch, errors: list[str], row: int, target: ImageTarget) -> None:
        try:
            write_image(np.asarray(batch["frame"][row]), batch["alpha"][row], target)
        except Exception as exc:
            errors[row] = f"{self.name}: {type(exc).__name__}: {exc}"
