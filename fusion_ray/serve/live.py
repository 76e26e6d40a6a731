"""Live streams on the Serve ingress: the stream core's backend over the placed chain.

The ingress hands streams a :class:`StreamRoute`: the placed chain and the few things opening a
stream needs (auth, the source store, provenance), not itself.

Each frame takes the HTTP path's chain through the same runner (:mod:`fusion_ray.serve.placement`,
``placement: fused | split``): fused, one call to the fused deployment, whose ``@serve.batch``
gathers the frames of every stream and request; split, detection on the detector deployment (at
the canvas the stream's degradation level asks for), the swap and enhancer on their batched
deployments, pasting in the ingress. The stream core (:mod:`fusion_ray.live`) does the rest:
dropping, deadlines, ordering, the ladder, stats.

A stream's start message carries FaceFusion's options (checked against the service's models and
caps as a form's are, :mod:`fusion_ray.serve.quality`); from degradation level 1 its frames run
without model masks and pixel boost, whether its options or the service's engine set them. At level 3 a stream detects on every k-th frame only; in between, its follower
(:mod:`fusion_ray.live.follow`, held here, per stream) predicts each face and the detector
re-detects it on a small crop, several times cheaper than the whole frame. Either placement
carries the follower with the frame to the replica that follows the faces (the fused one, or the
split placement's detector) and sends back an updated copy, which the stream keeps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple

from fusion_ray.core.chain import Selection
from fusion_ray.core.facefusion_options import configured
from fusion_ray.core.provenance import Provenance
from fusion_ray.live.backend import FramePlan, Processed, SourceStatus, StreamRefused
from fusion_ray.live.follow import StreamFollower
from fusion_ray.live.ladder import is_costly, without_costly
from fusion_ray.live.protocol import CLOSE_POLICY, CLOSE_UNSUPPORTED, StartMessage
from fusion_ray.serve.limits import ApiError, clip
from fusion_ray.serve.metrics import MetricsRecorder
from fusion_ray.serve.placement import ServeChain, known
from fusion_ray.serve.quality import RequestQuality, request_quality
from fusion_ray.serve.settings import ServeSettings
from fusion_ray.serve.timing import Timings
from fusion_ray.types import Frame, SourceIdentity


@dataclass(frozen=True)
class StreamRoute:
    """What live streams reach in the service, and nothing more of the ingress: the placed chain
    (the runner every frame goes through, as HTTP requests do) and what opening a stream needs."""

    chain: ServeChain
    settings: ServeSettings
    """The service's settings (its caps, its engine: the masks, the follower's tracking)."""
    metrics: MetricsRecorder
    authorize: Callable[[str | None], bool]
    source: Callable[[Timings, str], Awaitable[SourceIdentity]]
    """A registered source's identity (an ApiError 404 when unknown)."""
    provenance: Callable[[Timings, bool, frozenset[str]], Awaitable[Provenance]]
    """What made the outputs: with or without the enhancer, with these landmarker and mask models."""
    source_status: Callable[[Timings, set[str]], Awaitable[SourceStatus]]
    enhancer: bool
    """Whether the service runs the enhancer."""


class PreparedStream(NamedTuple):
    """A stream's source identity, start, checked options and stand-in models (sent to the replica
    that runs a WebRTC session's chain)."""

    identity: SourceIdentity
    start: StartMessage
    quality: RequestQuality
    stand_ins: list[str]


class ServeStreamBackend:
    """Authorises a stream with the ingress' token and opens it on a registered source."""

    def __init__(self, route: StreamRoute) -> None:
        self.route = route

    def authorize(self, token: str | None) -> bool:
        return self.route.authorize(token)

    async def open(self, start: StartMessage) -> ServeStreamProcessor:
        return ServeStreamProcessor(self.route.chain, self.route.metrics, self.route.settings,
                                    *await self.prepare(start))

    async def prepare(self, start: StartMessage) -> PreparedStream:
        """What a stream runs with: its source's identity, its options (checked against the caps) and
        the stand-in models its outputs come from; :class:`StreamRefused` when it cannot run."""
        t = Timings(self.route.metrics)
        try:
            identity = await self.route.source(t, start.source_id)
        except ApiError as exc:
            if exc.status == 404:
                raise StreamRefused(CLOSE_POLICY, "unknown_source",
                                    f"unknown source_id {clip(start.source_id)!r}") from exc
            raise StreamRefused(CLOSE_POLICY, exc.code, exc.detail) from exc
        try:
            quality = request_quality(start.facefusion, self.route.settings, enhance=start.enhance,
                                      enhancer=self.route.enhancer)
        except ApiError as exc:  # over a cap: policy; options the service cannot run: unsupported
            raise StreamRefused(CLOSE_POLICY if exc.status == 403 else CLOSE_UNSUPPORTED, exc.code, exc.detail) from exc
        made_by = await self.route.provenance(t, quality.enhance_blend is not None, quality.models)
        return PreparedStream(identity, start, quality, list(made_by.stand_in_models))

    async def source_status(self, source_ids: set[str]) -> SourceStatus:
        """From the state deployment, shared by every ingress replica."""
        return await self.route.source_status(Timings(self.route.metrics), source_ids)


class ServeStreamProcessor:
    """One stream: its identity, options and follower; each frame goes through the placed chain."""

    def __init__(self, chain: ServeChain, metrics: MetricsRecorder, settings: ServeSettings, identity: SourceIdentity,
                 start: StartMessage, quality: RequestQuality, stand_ins: list[str]) -> None:
        self.runner = chain
        self.metrics = metrics
        self.quality = quality
        self.costly = is_costly(configured(settings.engine, quality.options))
        self.light = without_costly(quality.options, settings.engine)
        self.identity = identity
        self.start = start
        self.key = f"stream_{start.source_id}"
        self._stand_ins = stand_ins
        self.follower = StreamFollower(settings.engine.tracking)
        self._follower_seq = -1  # the frame whose updated copy self.follower is
        self.selection = Selection.asked(start.select, start.face_index,
                                         configured(settings.engine, quality.options).selection)

    @property
    def stand_in_models(self) -> list[str]:
        return self._stand_ins

    async def process(self, frame: Frame, plan: FramePlan) -> Processed:
        """The frame with its selected faces swapped; raises rather than return an unswapped face."""
        request = plan.request(frame, self.selection, enhance_blend=self.quality.enhance_blend,
                               follower=self.follower, options=self.quality.options, light=self.light)
        done = await self.runner.frame(Timings(self.metrics), request, known(self.key, self.identity))
        # A placement that ran it elsewhere sends back a copy; with several frames of the stream in
        # work, the copy of the newest frame wins (an older frame's may come back later).
        if isinstance(done.follower, StreamFollower) and plan.seq > self._follower_seq:
            self.follower, self._follower_seq = done.follower, plan.seq
        return Processed(done.frame, done.landmarks, done.faces_detected)
