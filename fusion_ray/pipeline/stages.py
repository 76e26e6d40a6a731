"""Stage classes over numpy batches, shared by the Ray Data pipeline and the Ray Serve deployments.

A batch is ``dict[str, np.ndarray]`` with one row per frame. Each stage is a callable class:
``__init__`` loads only the models it needs (sessions are created in the worker, sized to the
stage's CPU budget), ``__call__`` validates its required columns and returns the batch with
its own columns added. No stage imports Ray.

The chain (columns each stage adds):

``DetectStage`` (CPU)   frame -> faces_detected, faces_selected, landmarks, crops, affines
``SwapStage`` (GPU)     crops, source_id -> crops (swapped; batched across every face of the batch)
``PasteStage`` (CPU)    frame, crops, affines -> frame (swapped); with enhancement also
                        enhance_crops, enhance_affines
``EnhanceStage`` (GPU)  enhance_crops -> enhance_crops (enhanced, batched)
``PasteEnhancedStage`` (CPU) frame, enhance_crops, enhance_affines -> frame

Faces per frame vary (0 to many): per-face data is one array per row with a leading face
axis (``landmarks`` (n, 5, 2), ``crops`` (n, S, S, 3), ...), stored in an object column.

Every stage records, per row, its share of the batch's busy time (``busy_ms_<stage>``) and of
the time the stage waited for that batch since its previous one (``idle_ms_<stage>``), so the
sink can report per-stage time and idle ratio. A frame whose processing fails keeps its input
pixels, gets a message in ``error`` and is skipped by later stages: frames are never dropped.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import cv2
import numpy as np

from fusion_ray.config import EngineConfig
from fusion_ray.engine import Component, Engine, landmarks_of
from fusion_ray.ops.select import select_faces
from fusion_ray.types import Embedding, SourceIdentity

log = logging.getLogger(__name__)

Batch = dict[str, Any]
DEFAULT_SOURCE_ID = "default"
PER_FACE_COLUMNS = ("landmarks", "crops", "affines", "enhance_crops", "enhance_affines")


class StageInputError(ValueError):
    """A batch lacks a column the stage needs (a wiring bug, not a per-frame failure)."""


def object_column(values: Sequence[Any]) -> np.ndarray:
    """A 1-D object array holding one value (often an ndarray) per row."""
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


def num_rows(batch: Mapping[str, Any], column: str = "frame") -> int:
    return len(batch[column])


def errors_of(batch: Mapping[str, Any], n: int) -> list[str]:
    """The per-row error messages ("" for rows that are fine)."""
    if "error" not in batch:
        return [""] * n
    return [str(e) if e is not None else "" for e in batch["error"]]


class Stage:
    """Base class: column validation, per-row busy/idle accounting, per-frame error capture."""

    name = "stage"
    required: tuple[str, ...] = ("frame",)
    rows_column = "frame"
    """The column that has one entry per row (GPU stages need no frames, only crops)."""

    def __init__(self, threads: int | None = None) -> None:
        if threads is not None:
            cv2.setNumThreads(threads)  # OpenCV's pool defaults to every core of the host
        self._last_end: float | None = time.perf_counter()

    def __call__(self, batch: Batch) -> Batch:
        start = time.perf_counter()
        idle_s = start - self._last_end if self._last_end is not None else 0.0
        missing = [c for c in self.required if c not in batch]
        if missing:
            raise StageInputError(f"{self.name}: batch lacks column(s) {missing}; has {sorted(batch)}")
        out = dict(batch)
        n = num_rows(batch, self.rows_column)
        out["error"] = np.asarray(errors_of(batch, n), dtype=object)
        if n:
            self.process(out)
        end = time.perf_counter()
        self._last_end = end
        rows = max(n, 1)
        out[f"busy_ms_{self.name}"] = np.full(n, (end - start) * 1000.0 / rows)
        out[f"idle_ms_{self.name}"] = np.full(n, idle_s * 1000.0 / rows)
        return out

    def process(self, batch: Batch) -> None:
        """Fill the stage's columns in place."""
        raise NotImplementedError

    def _fail(self, batch: Batch, row: int, exc: BaseException) -> None:
        message = f"{self.name}: {type(exc).__name__}: {exc}"
        log.warning("frame %s failed: %s", _row_label(batch, row), message)
        batch["error"][row] = message


def _threads(cpu_budget: float | None) -> int | None:
    return None if cpu_budget is None else max(1, math.ceil(cpu_budget))


