"""The local runner: one group of a job in one process, no Ray (the seeds' producer/consumer design).

::

    planner thread   plans each item (``plan_one``: probe, parts key, resumed segments), in order
         | units (bounded)                                                    runners/local/decode.py
    decode threads   a video segment (tracked when tracking is on) or an image each
         | decoded frames (bounded: ``local.decode_queue``)                   runners/local/decode.py
    compute threads  the chain's steps (:class:`~fusion_ray.core.steps.Chain`) on dynamic batches:
                     at most ``max_batch`` frames, waiting ``batch_wait_ms`` after the first;
                     per-step times through ``ComputeWorker.record_steps``    runners/local/compute.py
         | processed frames (bounded: ``local.encode_queue``)
    encode thread    segments in order through a :class:`~fusion_ray.jobs.writer.SegmentWriter`
                     (its own encoder thread per open segment), images written whole
         | slim rows, item infos, outcomes (events)                           runners/local/encode.py
    main thread      (this module) the job's bookkeeping (:class:`~fusion_ray.jobs.group.GroupBook`, as the
                     Ray runner's driver): report, progress, segments finished, videos joined with
                     their audio (``join_item``), animated images swapped whole (``swap_animated``), in a small thread pool

ONNX Runtime, PyAV and OpenCV release the GIL, so the threads use the cores. Memory is bounded
by the queues (:class:`~fusion_ray.jobs.config.LocalConfig` says how much). A frame that
fails passes through unchanged and is counted; segments are published whole into the parts
folder, so a re-run after ``kill -9`` resumes them; on Ctrl-C, SIGTERM or a failure every thread
stops, the open segments are aborted and the finished ones stay. The queues, the stop flag and
the clocks the threads share are :class:`~fusion_ray.runners.local.lanes.Lanes`. Nothing here imports Ray.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fusion_ray.core.steps import Chain
from fusion_ray.jobs.animated import swap_animated
from fusion_ray.jobs.config import LocalConfig
from fusion_ray.jobs.finalise import join_item
from fusion_ray.jobs.group import GroupBook, PreparedGroup, ProgressCallback, prepare_group
from fusion_ray.jobs.plan import GroupPlan, ItemPlan, JobPlan
from fusion_ray.jobs.report import ItemKind, ItemResult, JobReport
from fusion_ray.jobs.segment_status import SegmentKey
from fusion_ray.jobs.track_read import READ_STAGE, TrackedRead
from fusion_ray.jobs.writer import SegmentWriter
from fusion_ray.runners.local.compute import COMPUTE_POOL, ComputeWorker
from fusion_ray.runners.local.decode import Decoder, plan_units
from fusion_ray.runners.local.encode import Encoder
from fusion_ray.runners.local.lanes import Lanes
from fusion_ray.runners.local.queues import Stopped

STOP_TIMEOUT_S = 60.0


def run_group_local(plan: JobPlan, group: GroupPlan, results: Sequence[ItemResult], report: JobReport,
                    progress: ProgressCallback | None) -> None:
    """Embed the group's sources, then run its items in this process (see the module docstring)."""
    prepared = prepare_group(plan, group, results, report)
    LocalRun(prepared, results, report, group.cfg.local).execute(progress)


