"""EarlyCurve (SpotTune, ICDCS 2020, eq. 2.3): predict a learning curve's final value early.

A curve is piecewise over *stages* ``[l_i, r_i)``; within a stage, with ``k`` counted from the
stage start (1, 2, …)::

    L̂(k) = 1 / (a0·k² + a1·k + a2) + a3

Stage boundaries come from learning-rate changes when ``lr`` is given (a step of ×2 or more
after a flat stretch: step decay; a smooth schedule such as cosine annealing is one stage), else
they are detected as level shifts well above the curve's step-to-step noise.

Fitting, per stage, in normalised units (steps / last step, values / value range, oriented so
the curve falls): bounded robust least squares (``soft_l1``) from several starts;
``a0, a1 ≥ 0``, ``a2 > 0`` (a monotone curve), and the asymptote ``a3`` bounded to at most one
value range beyond the best observed value. Direction: ``"min"`` (loss), ``"max"`` (accuracy), or
``None`` = the trend of the observed points. The uncertainty band of the final value combines
the delta-method parameter variance, the residual noise and the spread of the good starts.

Baselines under the same interface (:func:`get_curve_predictor`): ``last-value``,
``mean-last-k`` and ``power-law`` (``a + b·k^(−c)``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from spotwise.errors import SpecError, did_you_mean

if TYPE_CHECKING:
    import numpy as np

Z95 = 1.96
ASYMPTOTE_ALLOWANCE = 0.25  # value ranges the asymptote may lie beyond the best observed value
MIN_STAGE_POINTS = 4
RANDOM_WALK = 0.5


@dataclass(frozen=True)
class Stage:
    """One fitted stage: value(k) = offset + sign·scale·(a3 + 1/(a0·x² + a1·x + a2)),
    x = (k − start + 1) / x_scale. ``kind`` is ``"curve"`` or ``"const"`` (too few points)."""

    start: float
    stop: float  # first step of the next stage (inf for the last)
    a: tuple[float, float, float, float]
    sign: float
    offset: float
    scale: float
    x_scale: float
    kind: str = "curve"

    def __call__(self, k: np.ndarray) -> np.ndarray:
        import numpy as np

        x = (np.asarray(k, dtype=float) - self.start + 1.0) / self.x_scale
        a0, a1, a2, a3 = self.a
        q = np.maximum(a0 * x * x + a1 * x + a2, 1e-12)
        return self.offset + self.sign * self.scale * (a3 + 1.0 / q)

    def spottune_params(self) -> dict[str, float]:
        """In original units: value = 1/(A0·k² + A1·k + A2) + A3, k counted from 1 in the stage."""
        a0, a1, a2, a3 = self.a
        g = self.sign * self.scale
        return {
            "A0": a0 / (self.x_scale**2 * g),
            "A1": a1 / (self.x_scale * g),
            "A2": a2 / g,
            "A3": self.offset + g * a3,
        }


@dataclass
class CurveFit:
    """A fitted curve: ``predict(k)``, the predicted ``final`` at ``total_steps``, its ``band``."""

    stages: list[Stage]
    final: float
    band: tuple[float, float]
    total_steps: float
    direction: str  # "min" or "max": which way the fitted curve improves
    residual_std: float
    fit_ms: float = 0.0
    boundaries: list[float] = field(default_factory=list)
    last_step: float = 0.0
    last_value: float = 0.0
    shrink: float = 1.0  # factor on the fitted change beyond the last observation

    def predict(self, k: np.ndarray | float) -> np.ndarray:
        """The fitted stages up to the last observed step; beyond it the forecast continues from
        the last observation by the last stage's fitted change, times ``shrink``."""
        import numpy as np

        kk = np.atleast_1d(np.asarray(k, dtype=float))
        out = np.empty_like(kk)
        for i, st in enumerate(self.stages):
            last = i == len(self.stages) - 1
            m = (kk >= st.start) & ((kk < st.stop) | last)
            if i == 0:
                m |= kk < st.start
            out[m] = st(kk[m])
        ahead = kk > self.last_step
        if ahead.any():
            st = self.stages[-1]
            base = (
                float(st(np.array([self.last_step]))[0]) if st.kind == "curve" else self.last_value
            )
            out[ahead] = (
                self.last_value + self.shrink * (st(kk[ahead]) - base)
                if st.kind == "curve"
                else st(kk[ahead])
            )
        return out

    @property
    def params(self) -> list[dict[str, float]]:
        return [{"start": s.start, **s.spottune_params()} for s in self.stages]


