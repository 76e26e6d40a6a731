"""The local runner: one group of a job in one process, no Ray (the seeds' producer/consumer design).

::

    planner thread   plans each item (``plan_one``: probe, parts key, resumed segments), in order
         | units (bounded)
    decode threads   a video segment (tracked when tracking is on) or an image each
         | decoded frames (bounded: ``local.decode_queue``)
    compute threads  the chain's steps (:class:`~fusion_ray.core.steps.Chain`) on dynamic batches:
                     at most ``max_batch`` frames, waiting ``batch_wait_ms`` after the first
         | processed frames (bounded: ``local.encode_queue``)
    encode thread    segments in order through a :class:`~fusion_ray.pipeline.writer.SegmentWriter`
                     (its own encoder thread per open segment), images written whole
         | slim rows, item infos, outcomes (events)
    main thread      the job's bookkeeping (:class:`~fusion_ray.pipeline.group.GroupBook`, as the
                     Ray runner's driver): report, progress, segments finished, videos joined with
                     their audio (``join_item``), animated images swapped whole (``swap_animated``), in a small thread pool

ONNX Runtime, PyAV and OpenCV release the GIL, so the threads use the cores. Memory is bounded
by the queues (:class:`~fusion_ray.pipeline.config.LocalConfig` says how much). A frame that
fails passes through unchanged and is counted; segments are published whole into the parts
folder, so a re-run after ``kill -9`` resumes them; on Ctrl-C, SIGTERM or a failure every thread
stops, the open segments are aborted and the finished ones stay. Nothing here imports Ray.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.steps import Chain, Rows, Tools, run_steps
from fusion_ray.errors import is_fatal
from fusion_ray.pipeline.animated import swap_animated
from fusion_ray.pipeline.config import LocalConfig
from fusion_ray.pipeline.finalise import join_item
from fusion_ray.pipeline.group import GroupBook, PreparedGroup, ProgressCallback, prepare_group
from fusion_ray.pipeline.items import plan_one
from fusion_ray.pipeline.plan import GroupPlan, ItemPlan, JobPlan
from fusion_ray.pipeline.reading import ReadUnit, message_of, read_image_at, segment_frames, unpack
from fusion_ray.pipeline.report import TRACKING_COUNTERS, ItemKind, ItemResult, JobReport
from fusion_ray.pipeline.track_read import READ_STAGE, TrackedFrame, TrackedRead, faces_of
from fusion_ray.pipeline.tracker import SegmentKey
from fusion_ray.pipeline.writer import SegmentWriter, write_image
from fusion_ray.runners.queues import END, Clock, Stopped, get, put, take_batch
from fusion_ray.storage import Storage

log = logging.getLogger(__name__)

COMPUTE_POOL = "compute"
"""The report's name for the compute threads as a pool (busy on batches, idle waiting for frames)."""
STOP_TIMEOUT_S = 60.0
_NO_FRAME = np.zeros((2, 2, 3), np.uint8)


def run_group_local(plan: JobPlan, group: GroupPlan, results: Sequence[ItemResult], report: JobReport,
                    progress: ProgressCallback | None) -> None:
    """Embed the group's sources, then run its items in this process (see the module docstring)."""
    prepared = prepare_group(plan, group, results, report)
    LocalRun(prepared, results, report, group.cfg.local).execute(progress)


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


