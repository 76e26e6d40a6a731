"""Ray Data stage adapters: the chain's steps (:mod:`fusion_ray.core.steps`) over columnar batches.

A batch is ``dict[str, np.ndarray]`` with one row per frame. The stages are not written here:
:func:`stage_groups` cuts the chain into stages (each GPU step alone, the CPU steps between them
together) and a :class:`ChainStage` runs one group. Its columns follow from its steps' reads and
writes: it consumes the columns it needs, produces what its steps change and retires the faces
with the last stage that reads them. Faces travel as a :class:`FaceBatch` in the per-row
``face_*`` columns (:data:`FACE_COLUMNS`, and :data:`EXTRA_COLUMNS` while they have masks, 68 points, embeddings).

With today's steps and no GPU step added, the stages are:
``detect`` (detect, select, align), ``swap``, ``paste`` (mask, paste[, enhance_align]), and with
enhancement ``enhance`` and ``paste_enhanced`` (enhance_mask, paste_enhanced).

Every stage records, per row, its share of the batch's busy time (``busy_ms_<stage>``) and of
the time it waited for that batch since the previous one (``idle_ms_<stage>``), and its share of
each of its steps' busy time (``step_ms_<step>``: the report's per-step table). A frame whose
processing fails for its own reasons keeps its input pixels, gets a message in ``error`` and
is skipped by later stages; a fatal failure (a model, provider or memory error) raises, so
that Ray restarts the actor. No stage imports Ray.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core import chain
from fusion_ray.core.facebatch import (
    EXTRA_COLUMNS,
    FACE_COLUMNS,
    FaceBatch,
    FrameBatch,
    per_row,
)
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.steps import Chain, Phase, Rows, Step, Tools, run_steps
from fusion_ray.jobs.report import step_column
from fusion_ray.types import Embedding, SourceIdentity

Batch = dict[str, Any]
DEFAULT_SOURCE_ID = "default"
READ_FACE_COLUMNS = FACE_COLUMNS[:4]
"""The face columns before crops are cut (what a tracking read task fills)."""


class StageInputError(ValueError):
    """A batch lacks a column the stage needs (a wiring bug, not a per-frame failure)."""


def num_rows(batch: Mapping[str, Any], column: str = "frame") -> int:
    return len(batch[column])


def errors_of(batch: Mapping[str, Any], n: int) -> list[str]:
    """The per-row error messages ("" for rows that are fine)."""
    if "error" not in batch:
        return [""] * n
    return [str(e) if e is not None else "" for e in batch["error"]]


def source_ids_of(batch: Mapping[str, Any], n: int) -> list[str]:
    """Each row's source id (``DEFAULT_SOURCE_ID`` when the batch has no ``source_id`` column)."""
    if "source_id" not in batch:
        return [DEFAULT_SOURCE_ID] * n
    return [str(s) for s in batch["source_id"]]


