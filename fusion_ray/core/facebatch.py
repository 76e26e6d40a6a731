"""``FaceBatch``: every face of a batch of frames as flat, validated arrays (one row per face).

Modelled on supervision's ``Detections``: per-face arrays with a frame index per face, so a
GPU stage sees one (N, S, S, 3) array for all faces of all frames at once. Optional arrays
(``crop``, ``affine_matrix``, ``embedding``, ``mask``) are None until a step fills them. ``mask``
holds each face's blend mask in crop coordinates: every mask step adds its own by element-wise
minimum (:meth:`FaceBatch.with_mask`), and paste blends through the result.

In a Ray Data batch (one row per frame) a FaceBatch travels as per-row columns
(:data:`FACE_COLUMNS`, each row holding that frame's faces); :meth:`to_columns` and
:meth:`from_columns` convert, and nothing else in the project knows the column layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from fusion_ray.types import Face

NO_TRACK = -1
"""``track_id`` of a face that belongs to no track (tracking off, or a still image)."""

FACE_COLUMNS = ("face_bbox", "face_landmarks", "face_score", "face_track", "face_crop", "face_affine")
"""Per-row Ray Data columns of a FaceBatch (``face_crop``/``face_affine`` only once cropped)."""
MASK_COLUMN = "face_mask"
"""The per-row column of the faces' masks (only while a FaceBatch has masks)."""
LANDMARKS_68_COLUMN = "face_landmarks_68"
"""The per-row column of the faces' 68 points (only while a FaceBatch has them)."""
EMBEDDING_COLUMN = "face_embedding"
"""The per-row column of the target faces' embeddings (only while a FaceBatch has them)."""
EXTRA_COLUMNS = (MASK_COLUMN, LANDMARKS_68_COLUMN, EMBEDDING_COLUMN)
"""The per-row columns a FaceBatch adds while it has those arrays (a runner passes them on with
:data:`FACE_COLUMNS` without naming each)."""
_OPTIONAL = ("crop", "affine_matrix", "embedding", "mask", "landmarks_68")

_CORE = ("frame_index", "bbox_xyxy", "landmarks_5", "score", "source_id", "track_id")


def _check(name: str, value: np.ndarray, shape: tuple[int | None, ...], dtype: type) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, array.shape, strict=True)):
        expected = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"FaceBatch.{name}: expected shape {expected}, got {array.shape}")
    return np.ascontiguousarray(array.astype(dtype, copy=False))


