"""The core calls behind ``spotwise curve fit`` and ``spotwise curve eval`` (no printing here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spotwise.errors import NotFoundError, SpecError


def curve_fit(
    path: str | Path,
    curve_id: str,
    metric: str = "value",
    theta: float = 1.0,
    total_steps: int | None = None,
    direction: str | None = None,
) -> dict[str, Any]:
    """EarlyCurve on the first ``theta`` of one curve: the fit, its final, the held-out truth."""
    from spotwise.errors import did_you_mean
    from spotwise.predictors.curves import load_curves, metric_direction
    from spotwise.predictors.earlycurve import fit_curve

    if not 0 < theta <= 1:
        raise SpecError(f"--theta must be in (0, 1], got {theta:g}")
    curves = load_curves(path, metric, label="FILE")
    if curve_id not in curves:
        ids = sorted(curves, key=lambda s: (len(s), s))
        raise NotFoundError(
            f"--curve-id {curve_id!r} not in {path}{did_you_mean(curve_id, ids)}; "
            f"{len(ids)} curves, e.g. {', '.join(ids[:5])}"
        )
    c = curves[curve_id]
    total = int(total_steps) if total_steps is not None else int(c.steps[-1])
    n = max(2, int((c.steps <= theta * c.steps[-1] + 1e-9).sum())) if theta < 1 else len(c.steps)
    fit = fit_curve(
        c.steps[:n],
        c.values[:n],
        None if c.lr is None else c.lr[:n],
        total,
        direction=direction or metric_direction(metric),
    )
    truth = float(c.values[-1]) if n < len(c.steps) and int(c.steps[-1]) == total else None
    return {
        "curve_id": curve_id,
        "metric": metric,
        "observed": n,
        "points": len(c.steps),
        "total_steps": total,
        "fit": fit,
        "curve": c,
        "true_final": truth,
    }


def curve_eval(
    path: str | Path,
    metric: str,
    theta: float,
    methods: tuple[str, ...],
    direction: str | None = None,
) -> dict[str, Any]:
    from spotwise.predictors.curves import dataset_direction, evaluate_curves, load_curves

    curves = load_curves(path, metric)
    d = direction or dataset_direction(curves, metric)
    rows = evaluate_curves(curves, theta, methods, direction=d)
    return {"curves": str(path), "metric": metric, "theta": theta, "direction": d, "rows": rows}