def _row_label(batch: Mapping[str, Any], row: int) -> str:
    for key in ("path", "index"):
        if key in batch:
            return f"{key}={batch[key][row]}"
    return f"row {row}"


def _faces_of(batch: Mapping[str, Any], column: str, row: int) -> np.ndarray:
    return np.asarray(batch[column][row])


class DetectStage(Stage):
    """CPU: detect, (embed for reference selection), select, and cut the swap crops.

    Optional per-row columns ``select_mode`` and ``face_index`` override the configured
    selection (``all``, ``largest`` or ``index``) for that row. ``engine`` reuses an engine
    that already holds the detector (and embedder) instead of loading one.
    """

    name = "detect"
    required = ("frame",)

    def __init__(self, cfg: EngineConfig, *, cpu_budget: float | None = None,
                 reference: Embedding | None = None, engine: Engine | None = None) -> None:
        components: list[Component] = ["detector"]
        if cfg.selection.mode == "reference":
            if reference is None:
                raise ValueError("reference selection needs the reference embedding")
            components.append("embedder")
        self.engine = engine if engine is not None else Engine.load(cfg, components=components, cpu_budget=cpu_budget)
        self.reference = reference
        super().__init__(_threads(cpu_budget))

    def _select(self, batch: Batch, row: int, faces: list[Any]) -> list[Any]:
        if "select_mode" not in batch:
            return self.engine.select(faces, self.reference)
        mode = str(batch["select_mode"][row])
        if mode == "reference":
            raise ValueError("per-row selection cannot be 'reference'")
        index = int(batch["face_index"][row]) if "face_index" in batch else 0
        return select_faces(faces, mode, index=index)

    def process(self, batch: Batch) -> None:
        n = num_rows(batch)
        detected = np.zeros(n, np.int32)
        selected = np.zeros(n, np.int32)
        landmarks, crops, affines = [], [], []
        size = self.engine.swap_crop_size
        for row in range(n):
            points = np.zeros((0, 5, 2), np.float32)
            face_crops = np.zeros((0, size, size, 3), np.uint8)
            face_affines = np.zeros((0, 2, 3), np.float64)
            if not batch["error"][row]:
                try:
                    frame = np.asarray(batch["frame"][row])
                    faces = self.engine.detect(frame)
                    if faces and self.engine.cfg.selection.mode == "reference":
                        faces = self.engine.embed_faces(frame, faces)
                    chosen = self._select(batch, row, faces)
                    detected[row], selected[row] = len(faces), len(chosen)
                    points = landmarks_of(chosen)
                    face_crops, face_affines = self.engine.align_for_swap(frame, points)
                except Exception as exc:  # one bad frame must not lose the batch
                    self._fail(batch, row, exc)
            landmarks.append(points)
            crops.append(face_crops)
            affines.append(face_affines)
        batch["faces_detected"] = detected
        batch["faces_swapped"] = selected
        batch["landmarks"] = object_column(landmarks)
        batch["crops"] = object_column(crops)
        batch["affines"] = object_column(affines)


class SwapStage(Stage):
    """GPU: swap every face of every frame in the batch in one batched call.

    Each row's identity is ``identities[source_id]`` (a job's sources, embedded once and
    shared with every actor), or the row's own ``identity`` object (online serving, where
    every request brings its own).
    """

    name = "swap"
    required = ("crops",)
    rows_column = "crops"

    def __init__(self, cfg: EngineConfig, identities: Mapping[str, SourceIdentity] | None = None, *,
                 cpu_budget: float | None = None) -> None:
        self.engine = Engine.load(cfg, components=["swapper"], cpu_budget=cpu_budget)
        self.identities = dict(identities or {})
        super().__init__(_threads(cpu_budget))

    def process(self, batch: Batch) -> None:
        _batched_face_call(self, batch, "crops", self._swap)

    def _swap(self, crops: np.ndarray, rows: list[int], batch: Batch) -> np.ndarray:
        own = batch.get("identity")
        if own is not None:
            return self.engine.swap_crops(crops, [own[row] for row in rows])
        ids = batch.get("source_id")
        identities = []
        for row in rows:
            source_id = str(ids[row]) if ids is not None else DEFAULT_SOURCE_ID
            if source_id not in self.identities:
                raise KeyError(f"unknown source_id {source_id!r}")
            identities.append(self.identities[source_id])
        return self.engine.swap_crops(crops, identities)