@dataclass(frozen=True)
class FaceBatch:
    """Faces of a batch of frames. All arrays have the same first dimension ``n`` (faces)."""

    frame_index: npt.NDArray[np.int64]
    bbox_xyxy: npt.NDArray[np.float32]
    landmarks_5: npt.NDArray[np.float32]
    score: npt.NDArray[np.float32]
    source_id: npt.NDArray[np.object_]
    track_id: npt.NDArray[np.int64]
    crop: npt.NDArray[np.uint8] | None = None
    affine_matrix: npt.NDArray[np.float64] | None = None
    embedding: npt.NDArray[np.float32] | None = None
    mask: npt.NDArray[np.float32] | None = None
    landmarks_68: npt.NDArray[np.float32] | None = None
    """(N, 68, 2) frame pixels, from a 68-point landmark step (area and mouth masks read them)."""

    def __post_init__(self) -> None:
        n = len(np.asarray(self.frame_index).reshape(-1))
        checks: dict[str, tuple[tuple[int | None, ...], type]] = {
            "frame_index": ((n,), np.int64), "bbox_xyxy": ((n, 4), np.float32),
            "landmarks_5": ((n, 5, 2), np.float32), "score": ((n,), np.float32),
            "source_id": ((n,), object), "track_id": ((n,), np.int64),
        }
        optional: dict[str, tuple[tuple[int | None, ...], type]] = {
            "crop": ((n, None, None, 3), np.uint8), "affine_matrix": ((n, 2, 3), np.float64),
            "embedding": ((n, None), np.float32), "mask": ((n, None, None), np.float32),
            "landmarks_68": ((n, 68, 2), np.float32),
        }
        for name, (shape, dtype) in {**checks, **optional}.items():
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            object.__setattr__(self, name, _check(name, value, shape, dtype))

    # --------------------------------------------------------------- building
    @classmethod
    def empty(cls) -> FaceBatch:
        """No faces."""
        return cls(np.zeros(0, np.int64), np.zeros((0, 4), np.float32), np.zeros((0, 5, 2), np.float32),
                   np.zeros(0, np.float32), np.zeros(0, object), np.zeros(0, np.int64))

    @classmethod
    def from_faces(cls, faces_per_frame: Sequence[Sequence[Face]],
                   source_ids: Sequence[str] | None = None) -> FaceBatch:
        """One FaceBatch from each frame's faces (``source_ids``: one per frame)."""
        rows = [(i, face) for i, faces in enumerate(faces_per_frame) for face in faces]
        if not rows:
            return cls.empty()
        ids = [source_ids[i] if source_ids is not None else "" for i, _ in rows]
        embeddings = [face.embedding for _, face in rows]
        return cls(np.asarray([i for i, _ in rows], np.int64),
                   np.stack([face.bbox_xyxy for _, face in rows]),
                   np.stack([face.landmarks_5 for _, face in rows]),
                   np.asarray([face.score for _, face in rows], np.float32),
                   np.asarray(ids, object), np.full(len(rows), NO_TRACK, np.int64),
                   embedding=np.stack(embeddings) if all(e is not None for e in embeddings) else None)  # type: ignore[arg-type]

    @classmethod
    def one_frame(cls, landmarks_5: np.ndarray, bbox_xyxy: np.ndarray | None = None,
                  score: np.ndarray | None = None, track_id: np.ndarray | None = None) -> FaceBatch:
        """The faces of a single frame (frame index 0) from their arrays; a missing box is the
        landmarks' extent, a missing score 1 and a missing track id :data:`NO_TRACK`."""
        points = np.asarray(landmarks_5, np.float32).reshape(-1, 5, 2)
        n = len(points)
        if bbox_xyxy is None:
            bbox_xyxy = (np.concatenate([points.min(axis=1), points.max(axis=1)], axis=1) if n
                         else np.zeros((0, 4), np.float32))
        return cls(np.zeros(n, np.int64), bbox_xyxy, points, np.ones(n, np.float32) if score is None else score,
                   np.full(n, "", object), np.full(n, NO_TRACK, np.int64) if track_id is None else track_id)

    @staticmethod
    def merge(batches: Sequence[FaceBatch], frame_offsets: Sequence[int] | None = None) -> FaceBatch:
        """Concatenate batches; ``frame_offsets`` shift each batch's frame indices."""
        batches = list(batches)
        if not batches:
            return FaceBatch.empty()
        offsets = list(frame_offsets) if frame_offsets is not None else [0] * len(batches)
        if len(offsets) != len(batches):
            raise ValueError(f"FaceBatch.merge: expected {len(batches)} offsets, got {len(offsets)}")
        values: dict[str, Any] = {}
        for name in _CORE:
            values[name] = np.concatenate([getattr(b, name) for b in batches])
        values["frame_index"] = np.concatenate([b.frame_index + o for b, o in zip(batches, offsets, strict=True)])
        for name in _OPTIONAL:
            parts = [getattr(b, name) for b in batches if len(b)]
            values[name] = np.concatenate(parts) if parts and all(p is not None for p in parts) else None
        return FaceBatch(**values)

    # ---------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self.frame_index)

    def take(self, indices: Sequence[int] | np.ndarray) -> FaceBatch:
        """The faces at ``indices`` (in that order)."""
        idx = np.asarray(indices, np.int64).reshape(-1)
        values = {name: getattr(self, name)[idx] for name in _CORE}
        for name in _OPTIONAL:
            value = getattr(self, name)
            values[name] = value[idx] if value is not None else None
        return FaceBatch(**values)

    def of_frame(self, frame: int) -> FaceBatch:
        """The faces of one frame."""
        return self.take(np.flatnonzero(self.frame_index == frame))

    def without_frames(self, frames: Sequence[int]) -> FaceBatch:
        """These faces less those of ``frames`` (frames that failed)."""
        return self.take(np.flatnonzero(~np.isin(self.frame_index, np.asarray(list(frames), np.int64))))

    def counts(self, num_frames: int) -> npt.NDArray[np.int32]:
        """Faces per frame."""
        return np.bincount(self.frame_index, minlength=num_frames).astype(np.int32)[:num_frames]

    def with_crops(self, crop: np.ndarray, affine_matrix: np.ndarray | None = None) -> FaceBatch:
        """These faces with new crops (and their affine matrices, when they changed: crops cut
        anew lose the masks of the old ones)."""
        if affine_matrix is None:
            return replace(self, crop=crop)
        return replace(self, crop=crop, affine_matrix=affine_matrix, mask=None)

    def with_mask(self, mask: np.ndarray) -> FaceBatch:
        """These faces with one more mask (N, S, S) in [0, 1], combined with theirs by
        element-wise minimum (a face is pasted only where every mask lets it through)."""
        mask = np.asarray(mask, np.float32)
        return replace(self, mask=mask if self.mask is None else np.minimum(self.mask, mask))

    def require_crops(self) -> tuple[np.ndarray, np.ndarray]:
        """(crop, affine_matrix); ValueError naming the step that should have made them."""
        if self.crop is None or self.affine_matrix is None:
            raise ValueError("FaceBatch: expected aligned crops (run an align step first), got none")
        return self.crop, self.affine_matrix

    def faces(self) -> list[Face]:
        """The faces as validated :class:`Face` values (embeddings included when present)."""
        return [Face(self.bbox_xyxy[i], self.landmarks_5[i], float(self.score[i]),
                     self.embedding[i] if self.embedding is not None else None) for i in range(len(self))]

    # ------------------------------------------------------- Ray Data columns
    def to_columns(self, num_frames: int) -> dict[str, np.ndarray]:
        """Per-row columns (row r holds the faces of frame r), as :data:`FACE_COLUMNS`."""
        order = np.argsort(self.frame_index, kind="stable")
        ordered = self.take(order)
        bounds = np.concatenate([[0], np.cumsum(ordered.counts(num_frames))])
        arrays: dict[str, np.ndarray] = {"face_bbox": ordered.bbox_xyxy, "face_landmarks": ordered.landmarks_5,
                  "face_score": ordered.score, "face_track": ordered.track_id}
        if ordered.crop is not None and ordered.affine_matrix is not None:
            arrays["face_crop"] = ordered.crop
            arrays["face_affine"] = ordered.affine_matrix
        elif not len(ordered):  # no faces: the crop columns are there, empty
            arrays["face_crop"] = np.zeros((0, 0, 0, 3), np.uint8)
            arrays["face_affine"] = np.zeros((0, 2, 3), np.float64)
        if ordered.mask is not None:
            arrays[MASK_COLUMN] = ordered.mask
        if ordered.landmarks_68 is not None:
            arrays[LANDMARKS_68_COLUMN] = ordered.landmarks_68
        if ordered.embedding is not None:
            arrays[EMBEDDING_COLUMN] = ordered.embedding
        return {name: per_row([array[bounds[r]:bounds[r + 1]] for r in range(num_frames)])
                for name, array in arrays.items()}

    @classmethod
    def from_columns(cls, batch: Mapping[str, Any], source_ids: Sequence[str] | None = None) -> FaceBatch:
        """The FaceBatch carried by a Ray Data batch's :data:`FACE_COLUMNS`."""
        rows = len(batch["face_bbox"])
        counts = [len(batch["face_bbox"][r]) for r in range(rows)]
        if sum(counts) == 0:
            return cls.empty()

        def cat(name: str, tail: tuple[int, ...], dtype: type) -> np.ndarray:
            return np.concatenate([np.asarray(batch[name][r], dtype).reshape(-1, *tail) for r in range(rows)])

        frame_index = np.repeat(np.arange(rows, dtype=np.int64), counts)
        ids = np.asarray([source_ids[int(r)] if source_ids is not None else "" for r in frame_index], object)
        crop = affine = mask = None
        if "face_crop" in batch and "face_affine" in batch:
            size = next(np.asarray(batch["face_crop"][r]).shape[1] for r in range(rows) if counts[r])
            crop = cat("face_crop", (size, size, 3), np.uint8)
            affine = cat("face_affine", (2, 3), np.float64)
        if MASK_COLUMN in batch:
            size = next(np.asarray(batch[MASK_COLUMN][r]).shape[1] for r in range(rows) if counts[r])
            mask = cat(MASK_COLUMN, (size, size), np.float32)
        points_68 = cat(LANDMARKS_68_COLUMN, (68, 2), np.float32) if LANDMARKS_68_COLUMN in batch else None
        embedding = None
        if EMBEDDING_COLUMN in batch:
            width = next(np.asarray(batch[EMBEDDING_COLUMN][r]).shape[1] for r in range(rows) if counts[r])
            embedding = cat(EMBEDDING_COLUMN, (width,), np.float32)
        return cls(frame_index, cat("face_bbox", (4,), np.float32), cat("face_landmarks", (5, 2), np.float32),
                   cat("face_score", (), np.float32), ids, cat("face_track", (), np.int64), crop, affine,
                   embedding=embedding, mask=mask, landmarks_68=points_68)


