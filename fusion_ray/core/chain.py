"""The typed swap chain on frames and :class:`FaceBatch` values.

``detect_faces`` -> ``select`` -> ``align`` -> ``swap`` -> ``paste`` (-> ``align_for_enhance`` ->
``enhance`` -> ``paste``). The steps of :mod:`fusion_ray.core.steps` call these; the runners run the steps.

Two kinds of failure: an input-specific one (a malformed frame, an unknown source) marks its
frame in ``errors`` and the batch goes on; a fatal one (see :func:`fusion_ray.errors.is_fatal`:
memory, model, provider) raises so that Ray restarts the actor or replica. Model calls run once
over every face of the batch and are never retried face by face.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import numpy as np

from fusion_ray.config import SelectionConfig
from fusion_ray.core import identity
from fusion_ray.core.facebatch import FaceBatch
from fusion_ray.core.layout import CropLayout, align_crops, paste_crops
from fusion_ray.core.swapper import SwapBackend
from fusion_ray.errors import is_fatal
from fusion_ray.models.detector import ScrfdDetector, nms
from fusion_ray.models.embedder import ArcFaceEmbedder
from fusion_ray.models.enhancer import SpecEnhancer
from fusion_ray.ops.rotate import map_boxes, map_points, merge_iou, turn_frame
from fusion_ray.ops.select import select_faces
from fusion_ray.types import Embedding, Face, Frame, SourceIdentity, check_frame

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Selection:
    """How one frame's faces are chosen (a request or item may override the configured mode)."""

    mode: str
    index: int = 0
    reference: Embedding | None = None
    max_distance: float = 0.6
    order: str | None = None
    """FaceFusion's ``--face-selector-order`` (None: reading order)."""

    @classmethod
    def of(cls, cfg: SelectionConfig, reference: Embedding | None = None) -> Selection:
        return cls(cfg.mode, cfg.index, reference, cfg.max_distance, cfg.order)

    @classmethod
    def asked(cls, mode: str | None, index: int | None, cfg: SelectionConfig,
              reference: Embedding | None = None) -> Selection:
        """A request's or stream's mode and index, each the configured one where it gives none
        (ValueError: mode reference without the reference face's embedding)."""
        chosen = cls(mode or cfg.mode, index if index is not None else cfg.index, reference, cfg.max_distance,
                     cfg.order)
        if chosen.mode == "reference" and reference is None:
            raise ValueError("select reference needs a reference face (engine.selection.reference_path)")
        return chosen

    def choose(self, faces: Sequence[Face]) -> list[Face]:
        return select_faces(faces, self.mode, index=self.index, reference=self.reference,
                            max_distance=self.max_distance, order=self.order)


def guarded(errors: list[str], row: int, stage: str, call: Callable[[], T], fallback: T) -> T:
    """``call()``, or ``fallback`` with the row marked in ``errors`` when it fails for this input."""
    try:
        return call()
    except Exception as exc:
        if is_fatal(exc):
            raise
        errors[row] = f"{stage}: {type(exc).__name__}: {exc}"
        log.warning("frame %d failed: %s", row, errors[row])
        return fallback


def detect_faces(detector: ScrfdDetector, frames: Sequence[Frame], errors: list[str], rows: Sequence[int],
                 selections: Sequence[Selection], *, embedder: ArcFaceEmbedder | None = None,
                 angles: Sequence[int] | None = None) -> dict[int, list[Face]]:
    """Every face of each healthy frame among ``rows`` (embedded where its selection is by
    reference); a frame that fails is marked in ``errors`` and has none. ``angles``: the detector
    angles (None: the detector's configured ones)."""
    found: dict[int, list[Face]] = {}
    for row in rows:
        if errors[row]:
            continue
        one = partial(_detect_all, detector, embedder, frames[row], selections[row],
                      detector.cfg.angles if angles is None else angles)
        found[row] = guarded(errors, row, "detect", one, [])
    return found


def _detect_all(detector: ScrfdDetector, embedder: ArcFaceEmbedder | None, frame: Frame,
                selection: Selection, angles: Sequence[int]) -> list[Face]:
    faces = detect_turned(detector, check_frame(np.asarray(frame)), angles)
    if faces and selection.mode == "reference":
        if embedder is None:
            raise ValueError("reference selection needs the embedder")
        faces = identity.embed_faces(embedder, frame, faces)
    return faces


def detect_turned(detector: ScrfdDetector, frame: Frame, angles: Sequence[int]) -> list[Face]:
    """The faces of ``frame`` found on it turned by each of ``angles`` (FaceFusion's
    ``--face-detector-angles``), mapped back onto it and merged: by descending score, a face
    overlapping a better one by more than :func:`~fusion_ray.ops.rotate.merge_iou` dropped.
    ``(0,)``: :meth:`ScrfdDetector.detect` on the frame as it is."""
    if tuple(angles) == (0,):
        return detector.detect(frame)
    height, width = frame.shape[:2]
    found: list[Face] = []
    for angle in dict.fromkeys(angles):
        turned, back = turn_frame(frame, angle)
        for face in detector.detect(turned):
            box = np.clip(map_boxes(face.bbox_xyxy, back)[0], 0, [width, height, width, height])
            found.append(Face(box, map_points(face.landmarks_5, back), face.score))
    if len(set(angles)) < 2 or not found:
        return found
    boxes = np.asarray([f.bbox_xyxy for f in found], np.float32)
    scores = np.asarray([f.score for f in found], np.float32)
    keep = nms(boxes, scores, merge_iou(len(set(angles))))[: detector.cfg.max_faces]
    return [found[int(i)] for i in keep]


