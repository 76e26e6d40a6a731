"""An in-process stream backend over an :class:`~fusion_ray.runners.inline.Engine` (no Ray).

Used by ``fusion-ray live`` without a server (:mod:`fusion_ray.live.direct`) and by the
in-process host (:mod:`fusion_ray.live.localhost`) for tests and benchmarks. The Serve ingress
implements the same :class:`~fusion_ray.live.backend.StreamBackend` over its placement of the
chain (the fused deployment runs the same :class:`~fusion_ray.core.frames.FrameChain`).
"""

from __future__ import annotations

import asyncio
import threading

from fusion_ray.core import chain
from fusion_ray.core.facefusion_options import check_options_used, check_served, configured
from fusion_ray.core.frames import FrameChain, FrameJob
from fusion_ray.core.source_store import SourceStore
from fusion_ray.core.steps import required_components
from fusion_ray.errors import ConfigError
from fusion_ray.image import load_reference
from fusion_ray.live.backend import FramePlan, Processed, SourceStatus, StreamRefused, token_matches
from fusion_ray.live.config import LiveConfig
from fusion_ray.live.follow import StreamFollower
from fusion_ray.live.hub import LiveHub
from fusion_ray.live.ladder import is_costly, without_costly
from fusion_ray.live.protocol import CLOSE_POLICY, CLOSE_UNSUPPORTED, StartMessage
from fusion_ray.models.capabilities import capability_kinds
from fusion_ray.runners.inline import Engine
from fusion_ray.types import Frame, SourceIdentity, check_frame

BMP_HEADER_BYTES = 1024


def local_hub(backend: EngineBackend, *, slots: int = 2, stream_inflight: int = 1, streams: int = 1) -> LiveHub:
    """The hub of streams that never leave this process (``fusion-ray live`` without a server):
    frames may come as BMP (lossless, no encoding cost), so a frame may be as many bytes as a
    1920x1080 BMP; the memory bound of :class:`LiveConfig` holds with that size."""
    pixels = LiveConfig().max_frame_pixels
    cfg = LiveConfig(max_streams=streams, slots=slots, stream_inflight=stream_inflight,
                     max_frame_bytes=3 * pixels + BMP_HEADER_BYTES, max_frame_pixels=pixels)
    return LiveHub(cfg, backend)


class EngineBackend:
    """Sources in a bounded store, one :class:`EngineStreamProcessor` per stream, the whole chain in
    this process (:class:`~fusion_ray.core.frames.FrameChain`, as the fused Serve deployment runs it)."""

    def __init__(self, engine: Engine, *, token: str | None = None, max_sources: int = 256) -> None:
        self.engine = engine
        self.token = token
        self.sources = SourceStore(max_sources)
        self.chain = FrameChain(engine.cfg, engine.models)
        self.reference = load_reference(engine)  # the configured reference face, for select reference

    def authorize(self, token: str | None) -> bool:
        return token_matches(self.token, token)

    def add_source(self, image: Frame, name: str = "source image") -> str:
        """Register a source photo (NoFaceError when it has no face); returns its id."""
        return self.sources.put(self.engine.prepare_source([image], [name]))

    def delete_source(self, source_id: str) -> bool:
        """Forget a source; streams using it end at the hub's next source check."""
        return self.sources.delete(source_id)

    async def source_status(self, source_ids: set[str]) -> SourceStatus:
        return SourceStatus(deleted=self.sources.deleted_of(source_ids))

    async def open(self, start: StartMessage) -> EngineStreamProcessor:
        identity = self.sources.get(start.source_id)
        if identity is None:
            raise StreamRefused(CLOSE_POLICY, "unknown_source", f"unknown source_id {start.source_id!r}")
        if start.wants_enhancer and self.engine.models.enhancer is None:
            raise StreamRefused(CLOSE_UNSUPPORTED, "enhance_unavailable", "this server has no enhancer")
        try:
            check_served(start.facefusion, self.engine.cfg)
            resulting = configured(self.engine.cfg, start.facefusion)
            check_options_used(start.facefusion.given(), resulting, enhanced=start.wants_enhancer)
            needed = required_components(resulting)
        except ConfigError as exc:
            raise StreamRefused(CLOSE_UNSUPPORTED, "invalid_option", str(exc)) from exc
        models = self.engine.models
        missing = [c for c in ("landmarker", "occluder", "parser", *capability_kinds())
                   if c in needed and c not in models]
        if missing:
            raise StreamRefused(CLOSE_UNSUPPORTED, "invalid_option",
                                f"the options need models this server did not load: {', '.join(missing)}")
        try:
            return EngineStreamProcessor(self, identity, start)
        except ValueError as exc:  # select reference without a reference face
            raise StreamRefused(CLOSE_UNSUPPORTED, "invalid_option", str(exc)) from exc


class EngineStreamProcessor:
    """One stream's processing: detect (or, at level 3, follow the faces on crops), select, swap,
    paste, enhance."""

    def __init__(self, backend: EngineBackend, identity: SourceIdentity, start: StartMessage) -> None:
        self.backend = backend
        self.engine = backend.engine
        self.identity = identity
        self.start = start
        self.options = start.facefusion
        self.selection = chain.Selection.asked(start.select, start.face_index,
                                               configured(self.engine.cfg, self.options).selection, backend.reference)
        self.costly = is_costly(configured(self.engine.cfg, self.options))
        self.light = without_costly(self.options, self.engine.cfg)
        blend = start.enhancer_blend
        self.blend = blend / 100 if blend is not None else self.engine.cfg.enhance.blend
        enhancer = [self.engine.cfg.models.enhancer] if start.wants_enhancer else []
        used = {self.engine.cfg.models.detector, self.engine.cfg.models.swapper, *enhancer}
        self._stand_ins = sorted(n for n in self.engine.stand_in_models if n in used)
        self.follower = StreamFollower(self.engine.cfg.tracking)
        self._follow_lock = threading.Lock()  # frames of one stream may be processed at once

    @property
    def stand_in_models(self) -> list[str]:
        return self._stand_ins

    async def process(self, frame: Frame, plan: FramePlan) -> Processed:
        return await asyncio.to_thread(self.process_sync, frame, plan)

    def process_sync(self, frame: Frame, plan: FramePlan) -> Processed:
        """The frame through :class:`FrameChain` with the plan's detection choices; finding the
        faces holds the stream's follower, the rest of the chain does not."""
        check_frame(frame)
        request = plan.request(frame, self.selection, enhance_blend=self.blend, follower=self.follower,
                               options=self.options, light=self.light)
        job = FrameJob(request, self.start.source_id, self.identity)
        with self._follow_lock:
            found = self.backend.chain.faces(job)
        done = self.backend.chain.finish([job], [found])[0]
        if done.error:  # never a frame whose selected faces were not swapped
            raise ValueError(done.error)
        return Processed(done.frame, done.landmarks, done.faces_detected)
