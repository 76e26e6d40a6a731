"""An in-process stream backend over an :class:`~fusion_ray.engine.Engine` (no Ray).

Used by the in-process host (:mod:`fusion_ray.live.localhost`) for tests and benchmarks. The
Serve ingress implements the same :class:`~fusion_ray.live.backend.StreamBackend` over its
detector and swapper deployments.
"""

from __future__ import annotations

import asyncio
import threading

from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.core.redetect import redetect
from fusion_ray.core.sources import SourceStore
from fusion_ray.engine import Engine
from fusion_ray.live.backend import FramePlan, Processed, SourceStatus, StreamRefused, token_matches
from fusion_ray.live.follow import StreamFollower
from fusion_ray.live.protocol import CLOSE_POLICY, CLOSE_UNSUPPORTED, StartMessage
from fusion_ray.models.detector import DetectorCanvases, ScrfdDetector
from fusion_ray.types import Frame, SourceIdentity, check_frame


class EngineBackend:
    """Sources in a bounded store, one :class:`EngineStreamProcessor` per stream."""

    def __init__(self, engine: Engine, *, token: str | None = None, max_sources: int = 256) -> None:
        self.engine = engine
        self.token = token
        self.sources = SourceStore(max_sources)
        self._canvases: DetectorCanvases | None = None
        self._lock = threading.Lock()

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

    def detector(self, size: int | None = None, *, square: bool = False) -> ScrfdDetector:
        """The engine's detector, or one sharing its session on another canvas (a smaller one at
        level 3; the square crop canvas of level 2's re-detection with ``square``)."""
        with self._lock:
            if self._canvases is None:
                self._canvases = DetectorCanvases(self.engine.models.need_detector())
        return self._canvases.get(size, square=square)

    async def open(self, start: StartMessage) -> EngineStreamProcessor:
        identity = self.sources.get(start.source_id)
        if identity is None:
            raise StreamRefused(CLOSE_POLICY, "unknown_source", f"unknown source_id {start.source_id!r}")
        if start.enhance and self.engine.models.enhancer is None:
            raise StreamRefused(CLOSE_UNSUPPORTED, "enhance_unavailable", "this server has no enhancer")
        return EngineStreamProcessor(self, identity, start)


class EngineStreamProcessor:
    """One stream's processing: detect (or, at level 2, follow the faces on crops), select, swap,
    paste, enhance."""

    def __init__(self, backend: EngineBackend, identity: SourceIdentity, start: StartMessage) -> None:
        self.backend = backend
        self.engine = backend.engine
        self.identity = identity
        self.start = start
        enhancer = [self.engine.cfg.models.enhancer] if start.enhance else []
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
        """The core chain of ``Engine.process_frame``, with the plan's detection choices."""
        check_frame(frame)
        engine = self.engine
        errors = [""]
        faces, detected = self._faces(frame, plan, errors)
        if not len(faces):
            _raise_first(errors)
            return Processed(frame, faces.landmarks_5, detected)
        faces = chain.align([frame], faces, engine.swap_layout, errors, "align")
        faces = chain.swap(engine.backend, faces, {"": self.identity}, errors)
        out = chain.paste([frame], faces, engine.swap_layout, errors)[0]
        if plan.enhance:
            crops = chain.align_for_enhance([out], faces, engine.enhance_layout, errors)
            enhanced = chain.enhance(engine.models.need_enhancer(), crops, engine.cfg.enhance.blend)
            out = chain.paste([out], enhanced, engine.enhance_layout, errors, "enhance_paste")[0]
        _raise_first(errors)  # never a frame whose selected faces were not swapped
        return Processed(out, faces.landmarks_5, detected)

    def _faces(self, frame: Frame, plan: FramePlan, errors: list[str]) -> tuple[FaceBatch, int]:
        """Detected on the whole frame, or (level 2, ``plan.landmarks`` set) followed on crops."""
        with self._follow_lock:
            predictions = self.follower.predictions(plan.seq, plan.landmarks is not None)
            if predictions:
                tracking = self.engine.cfg.tracking
                roi = redetect(frame, self.backend.detector(tracking.roi_canvas, square=True), predictions, tracking,
                               self.follower.crops)
                followed = self.follower.followed(plan.seq, roi, frame.shape[:2])
                if followed is not None:
                    return followed, len(followed)
            found = chain.detect_select(self.backend.detector(plan.detector_size), [frame], errors,
                                        [chain.Selection(self.start.select, self.start.face_index)])
            self.follower.detected(plan.seq, found.faces, frame.shape[:2])
            return found.faces, int(found.faces_detected[0])


def _raise_first(errors: list[str]) -> None:
    if errors[0]:
        raise ValueError(errors[0])
