"""Ray Data stage adapters: thin columnar wrappers over the core chain (:mod:`fusion_ray.core.chain`).

A batch is ``dict[str, np.ndarray]`` with one row per frame. Each stage declares, once, the
columns it consumes and produces, and the columns it retires (consumes for the last time, so
they leave the batch). Faces travel as a :class:`FaceBatch` in the per-row ``face_*`` columns
(:data:`FACE_COLUMNS`); a stage that consumes faces and produces new ones replaces them.

``DetectStage`` (CPU)   frame -> faces_detected, faces_selected, faces (swap crops); with tracking
                        the read task brings each video frame's selected faces and it cuts their crops
``SwapStage`` (GPU)     faces (+ source_id) -> faces (swapped; one call for every face of the batch)
``PasteStage`` (CPU)    frame, faces -> frame, faces_swapped; with enhancement also the faces
                        re-cut for the enhancer, else the faces retire
``EnhanceStage`` (GPU)  faces -> faces (enhanced, one call)
``PasteEnhancedStage`` (CPU) frame, faces -> frame; the faces retire

Every stage records, per row, its share of the batch's busy time (``busy_ms_<stage>``) and of
the time it waited for that batch since the previous one (``idle_ms_<stage>``). A frame whose
processing fails for its own reasons keeps its input pixels, gets a message in ``error`` and
is skipped by later stages; a fatal failure (a model, provider or memory error) raises, so
that Ray restarts the actor. No stage imports Ray.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import cv2
import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.core import chain
from fusion_ray.core.facebatch import FACE_COLUMNS, FaceBatch, per_row
from fusion_ray.core.layout import enhance_layout, swap_layout
from fusion_ray.core.modelset import ModelSet
from fusion_ray.core.swapper import swap_backend
from fusion_ray.types import Embedding, SourceIdentity

Batch = dict[str, Any]
DEFAULT_SOURCE_ID = "default"
FACE_INPUTS = FACE_COLUMNS
"""The face columns a cropped FaceBatch has."""
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


class DetectStage(Stage):
    """CPU: detect, (embed for reference selection,) select, and cut the swap crops.

    Optional per-row columns ``select_mode`` and ``face_index`` override the configured
    selection (``all``, ``largest`` or ``index``) for that row.

    ``tracked=True``: the read tasks tracked the videos' faces (``read_unit`` with
    tracking): a row marked ``tracked`` brings its selected faces in the face columns and the
    stage only cuts their crops; other rows (images) are detected here, so the detector is
    loaded only when ``images`` says such rows may come.
    """

    name = "detect"
    consumes: tuple[str, ...] = ("frame",)
    produces = ("faces_detected", "faces_selected", *FACE_COLUMNS)

    def __init__(self, cfg: EngineConfig, *, cpu_budget: float | None = None,
                 reference: Embedding | None = None, tracked: bool = False, images: bool = True) -> None:
        components: list[Any] = ["detector"] if not tracked or images else []
        if components and cfg.selection.mode == "reference":
            if reference is None:
                raise ValueError("reference selection needs the reference embedding")
            components.append("embedder")
        self.models = ModelSet.load(cfg, components, cpu_budget=cpu_budget)
        self.tracked = tracked
        if tracked:
            self.consumes = ("frame", "tracked", "faces_found", *READ_FACE_COLUMNS)
            self.retires = ("tracked", "faces_found")
        self.default = chain.Selection.of(cfg.selection, reference)
        self.layout = swap_layout(cfg)
        super().__init__(_threads(cpu_budget))

    def _selections(self, batch: Batch, n: int) -> list[chain.Selection]:
        if "select_mode" not in batch:
            return [self.default] * n
        # A per-row 'reference' has no reference embedding: select_faces rejects that row.
        indices = batch["face_index"] if "face_index" in batch else [0] * n
        return [chain.Selection(str(batch["select_mode"][row]), int(indices[row])) for row in range(n)]

    def process(self, batch: Batch, errors: list[str]) -> Batch:
        n = num_rows(batch)
        frames = frames_of(batch)
        if self.tracked:
            found = self._tracked(batch, frames, errors)
        else:
            found = chain.detect_select(self.models.need_detector(), frames, errors, self._selections(batch, n),
                                        embedder=self.models.embedder, source_ids=source_ids_of(batch, n))
        faces = chain.align(frames, found.faces, self.layout, errors, "detect")
        return {"faces_detected": found.faces_detected, "faces_selected": faces.counts(n), **faces.to_columns(n)}

    def _tracked(self, batch: Batch, frames: list[np.ndarray], errors: list[str]) -> chain.Detections:
        """The read task's faces of tracked rows; the other rows (images) detected here."""
        n = num_rows(batch)
        tracked = np.asarray(batch["tracked"], bool)
        ids = source_ids_of(batch, n)
        faces = FaceBatch.from_columns(batch, ids)
        faces = faces.take(np.flatnonzero(tracked[faces.frame_index]) if len(faces) else [])
        detected = np.where(tracked, np.asarray(batch["faces_found"], np.int32), 0).astype(np.int32)
        # untracked rows are images; a row with an error (unread, an item's info row) is skipped
        rows = np.flatnonzero(~tracked & ~np.asarray([bool(e) for e in errors], bool))
        if len(rows):
            sub_errors = [errors[r] for r in rows]
            selections = self._selections(batch, n)
            found = chain.detect_select(self.models.need_detector(), [frames[r] for r in rows], sub_errors,
                                        [selections[r] for r in rows], embedder=self.models.embedder,
                                        source_ids=[ids[r] for r in rows])
            for k, r in enumerate(rows):
                errors[r] = sub_errors[k]
            detected[rows] = found.faces_detected
            faces = FaceBatch.merge([faces, replace(found.faces, frame_index=rows[found.faces.frame_index])])
        return chain.Detections(faces, detected)