class LocalRun(GroupBook):
    """One group's run in this process (see the module docstring)."""

    def __init__(self, prepared: PreparedGroup, results: Sequence[ItemResult], report: JobReport,
                 local: LocalConfig) -> None:
        super().__init__(prepared.items, results, report)
        self.ctx, self.sources, self.comment, self.local = prepared.ctx, prepared.sources, prepared.comment, local
        engine = self.ctx.cfg.engine
        self.chain = Chain.of(engine)
        self.tracking = (TrackedRead(engine.in_ray_actor(False), self.sources.reference, float(local.threads))
                         if engine.tracking.enabled and self.may_have(ItemKind.VIDEO) else None)
        self.events: queue.Queue[tuple[Any, ...]] = queue.Queue()  # small messages only
        self.units: queue.Queue[Any] = queue.Queue(maxsize=local.decoders)
        self.decoded: queue.Queue[Any] = queue.Queue(maxsize=local.decode_queue)
        self.processed: queue.Queue[Any] = queue.Queue(maxsize=local.encode_queue)
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.writer = SegmentWriter(self.ctx.cfg.pipeline.encode_options)
        self.finisher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="local-finish")
        self.pending = 0
        """Segments finishing, joins and animated images running (their outcome is an event to come)."""
        self.clocks = {name: Clock() for name in self._stage_names()}
        self._left = {"decoders": local.decoders, "workers": local.workers}
        self._left_lock = threading.Lock()

    def _stage_names(self) -> list[str]:
        reads = [READ_STAGE] if self.tracking is not None else []
        return ["decode", *reads, *self.chain.names, COMPUTE_POOL, "encode"]

    # ------------------------------------------------------------ the main thread
    def execute(self, progress: ProgressCallback | None) -> None:
        """Run every item; the cleanup always runs (a failure of any thread is raised here)."""
        if not self.items:
            return
        threads = [self._thread(self._plan, "local-plan")]
        threads += [self._thread(self._decode, f"local-decode-{k}") for k in range(self.local.decoders)]
        threads += [self._thread(self._compute, f"local-compute-{k}") for k in range(self.local.workers)]
        threads += [self._thread(self._encode, "local-encode")]
        try:
            for thread in threads:
                thread.start()
            self._drive(progress)
            self.fail_incomplete()
        finally:
            self.stop.set()
            for thread in threads:
                thread.join(timeout=STOP_TIMEOUT_S)
            self.finisher.shutdown(wait=True, cancel_futures=True)
            # every segment still open (finished ones stay in the parts folder, for a re-run)
            self.writer.abort([*self.open_segments(), *self.writer.open])
            self.report.frames += self.done_frames
            self.report.add_times(self.clocks, steps={READ_STAGE, *self.chain.names})

    def _drive(self, progress: ProgressCallback | None) -> None:
        """Fold the events until every frame is encoded and every segment and join has ended."""
        encoded = False
        while not (encoded and self.pending == 0):
            if self.failure is not None:
                raise self.failure
            try:
                event = self.events.get(timeout=0.1)
            except queue.Empty:
                continue
            kind = event[0]
            if kind == "info":
                self.register(event[1], event[2])
            elif kind == "rows":
                self.fold(event[1])
            elif kind == "segment":
                self.pending -= 1
                self.segment_finished(event[1], event[2], event[3])
            elif kind == "joined":
                self.pending -= 1
                self.joined(event[1], event[2])
            elif kind == "animated":
                self.pending -= 1
                self.animated(event[1], event[2], event[3])
            elif kind == "encoded":
                encoded = True
            if progress is not None and kind == "rows":
                progress(self.done_frames, max(self.total, self.done_frames), self.report)

    def finish_segment(self, key: SegmentKey) -> None:
        self.pending += 1
        self.finisher.submit(self._finish, key)

    def _finish(self, key: SegmentKey) -> None:
        try:
            path, _ = self.writer.finish(key)
        except Exception as exc:
            self.events.put(("segment", key, None, exc))
        else:
            self.events.put(("segment", key, path, None))

    def start_join(self, n: int, plan: ItemPlan, paths: list[Path]) -> None:
        self.pending += 1
        self.finisher.submit(self._join, n, plan, paths)

    def _join(self, n: int, plan: ItemPlan, paths: list[Path]) -> None:
        try:
            join_item(plan, paths, self.comment, self.ctx.storage)
        except Exception as exc:
            self.events.put(("joined", n, exc))
        else:
            self.events.put(("joined", n, None))

    def start_animation(self, plan: ItemPlan) -> None:
        self.pending += 1
        self.finisher.submit(self._animate, plan)

    def _animate(self, plan: ItemPlan) -> None:
        identity = self.sources.identities[self.ctx.source_of[plan.index]]
        try:
            done = swap_animated(plan, self.ctx.cfg.engine, identity, self.sources.reference, self.ctx.storage)
            self.events.put(("animated", plan.index, done, None))
        except Exception as exc:
            self.events.put(("animated", plan.index, None, exc))

    # ------------------------------------------------------------ the threads
    def _thread(self, body: Any, name: str) -> threading.Thread:
        def run() -> None:
            try:
                body()
            except Stopped:
                pass
            except BaseException as exc:  # raised by the main thread; every thread stops
                self.failure = self.failure or exc
                self.stop.set()

        return threading.Thread(target=run, name=name, daemon=True)

    def _last(self, kind: str) -> bool:
        """Whether the calling thread is the last of its kind to end."""
        with self._left_lock:
            self._left[kind] -= 1
            return self._left[kind] == 0

    def _plan(self) -> None:
        storage = Storage(self.ctx.storage)
        for item in self.items:
            info, units = plan_one(item, self.ctx, storage)
            self.events.put(("info", item.index, info))
            for unit in units:
                put(self.units, unit, self.stop)
        for _ in range(self.local.decoders):
            put(self.units, END, self.stop)

    def _decode(self) -> None:
        storage = Storage(self.ctx.storage)
        models = self.tracking.load_models() if self.tracking is not None else None
        clock = self.clocks["decode"]
        while True:
            unit, waited = get(self.units, self.stop)
            clock.add(idle_s=waited)
            if unit is END:
                break
            if unit.segment is None:
                self._read_image(unit, storage, clock)
            else:
                self._read_segment(unit, models, clock)
        if self._last("decoders"):
            for _ in range(self.local.workers):
                put(self.decoded, END, self.stop)

    def _read_image(self, unit: ReadUnit, storage: Storage, clock: Clock) -> None:
        started = time.perf_counter()
        try:
            image = read_image_at(unit.path, storage)
            alpha = image.alpha.tobytes() if image.alpha is not None else b""
            work = Work(unit, 0, image.frame, alpha)
        except Exception as exc:  # a corrupt or vanished image fails that item only
            log.warning("cannot read %s: %s", unit.path, message_of(exc))
            work = Work(unit, 0, _NO_FRAME, error=f"read: {message_of(exc)}", read_failed=True)
        clock.add(busy_s=time.perf_counter() - started, idle_s=put(self.decoded, work, self.stop))

    def _read_segment(self, unit: ReadUnit, models: ModelSet | None, clock: Clock) -> None:
        """Decode (and track) a segment; its time is decoding, less what tracking took, plus the
        waits for room in the queue (idle)."""
        assert unit.segment is not None
        next_index = unit.segment.start_frame
        spent = tracked = waited = 0.0
        started = time.perf_counter()
        try:
            for row in segment_frames(unit, self.tracking, self.ctx.storage, models):
                spent += time.perf_counter() - started
                tracked += row.track_ms / 1000.0
                waited += put(self.decoded, Work(unit, row.index, row.frame,
                                                 tracked=row if self.tracking is not None else None), self.stop)
                next_index = row.index + 1
                started = time.perf_counter()
        except Stopped:
            raise
        except Exception as exc:  # a decode error fails this item only
            if self.tracking is not None and is_fatal(exc):
                raise
            log.warning("cannot read %s (segment %d): %s", unit.path, unit.segment.index, message_of(exc))
            failed = Work(unit, next_index, _NO_FRAME, error=f"read: {message_of(exc)}", read_failed=True)
            waited += put(self.decoded, failed, self.stop)
        finally:
            spent += time.perf_counter() - started
            clock.add(busy_s=max(spent - tracked, 0.0), idle_s=waited)
            if READ_STAGE in self.clocks:
                self.clocks[READ_STAGE].add(busy_s=tracked)

    def _compute(self) -> None:
        engine = self.ctx.cfg.engine
        components = self.chain.components(engine)
        if self.tracking is not None and not self.may_have(ItemKind.IMAGE):  # the decoders detect the videos
            components = [c for c in components if c not in ("detector", "embedder")]
        tools = Tools(engine, ModelSet.load(engine, components, cpu_budget=self.local.threads))
        selection = chain.Selection.of(engine.selection, self.sources.reference)
        pool = self.clocks[COMPUTE_POOL]
        while True:
            batch, ended, waited = take_batch(self.decoded, self.local.max_batch, self.local.batch_wait_ms / 1000.0,
                                              self.stop)
            pool.add(idle_s=waited)
            if batch:
                start = time.perf_counter()
                self._run_chain(tools, selection, batch)
                pool.add(busy_s=time.perf_counter() - start)
                for work in batch:
                    put(self.processed, work, self.stop)
            if ended:
                break
        if self._last("workers"):
            put(self.processed, END, self.stop)

    def _run_chain(self, tools: Tools, selection: chain.Selection, batch: list[Work]) -> None:
        """The chain's steps over a batch; a frame that fails keeps its pixels and its error."""
        live = [w for w in batch if not w.read_failed]
        if not live:
            return
        given = np.asarray([w.tracked is not None for w in live])
        source_ids = [w.unit.source_id for w in live]
        faces = (faces_of([w.tracked.faces if w.tracked is not None else _NO_FACES for w in live], source_ids)
                 if given.any() else FaceBatch.empty())
        found = np.asarray([w.tracked.faces_found if w.tracked is not None else 0 for w in live], np.int32)
        rows = Rows([selection] * len(live), source_ids, self.sources.identities, given, found)
        errors = [""] * len(live)
        timings: dict[str, float] = {}
        try:
            done = run_steps(self.chain.steps, tools, rows, FrameBatch([w.frame for w in live], errors, faces),
                             timings)
        except Exception as exc:
            if is_fatal(exc):
                raise  # a model, provider or memory error stops the run
            for work in live:  # unexpected: the whole batch passes through, counted
                work.error = f"chain: {type(exc).__name__}: {exc}"
            return
        finally:
            for name, ms in timings.items():
                self.clocks[name].add(busy_s=ms / 1000.0)
        swapped = done.counter("faces_swapped")
        for k, work in enumerate(live):
            work.frame, work.error, work.faces_swapped = done.frames[k], errors[k], int(swapped[k])

    def _encode(self) -> None:
        clock = self.clocks["encode"]
        targets: dict[bytes, Any] = {}
        while True:
            work, waited = get(self.processed, self.stop)
            clock.add(idle_s=waited)
            if work is END:
                self.events.put(("encoded",))
                return
            start = time.perf_counter()
            packed = work.unit.target
            if packed not in targets:
                if len(targets) > 1024:
                    targets.clear()
                targets[packed] = unpack(packed)
            self._write(work, targets[packed])
            self.events.put(("rows", _row(work)))
            clock.add(busy_s=time.perf_counter() - start)

    def _write(self, work: Work, target: Any) -> None:
        unit = work.unit
        if work.read_failed:
            return  # nothing was read: nothing to write
        if unit.segment is None:
            if not work.error:  # a failed image is not written (a re-run retries it)
                try:
                    write_image(work.frame, work.alpha, target)
                except Exception as exc:
                    work.error = f"encode: {type(exc).__name__}: {exc}"
            return
        seg = unit.segment
        # Segments of one writer, from this thread only; finish() (another thread) closes a
        # segment only once all its frames were pushed.
        self.writer.push((unit.item, seg.index), seg.start_frame, seg.frame_count, [work.index], [work.frame],
                         target, [work.error], [work.faces_swapped])


_NO_FACES = TrackedFrame(0, 0.0, _NO_FRAME).faces


def _row(work: Work) -> dict[str, np.ndarray]:
    """The slim row the bookkeeping folds (no pixels), as the Ray runner's output rows."""
    unit = work.unit
    seg = unit.segment
    row: dict[str, np.ndarray] = {
        "item": np.asarray([unit.item]), "segment": np.asarray([seg.index if seg is not None else 0]),
        "index": np.asarray([work.index]), "error": np.asarray([work.error], object),
        "read_failed": np.asarray([work.read_failed]), "image": np.asarray([seg is None]),
        "faces_swapped": np.asarray([work.faces_swapped]),
        "seg_count": np.asarray([seg.frame_count if seg is not None else 1])}
    if work.tracked is not None:
        for column in TRACKING_COUNTERS:
            row[column] = np.asarray([int(getattr(work.tracked, column))])
    return row