def _orient(values: np.ndarray, direction: str | None) -> float:
    """+1 when the oriented curve should fall (loss-like), −1 when it should rise."""
    import numpy as np

    if direction in ("min", "max"):
        return 1.0 if direction == "min" else -1.0
    if direction is not None:
        raise SpecError(f"direction must be 'min', 'max' or None, got {direction!r}")
    n = len(values)
    k = max(1, n // 3)
    return 1.0 if np.mean(values[:k]) >= np.mean(values[-k:]) else -1.0


def stage_boundaries(
    steps: np.ndarray, values: np.ndarray, lr: np.ndarray | None = None
) -> list[int]:
    """Indices where a new stage starts (never 0); each stage keeps ≥ MIN_STAGE_POINTS points
    except possibly the last, which may be shorter (it is then fitted as a constant)."""
    import numpy as np

    n = len(values)
    out: list[int] = []
    if lr is not None and len(lr) == n and np.all(np.isfinite(lr)):
        start = 0
        for i in range(1, n):
            if lr[i] <= 0 or lr[i - 1] <= 0:
                continue
            seg = lr[start:i][lr[start:i] > 0]
            flat = len(seg) > 0 and seg.max() / seg.min() <= 2.0
            if flat and abs(np.log(lr[i] / lr[i - 1])) >= np.log(2.0) and i - start >= 2:
                out.append(i)
                start = i
        return out
    if n < 2 * MIN_STAGE_POINTS:
        return out
    d = np.diff(values)
    span = float(values.max() - values.min())
    noise = float(np.std(d)) if len(d) > 1 else 0.0
    start = 0
    for i in range(MIN_STAGE_POINTS, n - MIN_STAGE_POINTS + 1):
        jump = values[i] - values[i - 1]
        before = np.median(values[max(start, i - 3) : i])
        after = np.median(values[i : i + 3])
        if (
            abs(jump) > 3.0 * noise
            and abs(jump) > 0.3 * span
            and abs(after - before) > 0.7 * abs(jump)
            and np.sign(after - before) == np.sign(jump)
            and i - start >= MIN_STAGE_POINTS
        ):
            out.append(i)
            start = i
    return out


@dataclass
class _StageFit:
    p: np.ndarray
    delta: float  # fitted change from the last observed x to xf (oriented, normalised units)
    var_delta: float  # its delta-method variance, plus the spread of the good starts
    sigma: float  # residual noise
    step_var: float  # variance of the step-to-step change of the residuals


def _model(p: np.ndarray, x: np.ndarray) -> np.ndarray:
    import numpy as np

    return p[3] + 1.0 / np.maximum(p[0] * x * x + p[1] * x + p[2], 1e-12)


def _grad(p: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(len(x), 4) derivatives of :func:`_model` with respect to (a0, a1, a2, a3)."""
    import numpy as np

    q2 = np.maximum(p[0] * x * x + p[1] * x + p[2], 1e-12) ** 2
    return np.stack([-x * x / q2, -x / q2, -1.0 / q2, np.ones_like(x)], axis=1)


def _fit_stage(x: np.ndarray, u: np.ndarray, xf: float) -> _StageFit:
    """Fit u(x) = a3 + 1/(a0x² + a1x + a2) (falling), bounded and robust, from 3 starts.

    Bounds by a smooth change of variables (softplus for a0, a1, a2 − 1e-3; a logistic map of
    a3 into [min u − allowance, max u]), solved with MINPACK's Levenberg-Marquardt; robustness by
    two Huber reweighting passes. About a millisecond per start.
    """
    import numpy as np
    from scipy.optimize import leastsq
    from scipy.special import expit

    umin, umax = float(u.min()), float(u.max())
    lo3, hi3 = umin - ASYMPTOTE_ALLOWANCE, umax

    def to_p(b: np.ndarray) -> np.ndarray:
        sp = np.logaddexp(0.0, b[:3])
        return np.array([sp[0], sp[1], sp[2] + 1e-3, lo3 + (hi3 - lo3) * expit(b[3])])

    def from_p(p: np.ndarray) -> np.ndarray:
        inv = np.log(np.expm1(np.maximum(np.array([p[0], p[1], p[2] - 1e-3]), 1e-9)))
        f = np.clip((p[3] - lo3) / (hi3 - lo3), 1e-6, 1 - 1e-6)
        return np.append(inv, np.log(f / (1 - f)))

    noise = max(float(np.std(np.diff(u))) / np.sqrt(2) if len(u) > 2 else 0.05, 1e-3)
    fits = []
    for a3, a1 in ((umin - 0.05, 1.0), (umin - 0.3 * ASYMPTOTE_ALLOWANCE, 3.0), (lo3 + 1e-3, 10.0)):
        excess = max(float(u[0]) - a3, 1e-2)
        b = from_p(np.array([1e-3, a1, max(1.0 / excess, 2e-3), min(a3, hi3 - 1e-6)]))
        w = np.ones_like(u)
        for _ in range(3):  # 1 plain + 2 Huber-reweighted passes
            with warnings.catch_warnings():  # MINPACK warns on slow or exact convergence
                warnings.simplefilter("ignore")
                b = leastsq(
                    lambda bb, w=w: (_model(to_p(bb), x) - u) * w,
                    b,
                    maxfev=300,
                    xtol=1e-6,
                    ftol=1e-6,
                    gtol=1e-10,
                )[0]
            res = np.abs(_model(to_p(b), x) - u)
            w = np.sqrt(np.minimum(1.0, 1.5 * noise / np.maximum(res, 1e-12)))
        cost = float(
            np.sum(np.where(res <= 1.5 * noise, 0.5 * res**2, 1.5 * noise * (res - 0.75 * noise)))
        )
        fits.append((cost, to_p(b)))
    best_cost, p = min(fits, key=lambda t: t[0])
    res = _model(p, x) - u
    sigma = float(np.sqrt(np.sum(res**2) / max(len(u) - 4, 1)))
    ends = np.array([x[-1], xf])
    delta = float(np.diff(_model(p, ends))[0])
    g = np.diff(_grad(p, ends), axis=0)[0]
    jac = _grad(p, x)
    cov = sigma**2 * np.linalg.pinv(jac.T @ jac)
    good = [float(np.diff(_model(q, ends))[0]) for c, q in fits if c <= 1.1 * best_cost + 1e-12]
    spread = (max(good) - min(good)) / 2 if good else 0.0
    step_var = float(np.var(np.diff(res))) if len(res) > 2 else 0.0
    return _StageFit(p, delta, float(max(g @ cov @ g, 0.0)) + spread**2, sigma, step_var)


def fit_curve(
    steps: np.ndarray,
    values: np.ndarray,
    lr: np.ndarray | None = None,
    total_steps: int | None = None,
    *,
    direction: str | None = None,
    detect_stages: bool = True,
) -> CurveFit:
    """Fit EarlyCurve to the observed points; predict the value at ``total_steps`` (default: the
    last observed step). Needs ≥ 1 finite point; never returns NaN."""
    import numpy as np
    import scipy.optimize  # noqa: F401  (imported before the clock starts: fit_ms is the fit)

    t0 = time.perf_counter()
    k = np.asarray(steps, dtype=float).reshape(-1)
    v = np.asarray(values, dtype=float).reshape(-1)
    lr_arr = None if lr is None else np.asarray(lr, dtype=float).reshape(-1)
    if len(k) != len(v) or (lr_arr is not None and len(lr_arr) != len(k)):
        raise SpecError(f"steps, values (and lr) differ in length: {len(k)}, {len(v)}")
    ok = np.isfinite(k) & np.isfinite(v)
    order = np.argsort(k[ok], kind="stable")
    k, v = k[ok][order], v[ok][order]
    lr_arr = None if lr_arr is None else lr_arr[ok][order]
    if len(k) == 0:
        raise SpecError("fit_curve needs at least one finite (step, value) point")
    total = max(float(total_steps), float(k[-1])) if total_steps is not None else float(k[-1])
    sign = _orient(v, direction)
    bounds = stage_boundaries(k, v, lr_arr) if (detect_stages or lr_arr is not None) else []
    edges = [0, *bounds, len(k)]
    span = float(v.max() - v.min())
    scale = span if span > 1e-12 * max(1.0, abs(float(v.mean()))) else 0.0
    stages: list[Stage] = []
    shrink, var_final, sigma = 0.0, 0.0, 0.0
    for j in range(len(edges) - 1):
        kk, vv = k[edges[j] : edges[j + 1]], v[edges[j] : edges[j + 1]]
        start = float(kk[0])
        stop = float(k[edges[j + 1]]) if edges[j + 1] < len(k) else float("inf")
        last = j == len(edges) - 2
        if scale == 0.0 or len(kk) < (3 if len(edges) == 2 else MIN_STAGE_POINTS):
            level = float(np.mean(vv[-3:]))
            stages.append(
                Stage(start, stop, (0.0, 0.0, 1.0, 0.0), 1.0, level - 1.0, 1.0, 1.0, "const")
            )
            if last:
                sigma = float(np.std(vv)) if len(vv) > 1 else span / 2
                var_final = sigma**2
            continue
        x_scale = float(kk[-1] - start + 1.0)
        u = sign * (vv - vv[-1]) / scale
        sf = _fit_stage((kk - start + 1.0) / x_scale, u, (total - start + 1.0) / x_scale)
        stages.append(
            Stage(
                start,
                stop,
                (float(sf.p[0]), float(sf.p[1]), float(sf.p[2]), float(sf.p[3])),
                sign,
                float(vv[-1]),
                scale,
                x_scale,
            )
        )
        if last:
            # shrink the fitted change by its signal-to-noise (a Wiener / James-Stein factor):
            # a trend the noise could explain moves the forecast little
            shrink = sf.delta**2 / (sf.delta**2 + sf.var_delta) if sf.delta != 0 else 0.0
            sigma = sf.sigma * scale
            var_final = (shrink * sf.var_delta + (1 - shrink) * sf.delta**2) * scale**2 + sigma**2
            # what a smooth fit cannot see: level jumps still to come (a random walk with the
            # observed step-to-step spread, over the steps left)
            gap = float(np.median(np.diff(kk))) if len(kk) > 1 else 1.0
            steps_left = max(total - kk[-1], 0.0) / max(gap, 1e-12)
            var_final += RANDOM_WALK * sf.step_var * scale**2 * steps_left
    fit = CurveFit(
        stages=stages,
        final=0.0,
        band=(0.0, 0.0),
        total_steps=total,
        direction="min" if sign > 0 else "max",
        residual_std=sigma,
        boundaries=[float(k[i]) for i in bounds],
        last_step=float(k[-1]),
        last_value=float(v[-1]),
        shrink=float(shrink),
    )
    final = float(fit.predict(total)[0])
    if not np.isfinite(final):
        final = float(v[-1])
    half = Z95 * float(np.sqrt(var_final)) if np.isfinite(var_final) else Z95 * span
    half = min(half, 10 * span) if span > 0 else 0.0
    fit.final, fit.band = final, (final - half, final + half)
    fit.fit_ms = (time.perf_counter() - t0) * 1000
    return fit


# ---- the registry of curve predictors ----------------------------------------------------
class CurvePredictor(Protocol):
    name: str

    def predict_final(
        self, steps: np.ndarray, values: np.ndarray, total_steps: int, lr: np.ndarray | None = None
    ) -> tuple[float, float, float]:
        """(predicted final value, band low, band high)."""
        ...


class EarlyCurve:
    name = "earlycurve"

    def __init__(self, direction: str | None = None, detect_stages: bool = True) -> None:
        self.direction, self.detect_stages = direction, detect_stages

    def predict_final(
        self, steps: np.ndarray, values: np.ndarray, total_steps: int, lr: np.ndarray | None = None
    ) -> tuple[float, float, float]:
        f = fit_curve(
            steps,
            values,
            lr,
            total_steps,
            direction=self.direction,
            detect_stages=self.detect_stages,
        )
        return f.final, f.band[0], f.band[1]


def _baseline(cls: str) -> Callable[..., CurvePredictor]:
    def make(**options: Any) -> CurvePredictor:
        from spotwise.predictors import _curvebaselines

        made: CurvePredictor = getattr(_curvebaselines, cls)(**options)
        return made

    return make


_CURVE_REGISTRY: dict[str, Callable[..., CurvePredictor]] = {
    "earlycurve": EarlyCurve,
    "last-value": _baseline("LastValue"),
    "mean-last-k": _baseline("MeanLastK"),
    "power-law": _baseline("PowerLaw"),
}
CURVE_METHODS = tuple(_CURVE_REGISTRY)


def get_curve_predictor(name: str, **options: Any) -> CurvePredictor:
    """A curve predictor by name; unknown names raise SpecError listing the valid ones."""
    if name not in _CURVE_REGISTRY:
        raise SpecError(
            f"curve predictor: unknown name {name!r}{did_you_mean(name, list(CURVE_METHODS))}; "
            f"valid: {', '.join(CURVE_METHODS)}"
        )
    return _CURVE_REGISTRY[name](**options)
