"""EarlyCurve (SpotTune, ICDCS 2020, eq. 2.3): predict a learning curve's final value early.

A curve is piecewise over *stages* ``[l_i, r_i)``; within a stage, with ``k`` counted from the
stage start (1, 2, …)::

    L̂(k) = 1 / (a0·k² + a1·k + a2) + a3

Stage boundaries come from learning-rate changes when ``lr`` is given (a step of ×2 or more
after a flat stretch: step decay; a smooth schedule such as cosine annealing is one stage), else
they are detected as level shifts well above the curve's step-to-step noise
(:mod:`spotwise.predictors._curvestages`).

``k`` counts steps of the curve: 1 for integer steps (epochs), else their median spacing, so
fractional steps (0.01, 0.02, … of an epoch) fit the same shape as 1, 2, ….

Fitting, per stage, in normalised units (steps / the stage's length, values / value range,
oriented so the curve falls): MINPACK Levenberg-Marquardt (``scipy.optimize.leastsq``) from 3
starts, each with 2 Huber-reweighted passes, the bounds by a change of variables:
``a0, a1 ≥ 0``, ``a2 > 0`` (a monotone curve), and the asymptote ``a3`` at most a quarter of the
value range (``ASYMPTOTE_ALLOWANCE``) beyond the best observed value. Direction: ``"min"`` (loss),
``"max"`` (accuracy), or ``None`` = the trend of the observed points. The uncertainty band of the
final value combines the delta-method parameter variance, the residual noise, the spread of the
good starts and a random walk for level jumps to come; where the fitted asymptote sits on its
bound (the curve wanted to go further) the improving side is widened by the fitted change and
``CurveFit.note`` says so (the per-stage fit lives in :mod:`spotwise.predictors._curvefit`).

A last stage with fewer than 5 points (more than the 4 parameters) is not fitted, nor is a
constant curve: the forecast is the last value, with a band from the trend, the noise and the
observed range; ``CurveFit.note`` says so. 0 finite points raise PredictorError.

Baselines under the same interface (:func:`get_curve_predictor`): ``last-value``,
``mean-last-k`` and ``power-law`` (``a + b·k^(−c)``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from spotwise.errors import PredictorError, SpecError, did_you_mean
from spotwise.predictors._curvefit import ASYMPTOTE_ALLOWANCE, MIN_FIT_POINTS, Z95
from spotwise.predictors._curvestages import MIN_STAGE_POINTS as MIN_STAGE_POINTS
from spotwise.predictors._curvestages import stage_boundaries, step_unit  # importable here too

if TYPE_CHECKING:
    import numpy as np

RANDOM_WALK = 0.5


@dataclass(frozen=True)
class Stage:
    """One fitted stage: value(k) = offset + sign·scale·(a3 + 1/(a0·x² + a1·x + a2)),
    x = (k − start + unit) / x_scale, ``unit`` one step (1 for integer steps). ``kind`` is
    ``"curve"`` or ``"const"`` (too few points)."""

    start: float
    stop: float  # first step of the next stage (inf for the last)
    a: tuple[float, float, float, float]
    sign: float
    offset: float
    scale: float
    x_scale: float
    kind: str = "curve"
    unit: float = 1.0  # one step: 1 for integer steps, else the observed spacing

    def __call__(self, k: np.ndarray) -> np.ndarray:
        import numpy as np

        x = (np.asarray(k, dtype=float) - self.start + self.unit) / self.x_scale
        a0, a1, a2, a3 = self.a
        q = np.maximum(a0 * x * x + a1 * x + a2, 1e-12)
        return self.offset + self.sign * self.scale * (a3 + 1.0 / q)

    def spottune_params(self) -> dict[str, float]:
        """In original units: value = 1/(A0·k² + A1·k + A2) + A3, k counted from 1 in the stage
        (in steps of ``unit``)."""
        a0, a1, a2, a3 = self.a
        g = self.sign * self.scale
        xs = self.x_scale / self.unit
        return {
            "A0": a0 / (xs**2 * g),
            "A1": a1 / (xs * g),
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
    note: str = ""  # why the forecast is not a fitted curve (too few points, a constant), or
    # that its asymptote sits on its bound (band widened), if so

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


def check_direction(direction: str | None) -> str | None:
    """``direction`` if it is ``"min"``, ``"max"`` or None (infer it); else SpecError."""
    if direction not in ("min", "max", None):
        raise SpecError(
            f"--direction must be min or max (or leave it out to infer it), got {direction!r}"
        )
    return direction


def _orient(values: np.ndarray, direction: str | None) -> float:
    """+1 when the oriented curve should fall (loss-like), −1 when it should rise."""
    import numpy as np

    if check_direction(direction) is not None:
        return 1.0 if direction == "min" else -1.0
    n = len(values)
    k = max(1, n // 3)
    return 1.0 if np.mean(values[:k]) >= np.mean(values[-k:]) else -1.0


def fit_curve(
    steps: np.ndarray,
    values: np.ndarray,
    lr: np.ndarray | None = None,
    total_steps: float | None = None,
    *,
    direction: str | None = None,
    detect_stages: bool = True,
) -> CurveFit:
    """Fit EarlyCurve to the observed points; predict the value at ``total_steps`` (default: the
    last observed step). Needs ≥ 1 finite point (else PredictorError); never returns NaN.

    A last stage with fewer than :data:`MIN_FIT_POINTS` points (or a constant curve) is not
    fitted: the forecast is its last value, with a band from its noise, its trend over the steps
    left and the observed range (:func:`short_half_band`); ``note`` says so.
    """
    import numpy as np
    import scipy.optimize  # noqa: F401  (imported before the clock starts: fit_ms is the fit)

    from spotwise.predictors._curvefit import fit_stage, short_half_band

    t0 = time.perf_counter()
    k = np.asarray(steps, dtype=float).reshape(-1)
    v = np.asarray(values, dtype=float).reshape(-1)
    lr_arr = None if lr is None else np.asarray(lr, dtype=float).reshape(-1)
    if len(k) != len(v) or (lr_arr is not None and len(lr_arr) != len(k)):
        n_lr = "" if lr_arr is None else f", lr {len(lr_arr)}"
        raise SpecError(f"steps and values differ in length: steps {len(k)}, values {len(v)}{n_lr}")
    ok = np.isfinite(k) & np.isfinite(v)
    order = np.argsort(k[ok], kind="stable")
    k, v = k[ok][order], v[ok][order]
    lr_arr = None if lr_arr is None else lr_arr[ok][order]
    if len(k) == 0:
        raise PredictorError("a learning curve needs at least 1 finite (step, value) point, got 0")
    total = max(float(total_steps), float(k[-1])) if total_steps is not None else float(k[-1])
    sign = _orient(v, direction)
    unit = step_unit(k)
    with np.errstate(over="ignore", invalid="ignore"):  # values near 1e300: no shift found
        bounds = stage_boundaries(k, v, lr_arr) if (detect_stages or lr_arr is not None) else []
    edges = [0, *bounds, len(k)]
    with np.errstate(over="ignore", invalid="ignore"):  # ±1e308: treated as constant
        span = float(v.max() - v.min())
        flat = not np.isfinite(span) or span <= 1e-12 * max(1.0, abs(float(np.mean(v))))
    scale = 0.0 if flat else span
    stages: list[Stage] = []
    shrink, var_final, sigma, note, half = 0.0, 0.0, 0.0, "", None
    held = 0.0  # how far the asymptote's bound may hold the forecast back (original units)
    for j in range(len(edges) - 1):
        kk, vv = k[edges[j] : edges[j + 1]], v[edges[j] : edges[j + 1]]
        start = float(kk[0])
        stop = float(k[edges[j + 1]]) if edges[j + 1] < len(k) else float("inf")
        last = j == len(edges) - 2
        x_scale = float(kk[-1] - start + unit)
        pts = f"{len(kk)} point{'s' * (len(kk) != 1)}"
        sf, why = None, f"{pts}, fewer than the {MIN_FIT_POINTS} a fit needs"
        if scale > 0.0 and len(kk) >= MIN_FIT_POINTS:
            u = sign * (vv - vv[-1]) / scale
            try:
                sf = fit_stage((kk - start + unit) / x_scale, u, (total - start + unit) / x_scale)
            except (ValueError, np.linalg.LinAlgError) as e:  # never expected; never fatal
                why = f"the curve fit failed ({e})"
        if sf is None:
            level = float(vv[-1]) if last else float(np.mean(vv[-3:]))
            stages.append(Stage(start, stop, (0.0, 0.0, 1.0, -1.0), 1.0, level, 1.0, 1.0, "const"))
            if last and flat and len(v) >= MIN_FIT_POINTS:
                half, note = 0.0, f"constant over {len(v)} points: predicted that value"
            elif last:
                with np.errstate(all="ignore"):
                    sigma = float(np.std(vv))
                half = short_half_band(kk, vv, span, total)
                where = "" if len(edges) == 2 else "last stage: "
                note = f"{where}{why}: predicted the last value, band from its trend and range"
            continue
        stages.append(
            Stage(
                start,
                stop,
                (float(sf.p[0]), float(sf.p[1]), float(sf.p[2]), float(sf.p[3])),
                sign,
                float(vv[-1]),
                scale,
                x_scale,
                unit=unit,
            )
        )
        if last:
            # shrink the fitted change by its signal-to-noise (a Wiener / James-Stein factor):
            # a trend the noise could explain moves the forecast little
            shrink = sf.delta**2 / (sf.delta**2 + sf.var_delta) if sf.delta != 0 else 0.0
            sigma = sf.sigma * scale
            # what a smooth fit cannot see: level jumps still to come (a random walk with the
            # observed step-to-step spread, over the steps left)
            gap = float(np.median(np.diff(kk)))
            steps_left = max(total - kk[-1], 0.0) / max(gap, 1e-12)
            try:  # values near 1e300: a Python float's square raises; the band then uses span
                var_final = (shrink * sf.var_delta + (1 - shrink) * sf.delta**2) * scale**2
                var_final += sigma**2 + RANDOM_WALK * sf.step_var * scale**2 * steps_left
            except OverflowError:
                var_final = float("inf")
            if sf.at_bound:
                # the fit wanted an asymptote beyond its bound: the curve may keep improving
                # past the forecast, by as much again as the fitted change
                held = abs(sf.delta) * scale
                note = (
                    f"the asymptote sits on its bound ({ASYMPTOTE_ALLOWANCE:g} of the value "
                    "range beyond the best value): the curve may improve past the forecast; "
                    "band widened on that side by the fitted change"
                )
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
        note=note,
    )
    final = float(fit.predict(total)[0])
    if not np.isfinite(final):
        final = float(v[-1])
    if half is None:
        half = Z95 * float(np.sqrt(var_final)) if np.isfinite(var_final) else Z95 * span
        half = min(half, 10 * span)
    lo, hi = final - half, final + half
    if held > 0:  # widen the improving side: lower values when the oriented curve falls
        lo, hi = (lo - held, hi) if sign > 0 else (lo, hi + held)
    fit.final, fit.band = final, (lo, hi)
    fit.fit_ms = (time.perf_counter() - t0) * 1000
    return fit


# ---- the registry of curve predictors ----------------------------------------------------
class CurvePredictor(Protocol):
    name: str

    def predict_final(
        self,
        steps: np.ndarray,
        values: np.ndarray,
        total_steps: float,
        lr: np.ndarray | None = None,
    ) -> tuple[float, float, float]:
        """(predicted final value, band low, band high)."""
        ...


class EarlyCurve:
    name = "earlycurve"

    def __init__(self, direction: str | None = None, detect_stages: bool = True) -> None:
        self.direction, self.detect_stages = direction, detect_stages

    def predict_final(
        self,
        steps: np.ndarray,
        values: np.ndarray,
        total_steps: float,
        lr: np.ndarray | None = None,
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
