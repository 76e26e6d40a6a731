"""Whole frames through the chain in one process, batched across frames, whole or part by part.

:class:`FrameChain` runs the declared chain (:class:`fusion_ray.core.steps.Chain`, the steps the
engine, the local runner and the Ray stages run) over a batch of :class:`FrameJob` values, each
frame with its own source, selection, enhancement and detector canvas, all expressed as the
chain's per-frame :class:`~fusion_ray.core.steps.Rows`. A live stream at level 3 follows its
faces on crops before the chain; those faces are *given* to it, as a tracking read's are. The
swap and the enhancer run once over every face of every frame of the batch. Its users: the
in-process live backend (``fusion-ray live``, :mod:`fusion_ray.live.local`) with batches of one
frame, the fused Serve deployment (:mod:`fusion_ray.serve.fused`), whose ``@serve.batch``
gathers the frames of concurrent HTTP requests and live streams, and the split placement's
deployments, each of which runs one part of the chain (:meth:`FrameChain.find` and
:meth:`FrameChain.advance` between phases) and hands the frame's :class:`FrameState` on.

A frame's failure is its :attr:`FrameDone.error` (the frame comes back unchanged); the caller
never passes it off as processed. Fatal errors (memory, model, provider) raise.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core import chain
from fusion_ray.core.facebatch import FaceBatch, FrameBatch
from fusion_ray.core.facefusion_options import NO_OPTIONS, FaceFusionOptions, configured
from fusion_ray.core.lru import LockedLru
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.steps import PHASES, Chain, Phase, Rows, Tools
from fusion_ray.core.tracking.redetect import CropBox, RoiResult, redetect
from fusion_ray.core.tracking.tracks import TrackPrediction
from fusion_ray.errors import ConfigError
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
    """A :class:`FrameRequest` with its source: what :class:`FrameChain` runs.

    ``identity`` None: not known yet (the split placement detects while the source is looked up;
    the steps before the swap never read it)."""

    request: FrameRequest
    source_id: str
    identity: SourceIdentity | None


@dataclass(frozen=True)
class FrameState:
    """A frame part-way through the chain: what one part of it hands the next (in one process,
    :meth:`FrameChain.find` to :meth:`FrameChain.finish`; in the split placement, one deployment
    to the next)."""

    faces: FaceBatch
    """The frame's faces as the steps so far left them (a batch of one frame)."""
    detected: int
    """Faces detection found."""
    landmarks: np.ndarray
    """(n, 5, 2): the 5 points of the faces selected to swap (what :class:`FrameDone` reports)."""
    error: str = ""
    frame: Frame | None = None
    """The frame as the steps so far left it; None: the request's, unchanged."""

    def for_source(self, source_id: str) -> FrameState:
        """The state with its faces' source id set (found before the source was known)."""
        return replace(self, faces=replace(self.faces, source_id=np.full(len(self.faces), source_id, object)))


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


FIND_UNTIL: Phase = "select"
"""Where :meth:`FrameChain.find` stops by default: the faces to swap are known."""
_NO_POINTS = np.zeros((0, 5, 2), np.float32)


@dataclass(frozen=True)
class _Setup:
    """The chain under one set of request options, and its tools."""

    tools: Tools
    chain: Chain