class LocalRun(GroupBook):
    """One group's run in this process: starts the threads, folds their events (see the module docstring)."""

    def __init__(self, prepared: PreparedGroup, results: Sequence[ItemResult], report: JobReport,
                 local: LocalConfig) -> None:
        super().__init__(prepared.items, results, report)
        self.ctx, self.sources, self.comment, self.local = prepared.ctx, prepared.sources, prepared.comment, local
        engine = self.ctx.cfg.engine
        self.chain = Chain.of(engine)
        self.tracking = (TrackedRead(engine.in_ray_actor(False), self.sources.reference, float(local.threads))
                         if engine.tracks_faces and self.may_have(ItemKind.VIDEO) else None)
        self.lanes = Lanes(local, self._stage_names())
        self.failure: BaseException | None = None
        self.writer = SegmentWriter(self.ctx.cfg.pipeline.encode_options)
        self.finisher = ThreadPoolExecutor(max_workers=2, thread_name_prefix="local-finish")
        self.pending = 0
        """Segments finishing, joins and animated images running (their outcome is an event to come)."""

    def _stage_names(self) -> list[str]:
        reads = [READ_STAGE] if self.tracking is not None else []
        return ["decode", *reads, *self.chain.names, COMPUTE_POOL, "encode"]

    def _threads(self) -> list[threading.Thread]:
        """The planner, the decoders, the compute workers and the encoder (not started)."""
        lanes, local = self.lanes, self.local
        # the decoders detect the videos when they track; the chain still detects the images
        detect_in_chain = self.tracking is None or self.may_have(ItemKind.IMAGE)
        threads = [self._thread(lambda: plan_units(lanes, self.items, self.ctx, local.decoders), "local-plan")]
        threads += [self._thread(Decoder(lanes, self.ctx, self.tracking, local.workers).run, f"local-decode-{k}")
                    for k in range(local.decoders)]
        threads += [self._thread(ComputeWorker(lanes, self.ctx, self.sources, self.chain, local,
                                               detect_in_chain).run, f"local-compute-{k}")
                    for k in range(local.workers)]
        return [*threads, self._thread(Encoder(lanes, self.writer).run, "local-encode")]

    def _thread(self, body: Callable[[], None], name: str) -> threading.Thread:
        def run() -> None:
            try:
                body()
            except Stopped:
                pass
            except BaseException as exc:  # raised by the main thread; every thread stops
                self.failure = self.failure or exc
                self.lanes.stop.set()

        return threading.Thread(target=run, name=name, daemon=True)

    def execute(self, progress: ProgressCallback | None) -> None:
        """Run every item; the cleanup always runs (a failure of any thread is raised here)."""
        if not self.items:
            return
        threads = self._threads()
        try:
            for thread in threads:
                thread.start()
            self._drive(progress)
            self.fail_incomplete()
        finally:
            self.lanes.stop.set()
            for thread in threads:
                thread.join(timeout=STOP_TIMEOUT_S)
            self.finisher.shutdown(wait=True, cancel_futures=True)
            # every segment still open (finished ones stay in the parts folder, for a re-run)
            self.writer.abort([*self.open_segments(), *self.writer.open])
            self.report.frames += self.done_frames
            self.report.add_times(self.lanes.clocks, steps={READ_STAGE, *self.chain.names})

    def _drive(self, progress: ProgressCallback | None) -> None:
        """Fold the events until every frame is encoded and every segment and join has ended."""
        encoded = False
        while not (encoded and self.pending == 0):
            if self.failure is not None:
                raise self.failure
            try:
                event = self.lanes.events.get(timeout=0.1)
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

    # ------------------------------------------------------------ GroupBook's finishing, in a small pool
    def finish_segment(self, key: SegmentKey) -> None:
        self.pending += 1
        self.finisher.submit(self._finish, key)

    def _finish(self, key: SegmentKey) -> None:
        try:
            path, _ = self.writer.finish(key)
        except Exception as exc:
            self.lanes.events.put(("segment", key, None, exc))
        else:
            self.lanes.events.put(("segment", key, path, None))

    def start_join(self, n: int, plan: ItemPlan, paths: list[Path]) -> None:
        self.pending += 1
        self.finisher.submit(self._join, n, plan, paths)

    def _join(self, n: int, plan: ItemPlan, paths: list[Path]) -> None:
        try:
            join_item(plan, paths, self.comment, self.ctx.storage)
        except Exception as exc:
            self.lanes.events.put(("joined", n, exc))
        else:
            self.lanes.events.put(("joined", n, None))

    def start_animation(self, plan: ItemPlan) -> None:
        self.pending += 1
        self.finisher.submit(self._animate, plan)

    def _animate(self, plan: ItemPlan) -> None:
        identity = self.sources.identities[self.ctx.source_of[plan.index]]
        try:
            done = swap_animated(plan, self.ctx.cfg.engine, identity, self.sources.reference, self.ctx.storage)
            self.lanes.events.put(("animated", plan.index, done, None))
        except Exception as exc:
            self.lanes.events.put(("animated", plan.index, None, exc))
