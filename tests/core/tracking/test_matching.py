"""Box IoU, landmark distance and the optimal assignment."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fusion_ray.core.tracking.matching import (
    assign,
    eye_distance,
    iou_matrix,
    landmark_distance_matrix,
)

INF = math.inf


@pytest.mark.parametrize("a,b,expected", [
    ([[0, 0, 10, 10]], [[0, 0, 10, 10]], [[1.0]]),
    ([[0, 0, 10, 10]], [[5, 0, 15, 10]], [[50 / 150]]),
    ([[0, 0, 10, 10]], [[20, 20, 30, 30], [0, 0, 5, 5]], [[0.0, 0.25]]),
    ([[0, 0, 0, 0]], [[0, 0, 0, 0]], [[0.0]]),          # empty boxes
    (np.zeros((0, 4)), [[0, 0, 1, 1]], np.zeros((0, 1))),
])
def test_iou_matrix(a, b, expected):
    assert np.allclose(iou_matrix(a, b), expected)


def test_landmark_distance_is_in_eye_distances_of_the_first_set():
    face = np.asarray([[0, 0], [10, 0], [5, 5], [2, 8], [8, 8]], np.float64)
    assert eye_distance(face[None]).tolist() == [10.0]
    assert np.allclose(landmark_distance_matrix(face[None], (face + [3, 4])[None]), [[0.5]])  # 5 px / 10 px
    big = face * 4
    assert np.allclose(landmark_distance_matrix(big[None], (big + [3, 4])[None]), [[0.125]])


@pytest.mark.parametrize("cost,expected", [
    ([[1, 2], [2, 1]], [(0, 0), (1, 1)]),
    ([[1, 0], [0, 1]], [(0, 1), (1, 0)]),
    # greedy best-first would take (0, 0) at 0.1 and be left with (1, 1) at 10
    ([[0.1, 0.2], [0.3, 10]], [(0, 1), (1, 0)]),
    ([[1, 2, 0.5]], [(0, 2)]),                          # more columns than rows
    ([[1], [0.5], [2]], [(1, 0)]),                      # more rows than columns
    ([[INF, 1], [INF, 2]], [(0, 1)]),                   # a forbidden column stays unmatched
    ([[INF, INF]], []),
    # as many allowed pairs as possible first: 2 pairs at 10 + 10 beat 1 pair at 0
    ([[0, 10], [10, INF]], [(0, 1), (1, 0)]),
    (np.zeros((0, 3)), []),
])
def test_assign(cost, expected):
    assert assign(cost) == expected


def test_assign_matches_brute_force_on_random_matrices():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, m = (int(v) for v in rng.integers(1, 6, 2))
        cost = rng.random((n, m))
        cost[rng.random((n, m)) < 0.3] = INF
        got = assign(cost)
        best = None
        for cols in itertools.permutations(range(m), min(n, m)) if n <= m else itertools.permutations(range(n), m):
            pairs = list(zip(range(n), cols, strict=True)) if n <= m else list(zip(cols, range(m), strict=True))
            valid = [(r, c) for r, c in pairs if math.isfinite(cost[r, c])]
            key = (-len(valid), sum(cost[r, c] for r, c in valid))
            best = key if best is None or key < best else best
        assert best is not None
        assert -len(got) == best[0] and sum(cost[r, c] for r, c in got) == pytest.approx(best[1])
        assert len({r for r, _ in got}) == len(got) == len({c for _, c in got})


def test_assign_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        assign([[math.nan]])
