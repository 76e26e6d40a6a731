"""Pure pieces of frame-to-frame face matching: box IoU, landmark distance, optimal assignment."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def iou_matrix(boxes_a: npt.ArrayLike, boxes_b: npt.ArrayLike) -> FloatArray:
    """(n, m) intersection over union of xyxy boxes (n, 4) and (m, 4); 0 for empty boxes."""
    a = np.asarray(boxes_a, np.float64).reshape(-1, 4)
    b = np.asarray(boxes_b, np.float64).reshape(-1, 4)
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def eye_distance(landmarks: npt.ArrayLike) -> FloatArray:
    """(n,) distance between the two eye landmarks of (n, 5, 2) landmarks (at least 1 pixel)."""
    lm = np.asarray(landmarks, np.float64).reshape(-1, 5, 2)
    return np.maximum(np.linalg.norm(lm[:, 1] - lm[:, 0], axis=1), 1.0)


def landmark_distance_matrix(landmarks_a: npt.ArrayLike, landmarks_b: npt.ArrayLike) -> FloatArray:
    """(n, m) mean distance of the 5 landmarks of a's faces to b's, in eye distances of a's faces."""
    a = np.asarray(landmarks_a, np.float64).reshape(-1, 5, 2)
    b = np.asarray(landmarks_b, np.float64).reshape(-1, 5, 2)
    dist = np.linalg.norm(a[:, None] - b[None, :], axis=-1).mean(axis=-1)
    return dist / eye_distance(a)[:, None]


def assign(cost: npt.ArrayLike) -> list[tuple[int, int]]:
    """Minimum-cost one-to-one assignment of rows to columns (Kuhn-Munkres, O(n^2 m)).

    ``cost`` is (n, m); ``inf`` marks a forbidden pair. As many pairs as possible are made
    without forbidden ones, then the total cost is minimal. Returns (row, col) pairs sorted by row.
    """
    c = np.asarray(cost, np.float64)
    if c.ndim != 2:
        raise ValueError(f"expected a 2-D cost matrix, got shape {c.shape}")
    if np.isnan(c).any() or np.isneginf(c).any():
        raise ValueError("expected costs that are finite or +inf, got NaN or -inf")
    if c.size == 0:
        return []
    transposed = c.shape[0] > c.shape[1]
    work = c.T if transposed else c
    finite = work[np.isfinite(work)]
    span = float(finite.max() - min(float(finite.min()), 0.0)) + 1.0 if finite.size else 1.0
    big = span * (work.shape[0] + 1)  # one forbidden pair costs more than any set of allowed ones
    pairs = _hungarian(np.where(np.isfinite(work), work, big))
    kept = [(r, col) for r, col in pairs if np.isfinite(work[r, col])]
    if transposed:
        kept = [(col, r) for r, col in kept]
    return sorted(kept)


def _hungarian(c: FloatArray) -> list[tuple[int, int]]:
    """Rows (n) to columns (m >= n), each row assigned, with potentials (the e-maxx formulation)."""
    n, m = c.shape
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    owner = np.zeros(m + 1, np.int64)  # owner[j]: row (1-based) holding column j; 0 = free
    way = np.zeros(m + 1, np.int64)
    for i in range(1, n + 1):
        owner[0] = i
        j0 = 0
        minv = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, bool)
        while True:
            used[j0] = True
            i0 = owner[j0]
            free = ~used[1:]
            reduced = c[i0 - 1] - u[i0] - v[1:]
            better = free & (reduced < minv[1:])
            minv[1:][better] = reduced[better]
            way[1:][better] = j0
            candidates = np.where(free, minv[1:], np.inf)
            j1 = int(np.argmin(candidates)) + 1
            delta = candidates[j1 - 1]
            u[owner[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = int(way[j0])
            owner[j0] = owner[j1]
            j0 = j1
    return sorted((int(owner[j]) - 1, j - 1) for j in range(1, m + 1) if owner[j] != 0)