class SwapStage(Stage):
    """GPU: swap every face of every frame in the batch in one batched call.

    Each row's identity is ``identities[source_id]``: a job's sources, embedded once on the
    driver and shared with every actor.
    """

    name = "swap"
    consumes = FACE_INPUTS
    produces = FACE_COLUMNS
    rows_column = "face_bbox"

    def __init__(self, cfg: EngineConfig, identities: Mapping[str, SourceIdentity] | None = None, *,
                 cpu_budget: float | None = None) -> None:
        self.models = ModelSet.load(cfg, ["swapper"], cpu_budget=cpu_budget)
        self.backend = swap_backend(cfg, self.models)
        self.identities = dict(identities or {})
        super().__init__(_threads(cpu_budget))

    def process(self, batch: Batch, errors: list[str]) -> Batch:
        n = num_rows(batch, self.rows_column)
        faces = FaceBatch.from_columns(batch, source_ids_of(batch, n))
        return chain.swap(self.backend, faces, self.identities, errors).to_columns(n)


class PasteStage(Stage):
    """CPU: paste the swapped crops back; with enhancement, cut the enhancer crops too."""

    name = "paste"
    consumes = ("frame", *FACE_INPUTS)
    produces = ("frame", "faces_swapped", *FACE_COLUMNS)

    def __init__(self, cfg: EngineConfig, *, cpu_budget: float | None = None) -> None:
        self.layout = swap_layout(cfg)
        self.enhance_layout = enhance_layout(cfg) if cfg.enhance.enabled else None
        self.retires = () if cfg.enhance.enabled else FACE_COLUMNS
        super().__init__(_threads(cpu_budget))

    def process(self, batch: Batch, errors: list[str]) -> Batch:
        n = num_rows(batch)
        faces = FaceBatch.from_columns(batch)
        frames = chain.paste(frames_of(batch), faces, self.layout, errors)
        faces = faces.without_frames([r for r, e in enumerate(errors) if e])
        out: Batch = {"frame": stack_frames(frames), "faces_swapped": faces.counts(n)}
        if self.enhance_layout is not None:
            out.update(chain.align_for_enhance(frames, faces, self.enhance_layout, errors).to_columns(n))
        return out


class EnhanceStage(Stage):
    """GPU: enhance every swapped face of the batch in one batched call."""

    name = "enhance"
    consumes = FACE_INPUTS
    produces = FACE_COLUMNS
    rows_column = "face_bbox"

    def __init__(self, cfg: EngineConfig, *, cpu_budget: float | None = None) -> None:
        self.models = ModelSet.load(cfg, ["enhancer"], cpu_budget=cpu_budget)
        self.blend = cfg.enhance.blend
        super().__init__(_threads(cpu_budget))

    def process(self, batch: Batch, errors: list[str]) -> Batch:
        n = num_rows(batch, self.rows_column)
        faces = FaceBatch.from_columns(batch).without_frames([r for r, e in enumerate(errors) if e])
        return chain.enhance(self.models.need_enhancer(), faces, self.blend).to_columns(n)


class PasteEnhancedStage(Stage):
    """CPU: paste the enhanced crops back."""

    name = "paste_enhanced"
    consumes = ("frame", *FACE_INPUTS)
    produces = ("frame",)
    retires = FACE_COLUMNS

    def __init__(self, cfg: EngineConfig, *, cpu_budget: float | None = None) -> None:
        self.layout = enhance_layout(cfg)
        super().__init__(_threads(cpu_budget))

    def process(self, batch: Batch, errors: list[str]) -> Batch:
        frames = chain.paste(frames_of(batch), FaceBatch.from_columns(batch), self.layout, errors,
                             "paste_enhanced")
        return {"frame": stack_frames(frames)}


def stage_names(cfg: EngineConfig) -> list[str]:
    """The stage names a pipeline with ``cfg`` runs, in order."""
    names = ["detect", "swap", "paste"]
    if cfg.enhance.enabled:
        names += ["enhance", "paste_enhanced"]
    return names