class FrameChain:
    """The tools of one process and the declared chain over batches of frames: :meth:`find`
    runs its steps up to a phase (following or detecting first), :meth:`advance` the steps
    between two phases, :meth:`finish` the rest (align to paste), :meth:`run` all of it. The split placement runs
    the parts of a frame's chain in several processes, each with a FrameChain over its models.

    A frame's :attr:`FrameRequest.options` (FaceFusion's per-request options) are applied to the
    config by :func:`fusion_ray.core.facefusion_options.configured`; frames with the same options run
    together (each model once per group), over the same loaded models. The chain of each set of
    options is made once and kept (the last :data:`MAX_SETUPS`).
    """

    MAX_SETUPS = 16

    def __init__(self, cfg: EngineConfig, models: ModelSet, *, detects: bool = True) -> None:
        self.cfg = cfg
        self.models = models
        self._setups: LockedLru[FaceFusionOptions, _Setup] = LockedLru(self.MAX_SETUPS, self._made)
        self.tools = self.setup(NO_OPTIONS).tools
        if detects:
            self.tools.detector()  # no detector: fail here, not on the first frame

    def setup(self, options: FaceFusionOptions) -> _Setup:
        """The chain under ``options`` (ConfigError when they make an invalid config)."""
        return self._setups.get(options)

    def _made(self, options: FaceFusionOptions) -> _Setup:
        cfg = configured(self.cfg, options)
        # Enhancement is each frame's choice (FrameRequest.enhance_blend), so its steps are in the chain.
        cfg = cfg.model_copy(update={"enhance": cfg.enhance.model_copy(update={"enabled": True})})
        return _Setup(Tools(cfg, self.models), Chain.of(cfg))

    def part(self, options: FaceFusionOptions, after: Phase | None, until: Phase) -> Chain:
        """The steps a frame with ``options`` runs after ``after`` up to ``until``."""
        return self.setup(options).chain.part(after, until)

    def run(self, jobs: Sequence[FrameJob], timings: dict[str, float] | None = None) -> list[FrameDone]:
        """Every job's frame through the whole chain (``timings``: each step's busy ms is added)."""
        return self.finish(jobs, self.find(jobs, timings), timings)

    def faces(self, job: FrameJob) -> FrameState:
        """The job's faces to swap (see :meth:`find`)."""
        return self.find([job])[0]

    def find(self, jobs: Sequence[FrameJob], timings: dict[str, float] | None = None,
             until: Phase = FIND_UNTIL) -> list[FrameState]:
        """Each job's faces: followed on crops (level 3; given to the chain), else the chain's
        detection and selection; then its steps up to ``until``. Each follower is updated."""
        def one(setup: _Setup, rows: list[int]) -> list[FrameState]:
            return self._find(setup, [jobs[i] for i in rows], timings, until)

        return self._grouped(jobs, [FrameState(FaceBatch.empty(), 0, _NO_POINTS)] * len(jobs), one)

    def advance(self, jobs: Sequence[FrameJob], states: Sequence[FrameState], after: Phase, until: Phase,
                timings: dict[str, float] | None = None) -> list[FrameState]:
        """The steps after ``after`` up to ``until`` over every job's state, each model once per
        batch (per group of options); a failed frame's state passes on as it is."""
        def one(setup: _Setup, rows: list[int]) -> list[FrameState]:
            return self._advance(setup.tools, setup.chain.part(after, until), [jobs[i] for i in rows],
                                 [states[i] for i in rows], timings)

        return self._grouped(jobs, states, one)

    def finish(self, jobs: Sequence[FrameJob], found: Sequence[FrameState],
             timings: dict[str, float] | None = None) -> list[FrameDone]:
        """The rest of the chain (align, swap, paste, enhance...) over the found faces of every job."""
        return self.done(jobs, self.advance(jobs, found, FIND_UNTIL, PHASES[-1], timings))

    @staticmethod
    def done(jobs: Sequence[FrameJob], states: Sequence[FrameState]) -> list[FrameDone]:
        """The jobs' frames at the end of the chain (a failed one unchanged, with its error)."""
        return [FrameDone(job.request.frame, 0, _NO_POINTS, s.error, job.request.follower) if s.error else
                FrameDone(s.frame if s.frame is not None else job.request.frame, s.detected, s.landmarks, "",
                          job.request.follower)
                for job, s in zip(jobs, states, strict=True)]

    def _grouped(self, jobs: Sequence[FrameJob], states: Sequence[FrameState],
                 run: Callable[[_Setup, list[int]], list[FrameState]]) -> list[FrameState]:
        """``run`` over the jobs of each set of options; a set that makes an invalid config fails its frames."""
        out: dict[int, FrameState] = {}
        for options, rows in _by_options(jobs).items():
            try:
                out.update(zip(rows, run(self.setup(options), rows), strict=True))
            except ConfigError as exc:  # the caller checks options first: this is a caller's bug, per frame
                out.update((i, replace(states[i], error=f"options: {exc}")) for i in rows)
        return [out[i] for i in range(len(jobs))]

    def _find(self, setup: _Setup, jobs: Sequence[FrameJob], timings: dict[str, float] | None,
              until: Phase) -> list[FrameState]:
        errors = [""] * len(jobs)
        start = time.perf_counter()
        followed = [self._followed(job, errors, i) for i, job in enumerate(jobs)]
        if timings is not None and any(job.request.follower is not None for job in jobs):  # a live stream's tracker
            timings["track"] = timings.get("track", 0.0) + (time.perf_counter() - start) * 1000.0
        given = np.asarray([f is not None for f in followed])
        rows_given = [i for i, f in enumerate(followed) if f is not None]
        faces = FaceBatch.merge([f for f in followed if f is not None], rows_given)
        rows = self._rows(jobs, given, np.asarray([len(f) if f is not None else 0 for f in followed], np.int32))
        frames = [j.request.frame for j in jobs]
        selected = setup.chain.part(None, FIND_UNTIL).run(setup.tools, rows, FrameBatch(frames, errors, faces),
                                                          timings)
        detected = selected.counter("faces_detected")
        found = []
        for i, job in enumerate(jobs):
            mine = _one_frame(selected.faces, i) if not errors[i] else FaceBatch.empty()
            if job.request.follower is not None and not given[i] and not errors[i]:
                job.request.follower.detected(job.request.seq, mine, _hw(job.request.frame))
            found.append(FrameState(mine, int(detected[i]) if not errors[i] else 0, mine.landmarks_5, errors[i]))
        if until == FIND_UNTIL:
            return found
        return self._advance(setup.tools, setup.chain.part(FIND_UNTIL, until), jobs, found, timings)

    def _advance(self, tools: Tools, steps: Chain, jobs: Sequence[FrameJob], states: Sequence[FrameState],
                 timings: dict[str, float] | None) -> list[FrameState]:
        errors = [s.error for s in states]
        faces = FaceBatch.merge([s.faces for s in states], range(len(states)))
        frames = [s.frame if s.frame is not None else job.request.frame for job, s in zip(jobs, states, strict=True)]
        rows = self._rows(jobs, np.ones(len(jobs), bool), np.asarray([s.detected for s in states], np.int32))
        done = steps.run(tools, rows, FrameBatch(frames, errors, faces), timings)
        writes_frame = "frame" in steps.writes()
        return [replace(s, faces=_one_frame(done.faces, i) if not done.errors[i] else FaceBatch.empty(),
                        error=done.errors[i], frame=done.frames[i] if writes_frame else s.frame)
                for i, s in enumerate(states)]

    def _rows(self, jobs: Sequence[FrameJob], given: np.ndarray, found: np.ndarray) -> Rows:
        return Rows([job.request.selection for job in jobs], [job.source_id for job in jobs],
                    {job.source_id: job.identity for job in jobs if job.identity is not None}, given, found,
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


def _hw(frame: Frame) -> tuple[int, int]:
    return int(frame.shape[0]), int(frame.shape[1])


def _one_frame(faces: FaceBatch, row: int) -> FaceBatch:
    """The faces of frame ``row``, as a batch of one frame."""
    mine = faces.of_frame(row)
    return replace(mine, frame_index=np.zeros(len(mine), np.int64))