def select(found: Mapping[int, Sequence[Face]], selections: Sequence[Selection], errors: list[str]
           ) -> dict[int, list[Face]]:
    """The faces to swap of each frame: the one decision, :meth:`Selection.choose`, for every
    caller (a frame whose selection fails is marked in ``errors`` and has none)."""
    return {row: guarded(errors, row, "select", partial(selections[row].choose, faces), [])
            for row, faces in found.items() if not errors[row]}


def align(frames: Sequence[Frame], faces: FaceBatch, layout: CropLayout, errors: list[str],
          stage: str) -> FaceBatch:
    """``faces`` with crops cut from their frames through ``layout`` (failed frames lose their faces)."""
    crops = np.zeros((len(faces), layout.size, layout.size, 3), np.uint8)
    affines = np.zeros((len(faces), 2, 3), np.float64)
    for row in sorted(set(faces.frame_index.tolist())):  # (np.unique costs ~6 ms on first use)
        idx = np.flatnonzero(faces.frame_index == row)
        none: tuple[np.ndarray, np.ndarray] | None = None
        cut = guarded(errors, int(row), stage, partial(align_crops, frames[int(row)], faces.landmarks_5[idx], layout),
                      none)
        if cut is not None:
            crops[idx], affines[idx] = cut
    return faces.with_crops(crops, affines).without_frames([r for r, e in enumerate(errors) if e])


def resolve_identities(faces: FaceBatch, identities: Mapping[str, SourceIdentity], backend: SwapBackend,
                       errors: list[str]) -> tuple[FaceBatch, list[SourceIdentity]]:
    """Each face's identity by its ``source_id``; frames with an unknown or unusable source are marked."""
    resolved: dict[str, SourceIdentity | Exception] = {}
    for source_id in dict.fromkeys(str(s) for s in faces.source_id):
        try:
            if source_id not in identities:
                raise KeyError(f"unknown source_id {source_id!r}")
            backend.check_identity(identities[source_id])
            resolved[source_id] = identities[source_id]
        except (KeyError, ValueError) as exc:
            resolved[source_id] = exc
    for row, source_id in zip(faces.frame_index, faces.source_id, strict=True):
        problem = resolved[str(source_id)]
        if isinstance(problem, Exception) and not errors[int(row)]:
            errors[int(row)] = f"swap: {type(problem).__name__}: {problem}"
    kept = faces.without_frames([r for r, e in enumerate(errors) if e])
    return kept, [resolved[str(s)] for s in kept.source_id]  # type: ignore[misc]


def swap(backend: SwapBackend, faces: FaceBatch, identities: Mapping[str, SourceIdentity],
         errors: list[str]) -> FaceBatch:
    """Swap every face of the batch in one backend call (faces of failed frames are left out)."""
    kept, rows = resolve_identities(faces, identities, backend, errors)
    if not len(kept):
        return kept
    crops, _ = kept.require_crops()
    return kept.with_crops(backend.swap(crops, rows, kept.embedding))


def paste(frames: Sequence[Frame], faces: FaceBatch, layout: CropLayout, errors: list[str],
          stage: str = "paste") -> list[Frame]:
    """Each frame with its faces' crops pasted back through their masks (the layout's when they
    have none); frames without faces (or failed) unchanged."""
    out = [np.asarray(f) for f in frames]
    if not len(faces):
        return out
    crops, affines = faces.require_crops()
    for row in sorted(set(faces.frame_index.tolist())):  # (np.unique costs ~6 ms on first use)
        r = int(row)
        if errors[r]:
            continue
        idx = np.flatnonzero(faces.frame_index == row)
        masks = faces.mask[idx] if faces.mask is not None else None
        out[r] = guarded(errors, r, stage, partial(paste_crops, out[r], crops[idx], affines[idx], layout, masks),
                         out[r])
    return out


def align_for_enhance(frames: Sequence[Frame], faces: FaceBatch, layout: CropLayout,
                      errors: list[str]) -> FaceBatch:
    """The faces re-cut from the (swapped) frames for the enhancer."""
    return align(frames, faces, layout, errors, "paste")


def enhance(enhancer: SpecEnhancer, faces: FaceBatch, blend: float, weight: float | None = None) -> FaceBatch:
    """Enhance every face of the batch in one model call, ``blend`` of it over the original;
    ``weight``: the model's weight input (None: the enhancer's own)."""
    if not len(faces):
        return faces
    crops, _ = faces.require_crops()
    return faces.with_crops(enhancer.enhance(crops, blend, weight))
