"""Where the chain runs in the service: the runner the ingress and the live backend call.

``placement: fused | split`` (``auto``: fused where no node has more than one GPU; see
:func:`fusion_ray.serve.settings.resolve_placement`). Both answer one call per frame,
:meth:`ServeChain.frame`, used alike by ``POST /v1/swap`` and by every live stream's frames:

- :class:`FusedChain`: one call to the fused deployment, which runs the whole chain in-process
  (:class:`~fusion_ray.core.frames.FrameChain`) batched across requests and streams;
- :class:`SplitChain`: per-model pools: detection (or a live stream's crop re-detection) on the
  detector deployment, the swap and the enhancer on their batched deployments, pasting here.

Both take the frame's identity as an awaitable, so the split placement detects while the source
is still being looked up or embedded, and both return a
:class:`~fusion_ray.core.frames.FrameDone` with the same pixels (tests/serve/test_placement.py).

A request's FaceFusion options (:attr:`FrameRequest.options`) go with the frame: the fused
deployment runs them in its chain; in the split placement the detector deployment runs the
chain's steps before the swap under them (landmarks, crops at the pixel boost's size, area,
mouth and occlusion masks), the swapper swaps with them and the ingress pastes through their
masks. The region mask (a model on the swapped crop) and the swapper weight (the target's
embedding) run in the fused placement only: the ingress refuses them here
(:mod:`fusion_ray.serve.quality`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np

from fusion_ray.config import TrackingConfig
from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.core.frames import FrameDone, FrameJob, FrameRequest
from fusion_ray.serve.chain import Downstream, LocalStages
from fusion_ray.serve.limits import ApiError
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
    """Per-model pools: the detector, swapper and enhancer deployments; pasting in the ingress."""

    placement = "split"

    def __init__(self, downstream: Downstream, local: LocalStages, tracking: TrackingConfig) -> None:
        self.downstream = downstream
        self.local = local
        self.tracking = tracking

    async def frame(self, t: Timings, request: FrameRequest, identity: Identity) -> FrameDone:
        (faces, detected), (key, who) = await first_error_cancels(self._faces(t, request), identity)
        if not len(faces):
            return FrameDone(request.frame, detected, np.zeros((0, 5, 2), np.float32), "", request.follower)
        swapped = await self.downstream.swap(t, faces.require_crops()[0], who, key, request.options)
        enhance = request.enhance_blend is not None
        with t.timed("paste"):
            out = await asyncio.to_thread(self.local.paste, request.frame, faces, swapped, enhance, request.options)
        if request.enhance_blend is not None:
            weight = self.local.config(request.options).enhance.weight
            enhanced = await self.downstream.enhance(t, out.faces.require_crops()[0], request.enhance_blend, weight)
            with t.timed("paste_enhanced"):
                out = await asyncio.to_thread(self.local.paste_enhanced, out, enhanced)
        return FrameDone(out.frames[0], detected, faces.landmarks_5, "", request.follower)

    def probes(self) -> dict[str, Callable[[], Any]]:
        return self.downstream.probes()

    async def _faces(self, t: Timings, request: FrameRequest) -> tuple[FaceBatch, int]:
        """The faces to swap (with crops): detected on the whole frame, or (a live stream at level 3)
        followed by its tracker: each tracked face re-detected on a small crop."""
        follower = request.follower
        predictions = follower.predictions(request.seq, request.follow) if follower is not None else []
        if follower is None or not predictions or not self.local.follows(request.options):
            return await self._detect(t, request)
        crops, frame = dict(follower.crops), request.frame
        roi = await self.downstream.call(
            t, "redetect", lambda: self.downstream.detector.redetect.remote(frame, predictions, crops))
        faces = follower.followed(request.seq, roi, frame.shape[:2])
        if faces is None:
            return await self._detect(t, request)
        errors = [""]
        layout = self.local.layout(request.options)
        cut = await asyncio.to_thread(chain.align, [frame], faces, layout, errors, "align")
        if errors[0]:
            raise ApiError(500, "stage_failed", f"align failed: {errors[0]}")
        return cut, len(faces)

    async def _detect(self, t: Timings, request: FrameRequest) -> tuple[FaceBatch, int]:
        """Whole-frame detection and selection on the detector deployment; the follower follows it."""
        found = await self.downstream.detect(t, request.frame, request.selection.mode, request.selection.index,
                                             request.detector_size, request.options)
        if request.follower is not None:
            request.follower.detected(request.seq, found.faces, request.frame.shape[:2])
        return found.faces, found.faces_detected


def known(key: str, identity: SourceIdentity) -> Identity:
    """An identity already at hand, as the awaitable :meth:`ServeChain.frame` takes."""
    async def ready() -> tuple[str, SourceIdentity]:
        return key, identity

    return ready()
