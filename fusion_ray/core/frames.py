"""Whole frames through the chain in one process, batched across frames: the fused placement.

:class:`FrameChain` runs detect (or, for a live stream at level 2, follow the faces on crops),
select, align, swap, paste and enhance over a batch of :class:`FrameJob` values, each frame with
its own source, selection, enhancement and detector canvas. Every step is the core's
(:mod:`fusion_ray.core.chain`, the same functions the engine runs): the swap and the enhancer
run once over every face of every frame of the batch. Its users: the in-process live backend
(``fusion-ray live``, :mod:`fusion_ray.live.local`) with batches of one frame, and the fused Serve
deployment (:mod:`fusion_ray.serve.fused`), whose ``@serve.batch`` gathers the frames of
concurrent HTTP requests and live streams.

A frame's failure is its :attr:`FrameDone.error` (the frame comes back unchanged); the caller
never passes it off as processed. Fatal errors (memory, model, provider) raise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

import numpy as np

from fusion_ray.config import EngineConfig, TrackingConfig
from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.core.layout import CropLayout, enhance_layout, swap_layout
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.redetect import CropBox, RoiResult, redetect
from fusion_ray.core.swapper import SwapBackend, swap_backend
from fusion_ray.core.tracking import TrackPrediction
from fusion_ray.models.detector import DetectorCanvases
from fusion_ray.models.enhancer import GfpganEnhancer
from fusion_ray.types import Frame, SourceIdentity


class Follower(Protocol):
    """A live stream's faces between full detections (:class:`fusion_ray.live.follow.StreamFollower`)."""

    crops: dict[int, CropBox]

    def predictions(self, seq: int, follow: bool) -> list[TrackPrediction]: ...

    def followed(self, seq: int, roi: RoiResult, frame_hw: tuple[int, int]) -> FaceBatch | None: ...

    def detected(self, seq: int, faces: FaceBatch, frame_hw: tuple[int, int]) -> None: ...


@dataclass(frozen=True)
class FrameJob:
    """One frame and how to process it.

    ``enhance_blend`` None: no enhancer. ``detector_size``: a smaller canvas (a live stream's
    level 3). ``follower``: a live stream's; with ``follow`` its faces are re-detected on crops
    around their predictions (level 2) and a full detection is the fallback.
    """

    frame: Frame
    source_id: str
    identity: SourceIdentity
    selection: chain.Selection
    enhance_blend: float | None = None
    detector_size: int | None = None
    seq: int = 0
    follow: bool = False
    follower: Follower | None = None


@dataclass(frozen=True)
class FoundFaces:
    """A frame's faces to swap, how many detection found, and its error ("" when fine)."""

    faces: FaceBatch
    detected: int
    error: str = ""


@dataclass(frozen=True)
class FrameDone:
    """A processed frame: ``landmarks`` (n, 5, 2) of the faces swapped; ``follower`` the job's,
    updated (a copy when the job crossed a process boundary)."""

    frame: Frame
    faces_detected: int
    landmarks: np.ndarray
    error: str = ""
    follower: Follower | None = None

    @property
    def faces_swapped(self) -> int:
        return len(self.landmarks)


class FrameChain:
    """The models and layouts of one process, and the chain over batches of frames."""

    def __init__(self, cfg: EngineConfig, models: ModelSet) -> None:
        self.canvases = DetectorCanvases(models.need_detector())
        self.models = models
        self.tracking: TrackingConfig = cfg.tracking
        self.swap_layout: CropLayout = swap_layout(cfg)
        self.enhance_layout: CropLayout = enhance_layout(cfg)
        self._cfg = cfg
        self._backend: SwapBackend | None = None

    @property
    def backend(self) -> SwapBackend:
        if self._backend is None:
            self._backend = swap_backend(self._cfg, self.models)
        return self._backend

    @property
    def enhancer(self) -> GfpganEnhancer | None:
        return self.models.enhancer

    def run(self, jobs: Sequence[FrameJob]) -> list[FrameDone]:
        """Every job's frame through the whole chain."""
        return self.swap(jobs, [self.faces(job) for job in jobs])

    def faces(self, job: FrameJob) -> FoundFaces:
        """The job's faces to swap: followed on crops (level 2), else detected and selected on
        the whole frame; the follower, if any, is updated either way."""
        errors = [""]
        found = chain.guarded(errors, 0, "detect", partial(self._faces, job, errors), None)
        if found is None or errors[0]:
            return FoundFaces(FaceBatch.empty(), 0, errors[0])
        faces, detected = found
        return FoundFaces(replace(faces, source_id=np.full(len(faces), job.source_id, object)), detected)

    def _faces(self, job: FrameJob, errors: list[str]) -> tuple[FaceBatch, int]:
        follower, frame = job.follower, job.frame
        hw = (int(frame.shape[0]), int(frame.shape[1]))
        predictions = follower.predictions(job.seq, job.follow) if follower is not None else []
        if follower is not None and predictions:
            roi = redetect(frame, self.canvases.get(self.tracking.roi_canvas, square=True), predictions,
                           self.tracking, follower.crops)
            followed = follower.followed(job.seq, roi, hw)
            if followed is not None:
                return followed, len(followed)
        found = chain.detect_select(self.canvases.get(job.detector_size), [frame], errors, [job.selection])
        if follower is not None and not errors[0]:
            follower.detected(job.seq, found.faces, hw)
        return found.faces, int(found.faces_detected[0])

    def swap(self, jobs: Sequence[FrameJob], found: Sequence[FoundFaces]) -> list[FrameDone]:
        """Align, swap, paste (and enhance) the found faces of every job, each model once per batch."""
        errors = [f.error for f in found]
        frames = [job.frame for job in jobs]
        faces = FaceBatch.merge([f.faces for f in found], range(len(found)))
        faces = chain.align(frames, faces, self.swap_layout, errors, "align")
        identities = {job.source_id: job.identity for job in jobs}
        faces = chain.swap(self.backend, faces, identities, errors) if len(faces) else faces
        out = chain.paste(frames, faces, self.swap_layout, errors)
        out = self._enhance(jobs, out, faces, errors)
        return [FrameDone(out[i] if not errors[i] else job.frame, f.detected,
                          faces.of_frame(i).landmarks_5 if not errors[i] else np.zeros((0, 5, 2), np.float32),
                          errors[i], job.follower)
                for i, (job, f) in enumerate(zip(jobs, found, strict=True))]

    def _enhance(self, jobs: Sequence[FrameJob], frames: list[Frame], faces: FaceBatch,
                 errors: list[str]) -> list[Frame]:
        """The enhancer over the faces of the jobs that ask for it, once per distinct blend."""
        blends = sorted({job.enhance_blend for job in jobs if job.enhance_blend is not None})
        for blend in blends:
            rows = [i for i, job in enumerate(jobs) if job.enhance_blend == blend and not errors[i]]
            mine = faces.take(np.flatnonzero(np.isin(faces.frame_index, rows)))
            if not len(mine):
                continue
            if self.enhancer is None:
                raise ValueError("a frame asks for the enhancer but none is loaded")
            crops = chain.align_for_enhance(frames, mine, self.enhance_layout, errors)
            enhanced = chain.enhance(self.enhancer, crops, blend)
            frames = chain.paste(frames, enhanced, self.enhance_layout, errors, "enhance_paste")
        return frames
