"""Live streams on the Serve ingress: the stream core's backend over the deployments.

Each frame takes the HTTP path's chain: detection on the detector deployment (at the canvas
the stream's degradation level asks for), the swap on the swapper deployment, whose
``@serve.batch`` windows batch the faces of every stream and request together, pasting in
the ingress, and the enhancer deployment when the stream asks for it. The stream core
(:mod:`fusion_ray.live`) does the rest: dropping, deadlines, ordering, the ladder, stats.

At degradation level 2 a stream detects on every k-th frame only; in between, its follower
(:mod:`fusion_ray.live.follow`, held here, per stream) predicts each face and the detector
re-detects it on a small crop (``Detector.redetect``), several times cheaper than the whole frame.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np

from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.live.backend import FramePlan, Processed, SourceStatus, StreamRefused
from fusion_ray.live.follow import StreamFollower
from fusion_ray.live.protocol import CLOSE_POLICY, CLOSE_UNSUPPORTED, StartMessage
from fusion_ray.serve.limits import ApiError, clip
from fusion_ray.serve.timing import Timings
from fusion_ray.types import Frame, SourceIdentity

if TYPE_CHECKING:
    from fusion_ray.serve.ingress import IngressCore


class ServeStreamBackend:
    """Authorises a stream with the ingress' token and opens it on a registered source."""

    def __init__(self, core: IngressCore) -> None:
        self.core = core

    def authorize(self, token: str | None) -> bool:
        return not self.core.auth.enabled or self.core.auth.valid(token)

    async def open(self, start: StartMessage) -> ServeStreamProcessor:
        t = Timings(self.core.metrics)
        try:
            identity = await self.core.source(t, start.source_id)
        except ApiError as exc:
            if exc.status == 404:
                raise StreamRefused(CLOSE_POLICY, "unknown_source",
                                    f"unknown source_id {clip(start.source_id)!r}") from exc
            raise StreamRefused(CLOSE_POLICY, exc.code, exc.detail) from exc
        if start.enhance and self.core.downstream.enhancer is None:
            raise StreamRefused(CLOSE_UNSUPPORTED, "enhance_unavailable", "this service runs without the enhancer")
        stand_ins = list((await self.core.provenance(t, start.enhance)).stand_in_models)
        return ServeStreamProcessor(self.core, identity, start, stand_ins)

    async def source_status(self, source_ids: set[str]) -> SourceStatus:
        """From the state deployment, shared by every ingress replica."""
        return await self.core.downstream.source_status(Timings(self.core.metrics), source_ids)


class ServeStreamProcessor:
    """One stream: its identity and options; each frame goes through the deployments."""

    def __init__(self, core: IngressCore, identity: SourceIdentity, start: StartMessage,
                 stand_ins: list[str]) -> None:
        self.core = core
        self.identity = identity
        self.start = start
        self.key = f"stream_{start.source_id}"
        self._stand_ins = stand_ins
        self.follower = StreamFollower(core.settings.engine.tracking)

    @property
    def stand_in_models(self) -> list[str]:
        return self._stand_ins

    async def process(self, frame: Frame, plan: FramePlan) -> Processed:
        """The frame with its selected faces swapped; raises rather than return an unswapped face."""
        t = Timings(self.core.metrics)
        faces, detected = await self._faces(t, frame, plan)
        if not len(faces):
            return Processed(frame, np.zeros((0, 5, 2), np.float32), detected)
        local = self.core.local
        crops, _ = faces.require_crops()
        swapped = await self.core.downstream.swap(t, crops, self.identity, self.key)
        out = await asyncio.to_thread(local.paste, frame, faces, swapped, plan.enhance)
        if plan.enhance:
            blend = self.core.settings.engine.enhance.blend
            enhanced = await self.core.downstream.enhance(t, out.faces.require_crops()[0], blend)
            out = await asyncio.to_thread(local.paste_enhanced, out, enhanced)
        return Processed(out.frames[0], faces.landmarks_5, detected)

    async def _faces(self, t: Timings, frame: Frame, plan: FramePlan) -> tuple[FaceBatch, int]:
        """The faces to swap: detected on the whole frame, or (level 2, ``plan.landmarks`` set)
        followed by the stream's tracker: each tracked face re-detected on a small crop."""
        predictions = self.follower.predictions(plan.seq, plan.landmarks is not None)
        if not predictions:
            return await self._detect(t, frame, plan)
        crops = dict(self.follower.crops)
        roi = await self.core.downstream.call(
            t, "redetect", lambda: self.core.downstream.detector.redetect.remote(frame, predictions, crops))
        faces = self.follower.followed(plan.seq, roi, frame.shape[:2])
        if faces is None:
            return await self._detect(t, frame, plan)
        errors = [""]
        cut = await asyncio.to_thread(chain.align, [frame], faces, self.core.local.swap_layout, errors, "align")
        if errors[0]:
            raise ValueError(errors[0])
        return cut, len(faces)

    async def _detect(self, t: Timings, frame: Frame, plan: FramePlan) -> tuple[FaceBatch, int]:
        """Whole-frame detection and selection on the detector deployment; the tracker follows it."""
        found = await self.core.downstream.detect(t, frame, self.start.select, self.start.face_index,
                                                  plan.detector_size)
        self.follower.detected(plan.seq, found.faces, frame.shape[:2])
        return found.faces, found.faces_detected
