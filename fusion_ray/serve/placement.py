"""Where the chain runs in the service: the runner the ingress and the live backend call.

``placement: fused | split`` (``auto``: fused where no node has more than one GPU; see
:func:`fusion_ray.serve.settings.resolve_placement`). Both answer one call per frame,
:meth:`ServeChain.frame`, used alike by ``POST /v1/swap`` and by every live stream's frames:

- :class:`FusedChain`: one call to the fused deployment, which runs the whole chain in-process
  (:class:`~fusion_ray.core.frames.FrameChain`) batched across requests and streams;
- :class:`SplitChain`: per-model pools: the chain cut into parts by phase
  (:data:`~fusion_ray.serve.deployments.SPLIT_PARTS`), each part every step of the declared
  chain in its phases: the steps before the swap (following or detecting, selection, landmarks,
  crops, target-crop masks, the target embedding) on the detector deployment, the swap and the
  swapped-crop masks on the swapper's, pasting here, the enhancer on its own.

Both take the frame's identity as an awaitable, so the split placement detects while the source
is still being looked up or embedded, and both return a
:class:`~fusion_ray.core.frames.FrameDone` with the same pixels (tests/serve/test_placement.py).

A request's FaceFusion options (:attr:`FrameRequest.options`) go with the frame, and each part
runs them as the fused deployment does: the same steps, the same pixels. Each part's busy time per
step reaches ``/metrics`` (``fusion_ray_step_seconds``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from fusion_ray.core.frames import FrameChain, FrameDone, FrameJob, FrameRequest, FrameState
from fusion_ray.core.steps import Phase
from fusion_ray.serve.deployments import SPLIT_PARTS, SplitPart
from fusion_ray.serve.downstream import Downstream, LocalStages
from fusion_ray.serve.limits import ApiError
from fusion_ray.serve.metrics import step_seconds
from fusion_ray.serve.timing import Timings
from fusion_ray.types import SourceIdentity

Identity = Awaitable[tuple[str, SourceIdentity]]
"""A frame's (source key, identity), maybe still being looked up or embedded."""


class ServeChain(Protocol):
    """The chain as placed: one frame in, the processed frame out."""

    placement: str

    async def frame(self, t: Timings, request: FrameRequest, identity: Identity) -> FrameDone:
        """The frame with its selected faces swapped (an :class:`ApiError` rather than a frame
        whose faces were not); its follower (if any) updated or replaced in the result."""
        ...

    def probes(self) -> dict[str, Callable[[], Any]]:
        """Readiness probes by deployment name."""
        ...


async def first_error_cancels(*aws: Awaitable[Any]) -> list[Any]:
    """Run awaitables concurrently; on the first failure cancel the rest and raise it."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _failed(done: FrameDone) -> FrameDone:
    if done.error:
        raise ApiError(500, "stage_failed", f"the chain failed: {done.error}")
    return done


class FusedChain:
    """One call per frame to the fused deployment (``downstream.detector`` is its handle)."""

    placement = "fused"

    def __init__(self, downstream: Downstream) -> None:
        self.downstream = downstream

    async def frame(self, t: Timings, request: FrameRequest, identity: Identity) -> FrameDone:
        key, who = await identity
        job = FrameJob(request, key, who)
        fused = self.downstream.detector
        result = await self.downstream.call(t, "chain", lambda: fused.process.remote(job))
        self.downstream.record_batch("fused", result)
        return _failed(result["done"])

    def probes(self) -> dict[str, Callable[[], Any]]:
        probes = self.downstream.probes()
        return {"Fused": probes["Detector"], "ServiceState": probes["ServiceState"]}


class SplitChain:
    """Per-model pools: each part of :data:`~fusion_ray.serve.deployments.SPLIT_PARTS` where it runs
    (the detector, swapper and enhancer deployments; pasting in the ingress)."""

    placement = "split"

    def __init__(self, downstream: Downstream, local: LocalStages) -> None:
        self.downstream = downstream
        self.local = local

    async def frame(self, t: Timings, request: FrameRequest, identity: Identity) -> FrameDone:
        (state, follower), (key, who) = await first_error_cancels(
            self.downstream.find(t, FrameJob(request, "", None)), identity)
        job = FrameJob(replace(request, follower=follower), key, who)
        state = _checked(state.for_source(key))
        for before, part in zip(SPLIT_PARTS, SPLIT_PARTS[1:], strict=False):
            if not len(state.faces):  # every later step works on faces: a frame with none is done as it is
                break
            state = _checked(await self._part(t, part, before.until, job, state))
        return FrameChain.done([job], [state])[0]

    async def _part(self, t: Timings, part: SplitPart, after: Phase, job: FrameJob, state: FrameState) -> FrameState:
        if part.runs_in == "ingress":
            timings: dict[str, float] = {}
            with t.timed(part.name):
                state = await asyncio.to_thread(self.local.advance, job, state, after, part.until, timings)
            self.downstream.record_batch("ingress", {"steps": step_seconds(timings)})
            return state
        if self.local.reads_frame(job.request.options, after, part.until):
            return await self.downstream.advance(t, part, job, state)
        # the frame (the request's, or as pasted so far) stays here: the part neither reads nor writes it
        done = await self.downstream.advance(t, part, _without_frame(job), replace(state, frame=None))
        return replace(done, frame=state.frame) if done.frame is None else done

    def probes(self) -> dict[str, Callable[[], Any]]:
        return self.downstream.probes()


_NO_FRAME = np.zeros((1, 1, 3), np.uint8)


def _without_frame(job: FrameJob) -> FrameJob:
    """The job as a part that reads no frame gets it: neither its frame nor its follower travel."""
    return replace(job, request=replace(job.request, frame=_NO_FRAME, follower=None))


def _checked(state: FrameState) -> FrameState:
    if state.error:
        raise ApiError(500, "stage_failed", f"the chain failed: {state.error}")
    return state


def known(key: str, identity: SourceIdentity) -> Identity:
    """An identity already at hand, as the awaitable :meth:`ServeChain.frame` takes."""
    async def ready() -> tuple[str, SourceIdentity]:
        return key, identity

    return ready()