class PasteStage(Stage):
    """CPU: paste the swapped crops back; with enhancement, cut the enhancer crops too."""

    name = "paste"
    required = ("frame", "crops", "affines", "landmarks")

    def __init__(self, cfg: EngineConfig, *, cpu_budget: float | None = None) -> None:
        self.engine = Engine(cfg)
        super().__init__(_threads(cpu_budget))

    def process(self, batch: Batch) -> None:
        n = num_rows(batch)
        enhance = self.engine.cfg.enhance.enabled
        frames, e_crops, e_affines = [], [], []
        size = self.engine.enhance_crop_size
        for row in range(n):
            frame = np.asarray(batch["frame"][row])
            crops = _faces_of(batch, "crops", row)
            ec = np.zeros((0, size, size, 3), np.uint8)
            ea = np.zeros((0, 2, 3), np.float64)
            if not batch["error"][row] and len(crops):
                try:
                    frame = self.engine.paste_swapped(frame, crops, _faces_of(batch, "affines", row))
                    if enhance:
                        ec, ea = self.engine.align_for_enhance(frame, _faces_of(batch, "landmarks", row))
                except Exception as exc:
                    self._fail(batch, row, exc)
            frames.append(frame)
            e_crops.append(ec)
            e_affines.append(ea)
        batch["frame"] = _stack_frames(frames)
        for column in ("crops", "affines"):
            batch.pop(column, None)
        if enhance:
            batch["enhance_crops"] = object_column(e_crops)
            batch["enhance_affines"] = object_column(e_affines)
        else:
            batch.pop("landmarks", None)


class EnhanceStage(Stage):
    """GPU: enhance every swapped face of the batch in one batched call."""

    name = "enhance"
    required = ("enhance_crops",)
    rows_column = "enhance_crops"

    def __init__(self, cfg: EngineConfig, *, cpu_budget: float | None = None) -> None:
        self.engine = Engine.load(cfg, components=["enhancer"], cpu_budget=cpu_budget)
        super().__init__(_threads(cpu_budget))

    def process(self, batch: Batch) -> None:
        _batched_face_call(self, batch, "enhance_crops", lambda crops, rows, b: self.engine.enhance_crops(crops))


class PasteEnhancedStage(Stage):
    """CPU: paste the enhanced crops back."""

    name = "paste_enhanced"
    required = ("frame", "enhance_crops", "enhance_affines")

    def __init__(self, cfg: EngineConfig, *, cpu_budget: float | None = None) -> None:
        self.engine = Engine(cfg)
        super().__init__(_threads(cpu_budget))

    def process(self, batch: Batch) -> None:
        frames = []
        for row in range(num_rows(batch)):
            frame = np.asarray(batch["frame"][row])
            crops = _faces_of(batch, "enhance_crops", row)
            if not batch["error"][row] and len(crops):
                try:
                    frame = self.engine.paste_enhanced(frame, crops, _faces_of(batch, "enhance_affines", row))
                except Exception as exc:
                    self._fail(batch, row, exc)
            frames.append(frame)
        batch["frame"] = _stack_frames(frames)
        for column in ("enhance_crops", "enhance_affines", "landmarks"):
            batch.pop(column, None)


def _batched_face_call(stage: Stage, batch: Batch, column: str, call: Any) -> None:
    """Concatenate the faces of all healthy rows, run ``call`` once, split the result back.

    If the batched call fails, rows are retried one by one so that only the failing frames
    are marked.
    """
    n = num_rows(batch, column)
    per_row = [np.asarray(batch[column][row]) for row in range(n)]
    rows = [r for r in range(n) if not batch["error"][r] and len(per_row[r])]
    if rows:
        try:
            face_rows = [r for r in rows for _ in range(len(per_row[r]))]
            result = call(np.concatenate([per_row[r] for r in rows]), face_rows, batch)
            offset = 0
            for r in rows:
                count = len(per_row[r])
                per_row[r] = result[offset:offset + count]
                offset += count
        except Exception:
            for r in rows:
                try:
                    per_row[r] = call(per_row[r], [r] * len(per_row[r]), batch)
                except Exception as exc:
                    stage._fail(batch, r, exc)
    batch[column] = object_column(per_row)


def _stack_frames(frames: list[np.ndarray]) -> np.ndarray:
    """A (B, H, W, 3) array when all frames share a shape, else an object column."""
    if frames and all(f.shape == frames[0].shape for f in frames):
        return np.stack(frames)
    return object_column(frames)


def stage_names(cfg: EngineConfig) -> list[str]:
    """The stage names a pipeline with ``cfg`` runs, in order."""
    names = ["detect", "swap", "paste"]
    if cfg.enhance.enabled:
        names += ["enhance", "paste_enhanced"]
    return names
