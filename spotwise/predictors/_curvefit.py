"""EarlyCurve's per-stage fit (:func:`fit_stage`) and the band of a stage too short to fit
(:func:`short_half_band`); used by :func:`spotwise.predictors.earlycurve.fit_curve`."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

Z95 = 1.96
ASYMPTOTE_ALLOWANCE = 0.25  # value ranges the asymptote may lie beyond the best observed value
N_PARAMS = 4  # a0, a1, a2, a3
MIN_FIT_POINTS = N_PARAMS + 1  # fewer points than this: the stage is not fitted (last value)


@dataclass
class StageFit:
    p: np.ndarray
    delta: float  # fitted change from the last observed x to xf (oriented, normalised units)
    var_delta: float  # its delta-method variance, plus the spread of the good starts
    sigma: float  # residual noise
    step_var: float  # variance of the step-to-step change of the residuals
    at_bound: bool = False  # the asymptote a3 sits on its bound (the curve may improve further)


def model(p: np.ndarray, x: np.ndarray) -> np.ndarray:
    import numpy as np

    return p[3] + 1.0 / np.maximum(p[0] * x * x + p[1] * x + p[2], 1e-12)


def _grad(p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(len(x), 4) derivatives of :func:`model` with respect to (a0, a1, a2, a3)."""
    import numpy as np

    q2 = np.maximum(p[0] * x * x + p[1] * x + p[2], 1e-12) ** 2
    return np.stack([-x * x / q2, -x / q2, -1.0 / q2, np.ones_like(x)], axis=1)


def fit_stage(x: np.ndarray, u: np.ndarray, xf: float) -> StageFit:
    """Fit u(x) = a3 + 1/(a0x² + a1x + a2) (falling), bounded and robust, from 3 starts.

    Needs at least :data:`MIN_FIT_POINTS` points (MINPACK refuses fewer points than parameters,
    and with exactly as many the residual noise is unknown). Bounds by a smooth change of
    variables (softplus for a0, a1, a2 − 1e-3; a logistic map of a3 into
    [min u − allowance, max u]), solved with MINPACK's Levenberg-Marquardt; robustness by two
    Huber reweighting passes. About a millisecond per start.
    """
    import numpy as np
    from scipy.optimize import leastsq
    from scipy.special import expit

    if len(u) < MIN_FIT_POINTS:
        raise ValueError(f"fit_stage needs {MIN_FIT_POINTS} points, got {len(u)}")
    umin, umax = float(u.min()), float(u.max())
    lo3, hi3 = umin - ASYMPTOTE_ALLOWANCE, umax

    def to_p(b: np.ndarray) -> np.ndarray:
        sp = np.logaddexp(0.0, b[:3])
        return np.array([sp[0], sp[1], sp[2] + 1e-3, lo3 + (hi3 - lo3) * expit(b[3])])

    def from_p(p: np.ndarray) -> np.ndarray:
        inv = np.log(np.expm1(np.maximum(np.array([p[0], p[1], p[2] - 1e-3]), 1e-9)))
        f = np.clip((p[3] - lo3) / (hi3 - lo3), 1e-6, 1 - 1e-6)
        return np.append(inv, np.log(f / (1 - f)))

    noise = max(float(np.std(np.diff(u))) / np.sqrt(2), 1e-3)
    fits = []
    for a3, a1 in ((umin - 0.05, 1.0), (umin - 0.3 * ASYMPTOTE_ALLOWANCE, 3.0), (lo3 + 1e-3, 10.0)):
        excess = max(float(u[0]) - a3, 1e-2)
        b = from_p(np.array([1e-3, a1, max(1.0 / excess, 2e-3), min(a3, hi3 - 1e-6)]))
        w = np.ones_like(u)
        for _ in range(3):  # 1 plain + 2 Huber-reweighted passes
            with warnings.catch_warnings():  # MINPACK warns on slow or exact convergence
                warnings.simplefilter("ignore")
                b = leastsq(
                    lambda bb, w=w: (model(to_p(bb), x) - u) * w,
                    b,
                    maxfev=300,
                    xtol=1e-6,
                    ftol=1e-6,
                    gtol=1e-10,
                )[0]
            res = np.abs(model(to_p(b), x) - u)
            w = np.sqrt(np.minimum(1.0, 1.5 * noise / np.maximum(res, 1e-12)))
        cost = float(
            np.sum(np.where(res <= 1.5 * noise, 0.5 * res**2, 1.5 * noise * (res - 0.75 * noise)))
        )
        fits.append((cost, to_p(b)))
    best_cost, p = min(fits, key=lambda t: t[0])
    res = model(p, x) - u
    sigma = float(np.sqrt(np.sum(res**2) / (len(u) - N_PARAMS)))
    ends = np.array([x[-1], xf])
    delta = float(np.diff(model(p, ends))[0])
    g = np.diff(_grad(p, ends), axis=0)[0]
    jac = _grad(p, x)
    cov = sigma**2 * np.linalg.pinv(jac.T @ jac)
    good = [float(np.diff(model(q, ends))[0]) for c, q in fits if c <= 1.1 * best_cost + 1e-12]
    spread = (max(good) - min(good)) / 2 if good else 0.0
    step_var = float(np.var(np.diff(res)))
    at_bound = bool(p[3] <= lo3 + 1e-3 * (hi3 - lo3))
    return StageFit(p, delta, float(max(g @ cov @ g, 0.0)) + spread**2, sigma, step_var, at_bound)


def short_half_band(k: np.ndarray, v: np.ndarray, span: float, total: float) -> float:
    """Half-width of the 95 % band around the last value of a stage too short to fit.

    The step-to-step noise and the stage's average slope carried over the steps left; at least
    the whole curve's observed range ``span`` (the size of the values when nothing varied yet,
    1 when they are 0) and at most 10 times that floor, as for a fitted curve.
    """
    import numpy as np

    with np.errstate(all="ignore"):  # values near ±1e308 overflow: the floor is used then
        noise = float(np.std(np.diff(v))) / np.sqrt(2) if len(v) > 2 else 0.0
        width = float(k[-1] - k[0])
        slope = float(v[-1] - v[0]) / width if len(v) > 1 and width > 0 else 0.0
        drift = abs(slope) * max(total - float(k[-1]), 0.0)
        half = Z95 * float(np.hypot(noise, drift))
    floor = span if np.isfinite(span) and span > 0 else (abs(float(v[-1])) or 1.0)
    return float(min(max(half, floor), 10.0 * floor)) if np.isfinite(half) else floor
