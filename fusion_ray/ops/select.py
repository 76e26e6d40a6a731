"""Face selection: which detected faces get swapped (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fusion_ray.types import Embedding, Face


def order_faces(faces: Sequence[Face]) -> list[Face]:
    """Faces in a stable reading order: left to right by box, then top to bottom."""
    return sorted(faces, key=lambda f: (float(f.bbox_xyxy[0]), float(f.bbox_xyxy[1])))


def cosine_distance(a: Embedding, b: Embedding) -> float:
    """1 - cosine similarity of two embeddings (0 for the same direction, up to 2)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 1.0
    return 1.0 - float(np.dot(a, b)) / (na * nb)


def select_faces(faces: Sequence[Face], mode: str, *, index: int = 0,
                 reference: Embedding | None = None, max_distance: float = 0.6) -> list[Face]:
    """Choose faces to swap.

    ``all``: every face (reading order); ``largest``: the one with the biggest box;
    ``index``: the ``index``-th face in reading order (none if out of range);
    ``reference``: faces whose embedding is within ``max_distance`` (cosine distance) of
    ``reference``. No face is an empty list, not an error.
    """
    ordered = order_faces(faces)
    if not ordered:
        return []
    if mode == "all":
        return ordered
    if mode == "largest":
        return [max(ordered, key=lambda f: f.area)]
    if mode == "index":
        if index < 0:
            raise ValueError(f"index: expected a non-negative face index, got {index}")
        return [ordered[index]] if index < len(ordered) else []
    if mode == "reference":
        if reference is None:
            raise ValueError("reference selection needs a reference embedding")
        chosen = []
        for face in ordered:
            if face.embedding is None:
                raise ValueError("reference selection needs the embedding of every target face")
            if cosine_distance(face.embedding, reference) <= max_distance:
                chosen.append(face)
        return chosen
    raise ValueError(f"unknown selection mode {mode!r}; expected all, largest, index or reference")
