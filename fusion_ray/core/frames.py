"""Whole frames through the chain in one process, batched across frames: the fused placement.

:class:`FrameChain` runs the declared chain (:class:`fusion_ray.core.steps.Chain`, the steps the
engine, the local runner and the Ray stages run) over a batch of :class:`FrameJob` values, each
frame with its own source, selection, enhancement and detector canvas, all expressed as the
chain's per-frame :class:`~fusion_ray.core.steps.Rows`. A live stream at level 3 follows its
faces on crops before the chain; those faces are *given* to it, as a tracking read's are. The
swap and the enhancer run once over every face of every frame of the batch. Its users: the
in-process live backend (``fusion-ray live``, :mod:`fusion_ray.live.local`) with batches of one
frame, and the fused Serve deployment (:mod:`fusion_ray.serve.fused`), whose ``@serve.batch``
gathers the frames of concurrent HTTP requests and live streams.

A frame's failure is its :attr:`FrameDone.error` (the frame comes back unchanged); the caller
never passes it off as processed. Fatal errors (memory, model, provider) raise.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.lru import LockedLru
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.redetect import CropBox, RoiResult, redetect
from fusion_ray.core.steps import Chain, Rows, Tools
from fusion_ray.core.tracking import TrackPrediction
from fusion_ray.errors import ConfigError
from fusion_ray.facefusion_options import NO_OPTIONS, FaceFusionOptions, configured
from fusion_ray.types import Frame, SourceIdentity


class Follower(Protocol):
    """A live stream's faces between full detections (:class:`fusion_ray.live.follow.StreamFollower`)."""

    crops: dict[int, CropBox]

    def predictions(self, seq: int, follow: bool) -> list[TrackPrediction]: ...

    def followed(self, seq: int, roi: RoiResult, frame_hw: tuple[int, int]) -> FaceBatch | None: ...

    def detected(self, seq: int, faces: FaceBatch, frame_hw: tuple[int, int]) -> None: ...


@dataclass(frozen=True)
class FrameRequest:
    """One frame and how to process it, before its source is known (what the service's ingress
    and live streams hand to the placed chain, :mod:`fusion_ray.serve.placement`).

    ``enhance_blend`` None: no enhancer. ``detector_size``: a smaller canvas (a live stream's
    level 4). ``follower``: a live stream's; with ``follow`` its faces are re-detected on crops
    around their predictions (level 3) and a full detection is the fallback.
    """

    frame: Frame
    selection: chain.Selection
    enhance_blend: float | None = None
    detector_size: int | None = None
    seq: int = 0
    follow: bool = False
    follower: Follower | None = None
    options: FaceFusionOptions = NO_OPTIONS
    """FaceFusion's per-request options (masks, pixel boost, weights...) over the chain's config."""


@dataclass(frozen=True)
class FrameJob:
    """A :class:`FrameRequest` with its source: what :class:`FrameChain` runs."""

    request: FrameRequest
    source_id: str
    identity: SourceIdentity


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


@dataclass(frozen=True)
class _Setup:
    """The chain under one set of request options: its tools and its two halves."""

    tools: Tools
    finding: Chain
    rest: Chain


