"""``--face-swapper-weight``: FaceFusion 3.8.1's balance of the source identity against the target's.

Read for facts (``face_swapper/core.py``, ``balance_source_embedding``): the weight in [0, 1]
(default 0.5) maps linearly to ``w`` in [0.35, -0.35]; the source embedding becomes
``source * (1 - w) + target * w``. At 0.5 the source is unchanged; towards 0 the target's own
identity shows through (up to 35%); towards 1 the result is pushed away from the target. The
target embedding is L2-normalised first for hififace, hyperswap, inswapper and simswap, not for
ghost; blendswap and uniface take an image, not an embedding, and are not balanced.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

DEFAULT_SWAPPER_WEIGHT = 0.5


def weight_to_mix(weight: float) -> float:
    """The target's share ``w``: 0.35 at weight 0, 0 at 0.5, -0.35 at 1."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"face swapper weight: expected a value in [0, 1], got {weight}")
    return float(np.interp(weight, [0.0, 1.0], [0.35, -0.35]))


def balance_embedding(source: npt.ArrayLike, target: npt.ArrayLike, weight: float = DEFAULT_SWAPPER_WEIGHT, *,
                      normalise_target: bool = True) -> npt.NDArray[np.float32]:
    """(N, D) or (D,) source rows balanced against the target rows of the same shape."""
    mix = np.float32(weight_to_mix(weight))
    src = np.asarray(source, dtype=np.float32)
    tgt = np.asarray(target, dtype=np.float32)
    if src.shape != tgt.shape:
        raise ValueError(f"expected source and target embeddings of one shape, got {src.shape} and {tgt.shape}")
    if normalise_target:
        tgt = tgt / np.maximum(np.linalg.norm(tgt, axis=-1, keepdims=True), 1e-12)
    return (src * (1 - mix) + tgt * mix).astype(np.float32)
