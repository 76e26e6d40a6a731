"""The local runner's compute threads: the chain's steps (:class:`~fusion_ray.core.steps.Chain`)
on dynamic batches of decoded frames (at most ``local.max_batch``, waiting ``local.batch_wait_ms``
after the first). Each batch's per-step times go through :meth:`ComputeWorker.record_steps`."""

from __future__ import annotations

import time

import numpy as np

from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.steps import Chain, Phase, Rows, Tools, run_steps
from fusion_ray.errors import is_fatal
from fusion_ray.jobs.config import LocalConfig
from fusion_ray.jobs.group import Sources
from fusion_ray.jobs.items import GroupContext
from fusion_ray.jobs.track_read import TrackedFrame, faces_of
from fusion_ray.runners.local.lanes import NO_FRAME, Lanes, Work
from fusion_ray.runners.local.queues import END, put, take_batch

COMPUTE_POOL = "compute"
"""The report's name for the compute threads as a pool (busy on batches, idle waiting for frames)."""
_NO_FACES = TrackedFrame(0, 0.0, NO_FRAME).faces


class ComputeWorker:
    """One compute thread's body (:meth:`run`): decoded frames in, processed frames out.
    ``detect_in_chain`` is False when the decoders track (and detect) every item."""

    def __init__(self, lanes: Lanes, ctx: GroupContext, sources: Sources, chain_: Chain, local: LocalConfig,
                 detect_in_chain: bool) -> None:
        self.lanes, self.ctx, self.sources, self.chain, self.local = lanes, ctx, sources, chain_, local
        self.detect_in_chain = detect_in_chain

    def run(self) -> None:
        """Batches until END; the last worker to end sends END to the encoder."""
        lanes, local, engine = self.lanes, self.local, self.ctx.cfg.engine
        skipped: tuple[Phase, ...] = () if self.detect_in_chain else ("detect",)  # the decoders detect
        components = self.chain.components(engine, skipping=skipped)
        tools = Tools(engine, ModelSet.load(engine, components, cpu_budget=local.threads))
        selection = chain.Selection.of(engine.selection, self.sources.reference)
        pool = lanes.clocks[COMPUTE_POOL]
        while True:
            batch, ended, waited = take_batch(lanes.decoded, local.max_batch, local.batch_wait_ms / 1000.0, lanes.stop)
            pool.add(idle_s=waited)
            if batch:
                start = time.perf_counter()
                self.run_chain(tools, selection, batch)
                pool.add(busy_s=time.perf_counter() - start)
                for work in batch:
                    put(lanes.processed, work, lanes.stop)
            if ended:
                break
        if lanes.last("workers"):
            put(lanes.processed, END, lanes.stop)

    def run_chain(self, tools: Tools, selection: chain.Selection, batch: list[Work]) -> None:
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
            self.record_steps(timings, len(live))
        swapped = done.counter("faces_swapped")
        for k, work in enumerate(live):
            work.frame, work.error, work.faces_swapped = done.frames[k], errors[k], int(swapped[k])

    def record_steps(self, timings: dict[str, float], frames: int) -> None:
        """Where each batch's per-step times (milliseconds by step name, for ``frames`` frames)
        land: the steps' clocks in the report. A per-step timing hook belongs here."""
        for name, ms in timings.items():
            self.lanes.clocks[name].add(busy_s=ms / 1000.0)
