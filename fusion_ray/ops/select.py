"""Face selection: which detected faces get swapped (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fusion_ray.types import FACE_SELECTOR_ORDERS, SELECT_MODES, Embedding, Face


def order_faces(faces: Sequence[Face]) -> list[Face]:
    """Faces in a stable reading order: left to right by box, then top to bottom."""
    return [faces[i] for i in reading_order(np.asarray([f.bbox_xyxy for f in faces], np.float32))]


def cosine_distance(a: Embedding, b: Embedding) -> float:
    """1 - cosine similarity of two embeddings (0 for the same direction, up to 2)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 1.0
    return 1.0 - float(np.dot(a, b)) / (na * nb)


def reading_order(bbox_xyxy: np.ndarray) -> list[int]:
    """Positions of the boxes in reading order: left to right, then top to bottom (stable)."""
    boxes = np.asarray(bbox_xyxy).reshape(-1, 4)
    return sorted(range(len(boxes)), key=lambda i: (float(boxes[i, 0]), float(boxes[i, 1])))


def sorted_positions(bbox_xyxy: np.ndarray, order: str | None, scores: np.ndarray | None = None) -> list[int]:
    """Positions of the boxes in FaceFusion's ``--face-selector-order`` ``order`` (None: reading
    order). ``left-right`` / ``right-left`` sort by the box's left edge, ``top-bottom`` /
    ``bottom-top`` by its top edge, ``small-large`` / ``large-small`` by its area and
    ``best-worst`` / ``worst-best`` by the detector's ``scores`` (one per box). Ties keep reading order."""
    reading = reading_order(bbox_xyxy)
    if order is None:
        return reading
    if order not in FACE_SELECTOR_ORDERS:
        raise ValueError(f"unknown face selector order {order!r}; expected one of {', '.join(FACE_SELECTOR_ORDERS)}")
    boxes = np.asarray(bbox_xyxy, np.float64).reshape(-1, 4)
    if order in ("best-worst", "worst-best"):
        if scores is None:
            raise ValueError(f"face selector order {order}: needs the detector's score of every face")
        key = np.asarray(scores, np.float64).reshape(-1)
    elif order in ("left-right", "right-left"):
        key = boxes[:, 0]
    elif order in ("top-bottom", "bottom-top"):
        key = boxes[:, 1]
    else:
        key = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    descending = order in ("right-left", "bottom-top", "large-small", "best-worst")
    return sorted(reading, key=lambda i: -float(key[i]) if descending else float(key[i]))


def select_indices(bbox_xyxy: np.ndarray, mode: str, *, index: int = 0,
                   embeddings: Sequence[Embedding | None] | None = None, reference: Embedding | None = None,
                   max_distance: float = 0.6, order: str | None = None, scores: np.ndarray | None = None
                   ) -> list[int]:
    """Which faces to swap, as positions into ``bbox_xyxy`` (n, 4), in ``order``: the one
    decision every path makes (per frame: :func:`select_faces`; per track:
    :class:`fusion_ray.core.tracking.select.TrackSelection` calls it on a frame's tracked faces).

    ``all``: every face; ``largest``: the one with the biggest box (the first in reading order on
    a tie); ``index``: the ``index``-th face in reading order (none if out of range);
    ``reference``: the faces whose embedding (``embeddings``, one per box) is within
    ``max_distance`` (cosine distance) of ``reference``. No face is an empty list, not an error.
    ``order`` (FaceFusion's ``--face-selector-order``, :func:`sorted_positions`; None: reading
    order) is the order ``all`` and ``reference`` list the faces in and ``index`` counts in;
    ``largest`` is the biggest box whatever the order.
    """
    positions = sorted_positions(bbox_xyxy, order, scores) if len(np.asarray(bbox_xyxy).reshape(-1, 4)) else []
    if not positions:
        return []
    if mode not in SELECT_MODES:
        raise ValueError(f"unknown selection mode {mode!r}; expected one of {', '.join(SELECT_MODES)}")
    if mode == "index" and index < 0:
        raise ValueError(f"index: expected a non-negative face index, got {index}")
    if mode == "reference" and reference is None:
        raise ValueError("reference selection needs a reference embedding")
    if mode == "all":
        return positions
    boxes = np.asarray(bbox_xyxy).reshape(-1, 4)
    if mode == "largest":
        reading = reading_order(boxes)
        areas = [float((boxes[i, 2] - boxes[i, 0]) * (boxes[i, 3] - boxes[i, 1])) for i in reading]
        return [reading[int(np.argmax(areas))]]
    if mode == "index":
        return [positions[index]] if index < len(positions) else []
    return [i for i in positions if _near(_embedding_of(embeddings, i), reference, max_distance)]


def _embedding_of(embeddings: Sequence[Embedding | None] | None, i: int) -> Embedding:
    embedding = embeddings[i] if embeddings is not None else None
    if embedding is None:
        raise ValueError("reference selection needs the embedding of every target face")
    return embedding


def _near(embedding: Embedding, reference: Embedding | None, max_distance: float) -> bool:
    assert reference is not None
    return cosine_distance(embedding, reference) <= max_distance


def select_faces(faces: Sequence[Face], mode: str, *, index: int = 0,
                 reference: Embedding | None = None, max_distance: float = 0.6,
                 order: str | None = None) -> list[Face]:
    """The faces to swap of one frame (see :func:`select_indices`)."""
    boxes = np.asarray([f.bbox_xyxy for f in faces], np.float32).reshape(-1, 4)
    scores = np.asarray([f.score for f in faces], np.float32)
    chosen = select_indices(boxes, mode, index=index, embeddings=[f.embedding for f in faces],
                            reference=reference, max_distance=max_distance, order=order, scores=scores)
    return [faces[i] for i in chosen]
