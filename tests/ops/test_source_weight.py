"""--face-swapper-weight: FaceFusion's balance of the source embedding against the target's."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_ray.ops.source_weight import balance_embedding, weight_to_mix


@pytest.mark.parametrize(("weight", "mix"), [(0.0, 0.35), (0.25, 0.175), (0.5, 0.0), (1.0, -0.35)])
def test_weight_maps_to_the_targets_share(weight: float, mix: float) -> None:
    assert weight_to_mix(weight) == pytest.approx(mix)


def test_default_weight_leaves_the_source_unchanged() -> None:
    source = np.array([[0.6, 0.8, 0.0]], np.float32)
    target = np.array([[0.0, 3.0, 4.0]], np.float32)
    np.testing.assert_allclose(balance_embedding(source, target), source)


def test_weight_0_mixes_in_35_percent_of_the_normalised_target() -> None:
    source = np.array([1.0, 0.0, 0.0], np.float32)
    target = np.array([0.0, 3.0, 4.0], np.float32)
    np.testing.assert_allclose(balance_embedding(source, target, 0.0), [0.65, 0.35 * 0.6, 0.35 * 0.8], rtol=1e-6)
    np.testing.assert_allclose(balance_embedding(source, target, 0.0, normalise_target=False),
                               [0.65, 0.35 * 3.0, 0.35 * 4.0], rtol=1e-6)  # ghost: the raw target
    np.testing.assert_allclose(balance_embedding(source, target, 1.0), [1.35, -0.35 * 0.6, -0.35 * 0.8], rtol=1e-6)


def test_rejects_bad_weights_and_shapes() -> None:
    with pytest.raises(ValueError, match="weight"):
        weight_to_mix(1.5)
    with pytest.raises(ValueError, match="one shape"):
        balance_embedding(np.zeros(3), np.zeros(4))
