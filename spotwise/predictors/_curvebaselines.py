"""The curve-prediction baselines beside EarlyCurve: last value, mean of the last k, power law.

Registered in :mod:`spotwise.predictors.earlycurve` (``get_curve_predictor``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spotwise.errors import PredictorError
from spotwise.predictors._curvefit import ASYMPTOTE_ALLOWANCE, Z95, short_half_band
from spotwise.predictors.earlycurve import _orient

if TYPE_CHECKING:
    import numpy as np


def _clean(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    k, v = np.asarray(steps, dtype=float).reshape(-1), np.asarray(values, dtype=float).reshape(-1)
    ok = np.isfinite(k) & np.isfinite(v)
    k, v = k[ok], v[ok]
    if len(v) == 0:
        raise PredictorError("a learning curve needs at least 1 finite (step, value) point, got 0")
    o = np.argsort(k, kind="stable")
    return k[o], v[o]


class LastValue:
    name = "last-value"

    def __init__(self, k: int = 5) -> None:
        self.k = k

    def predict_final(
        self,
        steps: np.ndarray,
        values: np.ndarray,
        total_steps: float,
        lr: np.ndarray | None = None,
    ) -> tuple[float, float, float]:
        import numpy as np

        k, v = _clean(steps, values)
        if len(v) == 1:  # nothing to measure a spread on: the band of a curve too short to fit
            half = short_half_band(k, v, 0.0, float(total_steps))
        else:
            half = Z95 * float(np.std(v[-self.k :]))
        return float(v[-1]), float(v[-1]) - half, float(v[-1]) + half


class MeanLastK(LastValue):
    name = "mean-last-k"

    def predict_final(
        self,
        steps: np.ndarray,
        values: np.ndarray,
        total_steps: float,
        lr: np.ndarray | None = None,
    ) -> tuple[float, float, float]:
        import numpy as np

        _, v = _clean(steps, values)
        if len(v) == 1:
            return super().predict_final(steps, values, total_steps)
        m = float(np.mean(v[-self.k :]))
        half = Z95 * float(np.std(v[-self.k :]))
        return m, m - half, m + half


class PowerLaw:
    """``value = a + b·k^(−c)`` (b ≥ 0 on the oriented curve), bounded robust least squares."""

    name = "power-law"

    def __init__(self, direction: str | None = None) -> None:
        self.direction = direction

    def predict_final(
        self,
        steps: np.ndarray,
        values: np.ndarray,
        total_steps: float,
        lr: np.ndarray | None = None,
    ) -> tuple[float, float, float]:
        import numpy as np
        from scipy.optimize import least_squares

        k, v = _clean(steps, values)
        span = float(v.max() - v.min())
        sign = _orient(v, self.direction)
        if len(v) <= 3:  # no more points than parameters: the last value, with a wide band
            half = short_half_band(k, v, span, max(float(total_steps), float(k[-1])))
            return float(v[-1]), float(v[-1]) - half, float(v[-1]) + half
        if span <= 1e-12 * max(1.0, abs(float(v.mean()))):
            return LastValue().predict_final(k, v, total_steps)
        u = sign * (v - v[-1]) / span
        shift = max(1.0 - float(k[0]), 0.0)  # k counted from 1 when the steps start at 0 or below
        x = (k + shift) / (k[-1] + shift)
        xf = (max(float(total_steps), float(k[-1])) + shift) / (k[-1] + shift)

        def f(p: np.ndarray, xx: np.ndarray) -> np.ndarray:
            return p[0] + p[1] * np.power(np.maximum(xx, 1e-9), -p[2])

        lo = [float(u.min()) - ASYMPTOTE_ALLOWANCE, 0.0, 0.01]
        hi = [float(u.max()), 1e3, 3.0]
        noise = max(float(np.std(np.diff(u))) / np.sqrt(2), 1e-3)
        best = None
        for c0 in (0.3, 1.0):
            p0 = np.clip(
                [float(u.min()) - 0.1, max(float(u[0] - u.min()), 0.1), c0],
                np.add(lo, 1e-9),
                np.subtract(hi, 1e-9),
            )
            r = least_squares(
                lambda p: f(p, x) - u, p0, bounds=(lo, hi), loss="soft_l1", f_scale=noise
            )
            best = r if best is None or r.cost < best.cost else best
        assert best is not None
        uf = float(f(best.x, np.array([xf]))[0])
        sigma = float(np.sqrt(np.sum((f(best.x, x) - u) ** 2) / max(len(u) - 3, 1)))
        final = float(v[-1]) + sign * span * uf
        half = Z95 * sigma * span * 2.0
        return final, final - half, final + half