class Stage:
    """Base class: column declarations, per-row busy/idle accounting, the ``error`` column."""

    name = "stage"
    consumes: tuple[str, ...] = ("frame",)
    produces: tuple[str, ...] = ()
    retires: tuple[str, ...] = ()
    rows_column = "frame"
    """The column that has one entry per row (GPU stages need no frames, only faces)."""

    def __init__(self, threads: int | None = None) -> None:
        if threads is not None:
            cv2.setNumThreads(threads)  # OpenCV's pool defaults to every core of the host
        self._last_end: float | None = time.perf_counter()

    def __call__(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        idle_s = start - self._last_end if self._last_end is not None else 0.0
        missing = [c for c in self.consumes if c not in batch]
        if missing:
            raise StageInputError(f"{self.name}: batch lacks column(s) {missing}; has {sorted(batch)}")
        n = num_rows(batch, self.rows_column)
        errors = errors_of(batch, n)
        produced = self.process(batch, errors) if n else {}
        unexpected = set(produced) - set(self.produces)
        if unexpected:
            raise StageInputError(f"{self.name}: produced undeclared column(s) {sorted(unexpected)}")
        out = {key: value for key, value in batch.items() if key not in self.retires}
        out.update(produced)
        out["error"] = np.asarray(errors, dtype=object)
        end = time.perf_counter()
        self._last_end = end
        rows = max(n, 1)
        out[f"busy_ms_{self.name}"] = np.full(n, (end - start) * 1000.0 / rows)
        out[f"idle_ms_{self.name}"] = np.full(n, idle_s * 1000.0 / rows)
        return out

    def process(self, batch: Batch, errors: list[str]) -> Batch:
        """The stage's produced columns; marks failed rows in ``errors``."""
        raise NotImplementedError


def _threads(cpu_budget: float | None) -> int | None:
    return None if cpu_budget is None else max(1, math.ceil(cpu_budget))


def frames_of(batch: Mapping[str, Any]) -> list[np.ndarray]:
    return [np.asarray(f) for f in batch["frame"]]


def stack_frames(frames: list[np.ndarray]) -> np.ndarray:
    """A (B, H, W, 3) array when all frames share a shape, else a per-row column."""
    if frames and all(f.shape == frames[0].shape for f in frames):
        return np.stack(frames)
    return per_row(frames)


@dataclass(frozen=True)
class StageGroup:
    """Consecutive steps of the chain run by one ``map_batches`` stage: each step that wants a
    GPU alone (its own pool), the CPU steps between them together. Named after its first step
    that has pool resources in the pipeline config (``detect``, ``swap``, ``paste``, ``enhance``,
    ``paste_enhanced``), else after its first step."""

    name: str
    steps: tuple[Step, ...]
    wants_gpu: bool

    def reads(self) -> set[str]:
        """What it needs from earlier stages (read before any of its own steps writes it)."""
        return set(Chain(self.steps).reads())

    def writes(self) -> set[str]:
        return set(Chain(self.steps).writes())


POOL_STAGES = ("detect", "swap", "paste", "enhance", "paste_enhanced")
"""The stage names the pipeline config has pool resources for."""
_FACE_FIELDS = {"faces", "crops", "masks"}
_COUNTERS = ("faces_detected", "faces_selected", "faces_swapped")


def stage_groups(steps: Chain) -> list[StageGroup]:
    """The chain's steps grouped into stages (see :class:`StageGroup`)."""
    runs: list[list[Step]] = []
    for step in steps.steps:
        if step.wants_gpu or not runs or runs[-1][0].wants_gpu:
            runs.append([step])
        else:
            runs[-1].append(step)
    groups = []
    for run in runs:
        name = next((s.name for s in run if s.name in POOL_STAGES), run[0].name)
        groups.append(StageGroup(name, tuple(run), run[0].wants_gpu))
    return groups


def stage_names(cfg: EngineConfig) -> list[str]:
    """The stage names a pipeline with ``cfg`` runs, in order."""
    return [g.name for g in stage_groups(Chain.of(cfg))]


class ChainStage(Stage):
    """One stage of the chain (a :class:`StageGroup` of its steps) over a dict batch.

    Reads the frames and the faces the steps need from the batch's columns, runs the steps
    (:func:`fusion_ray.core.steps.run_steps`), and writes back what they changed: the frames,
    the per-frame counters, and the faces while a later stage still reads them (the faces retire
    with the last stage that does).

    Every row is selected as configured; its ``source_id`` names its identity in
    ``identities`` (a job's sources, embedded once on the driver).

    ``tracked=True``: the read tasks tracked the videos' faces (``read_unit`` with tracking): a
    row marked ``tracked`` brings its selected faces in the face columns, and detect and select
    leave them as they are; other rows (images) are detected here, so the detector is loaded only
    when ``images`` says such rows may come.
    """

    def __init__(self, cfg: EngineConfig, name: str, identities: Mapping[str, SourceIdentity] | None = None, *,
                 cpu_budget: float | None = None, reference: Embedding | None = None, tracked: bool = False,
                 images: bool = True) -> None:
        groups = stage_groups(Chain.of(cfg))
        names = [g.name for g in groups]
        if name not in names:
            raise StageInputError(f"no stage {name!r} in this chain; it has {names}")
        k = names.index(name)
        self.group = groups[k]
        self.name = name
        detects = any(s.phase == "detect" for s in self.group.steps)
        # a video-only job's read tasks track: its detect step finds its faces given
        skipped: tuple[Phase, ...] = ("detect",) if tracked and not images else ()
        components = Chain(self.group.steps).components(cfg, skipping=skipped)
        # detection by reference needs the reference; the swapper weight's embedder (target_embed) does not
        if detects and cfg.selection.mode == "reference" and "embedder" in components and reference is None:
            raise ValueError("reference selection needs the reference embedding")
        self.models = ModelSet.load(cfg, list(dict.fromkeys(components)), cpu_budget=cpu_budget)
        self.tools = Tools(cfg, self.models)
        self.identities = dict(identities or {})
        self.default = chain.Selection.of(cfg.selection, reference)
        self.tracked = tracked and detects
        reads, writes = self.group.reads(), self.group.writes()
        later = set().union(*(g.reads() for g in groups[k + 1:]))
        self.reads_frame = "frame" in reads
        self.rows_column = "frame" if self.reads_frame else "face_bbox"
        self.emits_faces = bool(writes & _FACE_FIELDS) and bool(later & _FACE_FIELDS)
        consumes: list[str] = ["frame"] if self.reads_frame else []
        if "faces" in reads:
            consumes += READ_FACE_COLUMNS
        if "crops" in reads:
            consumes += [*READ_FACE_COLUMNS, "face_crop", "face_affine"]
        if self.tracked:
            consumes += ["tracked", "faces_found", *READ_FACE_COLUMNS]
        self.consumes = tuple(dict.fromkeys(consumes))
        self.counters = tuple(c for c in _COUNTERS if c in writes)
        faces_out = (*FACE_COLUMNS, *EXTRA_COLUMNS) if self.emits_faces else ()
        self.step_columns = {s.name: step_column(s.name) for s in self.group.steps}
        self.produces = (*(("frame",) if "frame" in writes else ()), *self.counters, *faces_out,
                         *self.step_columns.values())
        handles_faces = bool((reads | writes) & _FACE_FIELDS) or self.tracked
        retired = (*FACE_COLUMNS, *EXTRA_COLUMNS) if handles_faces else ()
        self.retires = (*retired, *(("tracked", "faces_found") if self.tracked else ()))
        super().__init__(_threads(cpu_budget))

    def _rows(self, batch: Batch, n: int) -> Rows:
        selections = [self.default] * n
        given = np.asarray(batch["tracked"], bool) if self.tracked else None
        found = np.asarray(batch["faces_found"], np.int32) if self.tracked else None
        return Rows(selections, source_ids_of(batch, n), self.identities, given, found)

    def process(self, batch: Batch, errors: list[str]) -> Batch:
        n = num_rows(batch, self.rows_column)
        rows = self._rows(batch, n)
        frames = frames_of(batch) if self.reads_frame else [_NO_FRAME] * n
        faces = FaceBatch.from_columns(batch, rows.source_ids) if "face_bbox" in batch else FaceBatch.empty()
        timings: dict[str, float] = {}
        done = run_steps(self.group.steps, self.tools, rows, FrameBatch(frames, errors, faces), timings)
        out: Batch = {name: done.counter(name) for name in self.counters}
        for step, column in self.step_columns.items():  # each step's busy time, shared by the rows
            out[column] = np.full(n, timings.get(step, 0.0) / max(n, 1))
        if "frame" in self.produces:
            out["frame"] = stack_frames(done.frames)
        if self.emits_faces:
            out.update(done.faces.to_columns(n))
        return out


_NO_FRAME = np.zeros((1, 1, 3), np.uint8)
"""What a stage that reads no frame (a GPU stage: faces only) holds in its place."""


def chain_stages(cfg: EngineConfig, identities: Mapping[str, SourceIdentity] | None = None, *,
                 cpu_budget: float | None = None, reference: Embedding | None = None, tracked: bool = False,
                 images: bool = True) -> list[ChainStage]:
    """Every stage of ``cfg``'s chain, in order (each loads its own models)."""
    return [ChainStage(cfg, name, identities, cpu_budget=cpu_budget, reference=reference, tracked=tracked,
                       images=images) for name in stage_names(cfg)]