class FrameChain:
    """The tools of one process and the declared chain over batches of frames: :meth:`faces`
    runs its steps up to selection, :meth:`swap` the rest, :meth:`run` both.

    A frame's :attr:`FrameRequest.options` (FaceFusion's per-request options) are applied to the
    config by :func:`fusion_ray.facefusion_options.configured`; frames with the same options run
    together (each model once per group), over the same loaded models. The chain of each set of
    options is made once and kept (the last :data:`MAX_SETUPS`).
    """

    MAX_SETUPS = 16

    def __init__(self, cfg: EngineConfig, models: ModelSet) -> None:
        self.cfg = cfg
        self.models = models
        self._setups: LockedLru[FaceFusionOptions, _Setup] = LockedLru(self.MAX_SETUPS, self._made)
        self.tools = self.setup(NO_OPTIONS).tools
        self.tools.detector()  # no detector: fail here, not on the first frame

    def setup(self, options: FaceFusionOptions) -> _Setup:
        """The chain under ``options`` (ConfigError when they make an invalid config)."""
        return self._setups.get(options)

    def _made(self, options: FaceFusionOptions) -> _Setup:
        cfg = configured(self.cfg, options)
        # Enhancement is each frame's choice (FrameRequest.enhance_blend), so its steps are in the chain.
        cfg = cfg.model_copy(update={"enhance": cfg.enhance.model_copy(update={"enabled": True})})
        finding, rest = Chain.of(cfg).split("select")
        return _Setup(Tools(cfg, self.models), finding, rest)

    def run(self, jobs: Sequence[FrameJob], timings: dict[str, float] | None = None) -> list[FrameDone]:
        """Every job's frame through the whole chain (``timings``: each step's busy ms is added)."""
        return self.swap(jobs, self.find(jobs, timings), timings)

    def faces(self, job: FrameJob) -> FoundFaces:
        """The job's faces to swap (see :meth:`find`)."""
        return self.find([job])[0]

    def find(self, jobs: Sequence[FrameJob], timings: dict[str, float] | None = None) -> list[FoundFaces]:
        """Each job's faces to swap: followed on crops (level 3; given to the chain), else the
        chain's steps up to selection; each follower is updated either way."""
        found: dict[int, FoundFaces] = {}
        for options, rows in _by_options(jobs).items():
            part = [jobs[i] for i in rows]
            try:
                found.update(zip(rows, self._find(self.setup(options), part, timings), strict=True))
            except ConfigError as exc:  # the caller checks options first: this is a caller's bug, per frame
                found.update((i, FoundFaces(FaceBatch.empty(), 0, f"options: {exc}")) for i in rows)
        return [found[i] for i in range(len(jobs))]

    def swap(self, jobs: Sequence[FrameJob], found: Sequence[FoundFaces],
             timings: dict[str, float] | None = None) -> list[FrameDone]:
        """The rest of the chain (align, swap, paste, enhance...) over the found faces of every job,
        each model once per batch (per group of options)."""
        done: dict[int, FrameDone] = {}
        for options, rows in _by_options(jobs).items():
            part = [jobs[i] for i in rows]
            try:
                done.update(zip(rows, self._swap(self.setup(options), part, [found[i] for i in rows], timings),
                                strict=True))
            except ConfigError as exc:
                done.update((i, _unchanged(jobs[i], f"options: {exc}")) for i in rows)
        return [done[i] for i in range(len(jobs))]

    def _find(self, setup: _Setup, jobs: Sequence[FrameJob], timings: dict[str, float] | None) -> list[FoundFaces]:
        errors = [""] * len(jobs)
        start = time.perf_counter()
        followed = [self._followed(job, errors, i) for i, job in enumerate(jobs)]
        if timings is not None and any(job.request.follower is not None for job in jobs):  # a live stream's tracker
            timings["track"] = timings.get("track", 0.0) + (time.perf_counter() - start) * 1000.0
        given = np.asarray([f is not None for f in followed])
        rows_given = [i for i, f in enumerate(followed) if f is not None]
        faces = FaceBatch.merge([f for f in followed if f is not None], rows_given)
        rows = self._rows(jobs, given, np.asarray([len(f) if f is not None else 0 for f in followed], np.int32))
        done = setup.finding.run(setup.tools, rows, FrameBatch([j.request.frame for j in jobs], errors, faces),
                                 timings)
        detected = done.counter("faces_detected")
        found = []
        for i, job in enumerate(jobs):
            mine = _one_frame(done.faces, i) if not errors[i] else FaceBatch.empty()
            if job.request.follower is not None and not given[i] and not errors[i]:
                job.request.follower.detected(job.request.seq, mine, _hw(job.request.frame))
            found.append(FoundFaces(mine, int(detected[i]) if not errors[i] else 0, errors[i]))
        return found

    def _swap(self, setup: _Setup, jobs: Sequence[FrameJob], found: Sequence[FoundFaces],
              timings: dict[str, float] | None) -> list[FrameDone]:
        errors = [f.error for f in found]
        faces = FaceBatch.merge([f.faces for f in found], range(len(found)))
        rows = self._rows(jobs, np.ones(len(jobs), bool), np.asarray([f.detected for f in found], np.int32))
        done = setup.rest.run(setup.tools, rows, FrameBatch([job.request.frame for job in jobs], errors, faces),
                              timings)
        none = np.zeros((0, 5, 2), np.float32)
        return [FrameDone(done.frames[i] if not errors[i] else job.request.frame, f.detected,
                          f.faces.landmarks_5 if not errors[i] else none, errors[i], job.request.follower)
                for i, (job, f) in enumerate(zip(jobs, found, strict=True))]

    def _rows(self, jobs: Sequence[FrameJob], given: np.ndarray, found: np.ndarray) -> Rows:
        return Rows([job.request.selection for job in jobs], [job.source_id for job in jobs],
                    {job.source_id: job.identity for job in jobs}, given, found,
                    canvases=[job.request.detector_size for job in jobs],
                    blends=[job.request.enhance_blend for job in jobs])

    def _followed(self, job: FrameJob, errors: list[str], row: int) -> FaceBatch | None:
        """The job's faces re-detected on crops around their predictions (None: detect the frame)."""
        follower = job.request.follower
        predictions = follower.predictions(job.request.seq, job.request.follow) if follower is not None else []
        if follower is None or not predictions:
            return None

        def follow() -> FaceBatch | None:
            assert follower is not None
            detector = self.tools.detector(self.tools.cfg.tracking.roi_canvas, square=True)
            roi = redetect(job.request.frame, detector, predictions, self.tools.cfg.tracking, follower.crops)
            return follower.followed(job.request.seq, roi, _hw(job.request.frame))

        faces = chain.guarded(errors, row, "detect", follow, None)
        return replace(faces, source_id=np.full(len(faces), job.source_id, object)) if faces is not None else None


def _by_options(jobs: Sequence[FrameJob]) -> dict[FaceFusionOptions, list[int]]:
    """The jobs' positions by their options, in order of first appearance."""
    groups: dict[FaceFusionOptions, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(job.request.options, []).append(i)
    return groups


def _unchanged(job: FrameJob, error: str) -> FrameDone:
    return FrameDone(job.request.frame, 0, np.zeros((0, 5, 2), np.float32), error, job.request.follower)


def _hw(frame: Frame) -> tuple[int, int]:
    return int(frame.shape[0]), int(frame.shape[1])


def _one_frame(faces: FaceBatch, row: int) -> FaceBatch:
    """The faces of frame ``row``, as a batch of one frame."""
    mine = faces.of_frame(row)
    return replace(mine, frame_index=np.zeros(len(mine), np.int64))
