"""Live streams on the Serve ingress: the stream core's backend over the deployments.

Each frame takes the HTTP path's chain: detection on the detector deployment (at the canvas
the stream's degradation level asks for), the swap on the swapper deployment, whose
``@serve.batch`` windows batch the faces of every stream and request together, pasting in
the ingress, and the enhancer deployment when the stream asks for it. The stream core
(:mod:`fusion_ray.live`) does the rest: dropping, deadlines, ordering, the ladder, stats.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import numpy as np

from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.live.backend import FramePlan, Processed, StreamRefused
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
        stand_ins = await self.core.stand_ins(t, start.enhance)
        return ServeStreamProcessor(self.core, identity, start, stand_ins)


class ServeStreamProcessor:
    """One stream: its identity and options; each frame goes through the deployments."""

    def __init__(self, core: IngressCore, identity: SourceIdentity, start: StartMessage,
                 stand_ins: list[str]) -> None:
        self.core = core
        self.identity = identity
        self.start = start
        self.key = f"stream_{start.source_id}"
        self._stand_ins = stand_ins

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
        found = {"faces": faces}
        out = await asyncio.to_thread(local.paste, frame, found, swapped, plan.enhance)
        if plan.enhance:
            blend = self.core.settings.engine.enhance.blend
            enhanced = await self.core.downstream.enhance(t, local.enhancer_crops(out), blend)
            out = await asyncio.to_thread(local.paste_enhanced, out, enhanced)
        return Processed(local.pasted_frame(out), faces.landmarks_5, detected)

    async def _faces(self, t: Timings, frame: Frame, plan: FramePlan) -> tuple[FaceBatch, int]:
        """The faces to swap: detected now, or (level 2) at the plan's landmarks, cut here."""
        if plan.landmarks is None:
            found = await self.core.downstream.detect(t, frame, self.start.select, self.start.face_index,
                                                      plan.detector_size)
            return found["faces"], int(found["faces_detected"])
        points = np.asarray(plan.landmarks, np.float32).reshape(-1, 5, 2)
        faces = FaceBatch(np.zeros(len(points), np.int64), _boxes(points), points, np.ones(len(points), np.float32),
                          np.full(len(points), "", object), np.full(len(points), -1, np.int64))
        errors = [""]
        cut = await asyncio.to_thread(chain.align, [frame], faces, self.core.local.swap_layout, errors, "align")
        if errors[0]:
            raise ValueError(errors[0])
        return cut, len(points)


def _boxes(points: np.ndarray) -> np.ndarray:
    """Boxes around landmark sets (only used to carry the faces; crops come from the landmarks)."""
    if not len(points):
        return np.zeros((0, 4), np.float32)
    return np.concatenate([points.min(axis=1), points.max(axis=1)], axis=1).astype(np.float32)