@dataclass(frozen=True)
class FrameBatch:
    """Frames, their per-frame error messages ("" for a frame that is fine) and their faces
    (``faces.frame_index`` points into ``frames``): what one step of the chain hands the next.
    The chain functions mark a failed frame in ``errors`` in place."""

    frames: list[np.ndarray]
    errors: list[str]
    faces: FaceBatch
    counters: Mapping[str, np.ndarray] = field(default_factory=dict)
    """Per-frame counts the steps wrote (``faces_detected``, ``faces_selected``, ``faces_swapped``)."""

    def __post_init__(self) -> None:
        if len(self.errors) != len(self.frames):
            raise ValueError(f"FrameBatch: expected {len(self.frames)} error entries (one per frame), "
                             f"got {len(self.errors)}")
        if len(self.faces) and int(self.faces.frame_index.max()) >= len(self.frames):
            raise ValueError(f"FrameBatch: expected face frame indices below {len(self.frames)}, "
                             f"got {int(self.faces.frame_index.max())}")

    @classmethod
    def of(cls, frames: Sequence[np.ndarray], faces: FaceBatch | None = None) -> FrameBatch:
        """Frames none of which has failed (yet), with ``faces`` (none by default)."""
        return cls(list(frames), [""] * len(frames), faces if faces is not None else FaceBatch.empty())

    def counted(self, **counts: np.ndarray) -> FrameBatch:
        """This batch with more per-frame counters."""
        return replace(self, counters={**self.counters, **counts})

    def counter(self, name: str) -> np.ndarray:
        """A per-frame counter (zeros when no step wrote it)."""
        value = self.counters.get(name)
        return np.asarray(value, np.int32) if value is not None else np.zeros(len(self.frames), np.int32)

    @property
    def first_error(self) -> str:
        """The first failed frame's message ("" when none failed): one-frame callers raise it."""
        return next((e for e in self.errors if e), "")


def per_row(values: Sequence[Any]) -> np.ndarray:
    """A 1-D object array holding one value (often an ndarray) per row."""
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column
