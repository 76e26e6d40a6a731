"""One Euro filter and centred window on synthetic point sequences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusion_ray.core.tracking.smoothing import (
    OneEuroFilter,
    centred_window,
    one_euro_sequence,
    smoothing_alpha,
)


@pytest.mark.parametrize("cutoff,period,expected", [
    (1 / (2 * math.pi), 1.0, 0.5),          # tau = 1 s = period
    (1 / (2 * math.pi), 3.0, 0.75),
    (100.0, 1 / 30, 1 / (1 + 30 / (200 * math.pi))),
])
def test_smoothing_alpha(cutoff, period, expected):
    assert smoothing_alpha(cutoff, period) == pytest.approx(expected)


def static_noisy(n: int = 200, sigma: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = np.tile(np.asarray([[100.0, 50.0], [140.0, 50.0]]), (n, 1, 1))
    return truth, truth + rng.normal(0, sigma, truth.shape)


@pytest.mark.parametrize("beta", [0.0, 10.0])
def test_one_euro_removes_jitter_at_rest(beta):
    truth, noisy = static_noisy()
    out = one_euro_sequence(noisy, np.arange(len(noisy)), 30.0, min_cutoff=1.0, beta=beta, d_cutoff=1.0,
                            scales=np.full(len(noisy), 40.0))
    raw = np.std(noisy[30:] - truth[30:])
    assert np.std(out[30:] - truth[30:]) < 0.6 * raw
    jitter_raw = np.abs(np.diff(noisy[30:], 2, axis=0)).mean()
    assert np.abs(np.diff(out[30:], 2, axis=0)).mean() < 0.3 * jitter_raw


def test_one_euro_lag_is_bounded_on_a_moving_point_and_beta_is_what_bounds_it():
    speed = 8.0  # px per frame, 0.2 eye distances per frame at 30 fps
    frames = np.arange(90)
    truth = np.stack([np.asarray([[10.0 + speed * f, 20.0]]) for f in frames])
    lags = {}
    for beta in (0.0, 10.0):
        out = one_euro_sequence(truth, frames, 30.0, min_cutoff=1.0, beta=beta, d_cutoff=1.0,
                                scales=np.full(len(frames), 40.0))
        lags[beta] = float(np.abs(out[60:, 0, 0] - truth[60:, 0, 0]).max())
    assert lags[10.0] < 1.5                 # under 4% of the eye distance
    assert lags[0.0] > 5 * lags[10.0]       # a plain low-pass at the same cutoff lags far more


def test_one_euro_handles_time_gaps_and_rejects_time_going_back():
    flt = OneEuroFilter(1.0, 0.0, 1.0)
    assert np.allclose(flt.filter([[0.0, 0.0]], 0.0), 0.0)
    near = flt.filter([[10.0, 0.0]], 1 / 30)
    far = OneEuroFilter(1.0, 0.0, 1.0)
    far.filter([[0.0, 0.0]], 0.0)
    after_gap = far.filter([[10.0, 0.0]], 10 / 30)
    assert after_gap[0, 0] > near[0, 0]     # a longer period trusts the new sample more
    with pytest.raises(ValueError, match="increasing times"):
        flt.filter([[0.0, 0.0]], 0.0)
    with pytest.raises(ValueError, match="shape"):
        flt.filter([[0.0, 0.0, 0.0]], 1.0)


@pytest.mark.parametrize("order", [1, 2])
def test_centred_window_keeps_steady_motion_exactly_even_at_the_ends(order):
    frames = np.arange(20)
    truth = np.stack([np.asarray([[3.0 * f, 100.0 - 2.0 * f]]) for f in frames])
    assert np.allclose(centred_window(truth, frames, radius=3, order=order), truth)


def test_centred_window_order_0_lags_at_the_ends():
    frames = np.arange(20)
    truth = np.stack([np.asarray([[3.0 * f, 0.0]]) for f in frames])
    out = centred_window(truth, frames, radius=3, order=0)
    assert np.allclose(out[5:15], truth[5:15])        # a centred average is unbiased inside
    assert out[0, 0, 0] == pytest.approx(4.5) and out[-1, 0, 0] == pytest.approx(52.5)


def test_centred_window_reduces_noise_and_respects_gaps():
    truth, noisy = static_noisy()
    out = centred_window(noisy, np.arange(len(noisy)), radius=2, order=1)
    assert np.std(out - truth) < 0.6 * np.std(noisy - truth)   # about 1/sqrt(5)
    # Samples more than `radius` frames away (across a gap) are not averaged in.
    frames = np.asarray([0, 1, 2, 10, 11, 12])
    values = np.asarray([0.0, 0.0, 0.0, 9.0, 9.0, 9.0])[:, None, None] * np.ones((1, 1, 2))
    assert np.allclose(centred_window(values, frames, radius=3, order=1), values)


def test_sequence_checks_lengths():
    with pytest.raises(ValueError, match="one frame index per sample"):
        centred_window(np.zeros((3, 1, 2)), [0, 1], radius=1)
    with pytest.raises(ValueError, match="as many frames and scales"):
        one_euro_sequence(np.zeros((3, 1, 2)), [0, 1], 30.0, min_cutoff=1.0, beta=0.0, d_cutoff=1.0)
