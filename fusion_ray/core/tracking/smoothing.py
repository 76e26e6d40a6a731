"""Landmark smoothing along a track: a One Euro filter (online) and a centred window (offline).

The One Euro filter (Casiez, Roussel and Vogel, "1 Euro Filter: A Simple Speed-based Low-pass
Filter for Noisy Input in Interactive Systems", CHI 2012) is an exponential smoother whose
cutoff frequency rises with the signal's speed: at rest it removes jitter, in fast motion it
follows with little lag. With a sampling period ``Te`` and a cutoff ``fc``::

    tau = 1 / (2 pi fc),   alpha = 1 / (1 + tau / Te)
    dX_i  = (X_i - X^_{i-1}) / Te           speed from the raw sample and the last estimate
    dX^_i = alpha(fc_d) dX_i + (1 - alpha(fc_d)) dX^_{i-1}
    fc_i  = fc_min + beta |dX^_i|
    X^_i  = alpha(fc_i) X_i + (1 - alpha(fc_i)) X^_{i-1}

Here a sample is a set of 2-D points (a face's 5 landmarks and its box corners). They share
one cutoff, from the mean speed of the points divided by a scale (the face's eye distance),
so that ``beta`` does not depend on the face's size in pixels and the face keeps its shape.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def smoothing_alpha(cutoff_hz: float, period_s: float) -> float:
    """Weight of a new sample in an exponential smoother with this cutoff and sampling period."""
    if cutoff_hz <= 0 or period_s <= 0:
        raise ValueError(f"expected a positive cutoff and period, got {cutoff_hz} Hz, {period_s} s")
    tau = 1.0 / (2.0 * math.pi * cutoff_hz)
    return 1.0 / (1.0 + tau / period_s)


class OneEuroFilter:
    """One Euro filter over arrays of 2-D points (shape (..., 2)); one instance per track.

    ``filter(points, t_s, scale)`` returns the estimate at time ``t_s`` seconds. Times must
    increase; a time gap (missed frames) is handled by the longer sampling period.
    """

    def __init__(self, min_cutoff: float, beta: float, d_cutoff: float) -> None:
        if min_cutoff <= 0 or d_cutoff <= 0 or beta < 0:
            raise ValueError(f"expected min_cutoff > 0, d_cutoff > 0, beta >= 0, got {min_cutoff}, {d_cutoff}, {beta}")
        self.min_cutoff = min_cutoff
        self.beta = beta
        self.d_cutoff = d_cutoff
        self._x: FloatArray | None = None
        self._dx: FloatArray | None = None
        self._t = 0.0

    def filter(self, points: npt.ArrayLike, t_s: float, scale: float = 1.0) -> FloatArray:
        x = np.asarray(points, np.float64)
        if x.ndim < 1 or x.shape[-1] != 2:
            raise ValueError(f"expected points of shape (..., 2), got {x.shape}")
        if self._x is None or self._dx is None:
            self._x, self._dx, self._t = x.copy(), np.zeros_like(x), t_s
            return x.copy()
        if x.shape != self._x.shape:
            raise ValueError(f"expected points of shape {self._x.shape}, got {x.shape}")
        period = t_s - self._t
        if period <= 0:
            raise ValueError(f"expected increasing times, got {t_s} after {self._t}")
        dx = (x - self._x) / period
        a_d = smoothing_alpha(self.d_cutoff, period)
        self._dx = a_d * dx + (1.0 - a_d) * self._dx
        speed = float(np.mean(np.linalg.norm(self._dx.reshape(-1, 2), axis=1))) / max(scale, 1e-9)
        a = smoothing_alpha(self.min_cutoff + self.beta * speed, period)
        self._x = a * x + (1.0 - a) * self._x
        self._t = t_s
        return self._x.copy()


def one_euro_sequence(points: npt.ArrayLike, frames: npt.ArrayLike, fps: float, *, min_cutoff: float,
                      beta: float, d_cutoff: float, scales: npt.ArrayLike | None = None) -> FloatArray:
    """The One Euro filter run forward over a track's samples ((T, ..., 2) at frame indices ``frames``)."""
    x = np.asarray(points, np.float64)
    f = np.asarray(frames, np.float64)
    s = np.ones(len(x)) if scales is None else np.asarray(scales, np.float64)
    if len(f) != len(x) or len(s) != len(x):
        raise ValueError(f"expected as many frames and scales as samples, got {len(f)}, {len(s)} for {len(x)}")
    flt = OneEuroFilter(min_cutoff, beta, d_cutoff)
    out = np.empty_like(x)
    for i in range(len(x)):
        out[i] = flt.filter(x[i], f[i] / fps, float(s[i]))
    return out


def centred_window(points: npt.ArrayLike, frames: npt.ArrayLike, radius: int, order: int = 1) -> FloatArray:
    """Smooth a track's samples ((T, ...) at frame indices ``frames``) with a centred window.

    Each sample is replaced by the value at its own frame of a least-squares polynomial of
    degree ``order`` fitted to the samples within ``radius`` frames of it (fewer near the ends
    and around gaps; the degree drops when there are too few samples). Degree 1 is a moving
    average inside a contiguous run and stays unbiased for steady motion at its ends.
    """
    x = np.asarray(points, np.float64)
    f = np.asarray(frames, np.int64)
    if len(f) != len(x):
        raise ValueError(f"expected one frame index per sample, got {len(f)} for {len(x)}")
    if radius < 0 or not 0 <= order <= 3:
        raise ValueError(f"expected radius >= 0 and order 0..3, got {radius}, {order}")
    flat = x.reshape(len(x), -1)
    out = np.empty_like(flat)
    for i in range(len(x)):
        near = np.flatnonzero(np.abs(f - f[i]) <= radius)
        offsets = (f[near] - f[i]).astype(np.float64)
        degree = min(order, len(near) - 1)
        design = np.vander(offsets, degree + 1, increasing=True)
        coef, *_ = np.linalg.lstsq(design, flat[near], rcond=None)
        out[i] = coef[0]
    return out.reshape(x.shape)
