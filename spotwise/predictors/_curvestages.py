"""Where a learning curve's stages begin, and the step from which ``k`` counts.

Stage boundaries come from learning-rate changes when ``lr`` is given (a step of ×2 or more after
a flat stretch: step decay; a smooth schedule such as cosine annealing is one stage), else they
are detected as level shifts well above the curve's step-to-step noise. Used by
:func:`spotwise.predictors.earlycurve.fit_curve`, which fits each stage on its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MIN_STAGE_POINTS = 4


def step_unit(steps: np.ndarray) -> float:
    """One step of a curve, from which ``k`` counts 1, 2, …: 1 when every step is an integer
    (epochs, iterations), else the median spacing of the steps (fractions of an epoch)."""
    import numpy as np

    if len(steps) < 2 or np.all(steps == np.round(steps)):
        return 1.0
    gaps = np.diff(steps)
    gaps = gaps[gaps > 0]
    return float(np.median(gaps)) if len(gaps) else 1.0


def stage_boundaries(
    steps: np.ndarray, values: np.ndarray, lr: np.ndarray | None = None
) -> list[int]:
    """Indices where a new stage starts (never 0); each stage keeps ≥ MIN_STAGE_POINTS points
    except possibly the last, which may be shorter (a stage under MIN_FIT_POINTS is a constant)."""
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
