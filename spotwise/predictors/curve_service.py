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
    total_steps: float | None = None,
    direction: str | None = None,
) -> dict[str, Any]:
    """EarlyCurve on the first ``theta`` of one curve: the fit, its final, the held-out truth.

    Steps stay as read (they may be fractions); points with no finite value are left out.
    ``observed_last`` is the value at the last observed step, ``true_final`` the held-out value
    at ``total_steps`` (None when that step is observed, or not in the file).
    """
    from spotwise.errors import did_you_mean
    from spotwise.predictors.curves import (
        check_theta,
        finite_curve,
        load_curves,
        metric_direction,
        observed_count,
    )
    from spotwise.predictors.earlycurve import fit_curve

    check_theta(theta, whole=True)
    curves = load_curves(path, metric, label="FILE")
    if curve_id not in curves:
        ids = sorted(curves, key=lambda s: (len(s), s))
        raise NotFoundError(
            f"--curve-id {curve_id!r} not in {path}{did_you_mean(curve_id, ids)}; "
            f"{len(ids)} curves, e.g. {', '.join(ids[:5])}"
        )
    c = finite_curve(curves[curve_id])
    if len(c.steps) == 0:
        raise SpecError(
            f"--curve-id {curve_id!r}: no finite {metric} value in {path}; pick another curve"
        )
    total = float(total_steps) if total_steps is not None else float(c.steps[-1])
    n = observed_count(c, theta) if theta < 1 else len(c.steps)
    fit = fit_curve(
        c.steps[:n],
        c.values[:n],
        None if c.lr is None else c.lr[:n],
        total,
        direction=direction or metric_direction(metric),
    )
    truth = float(c.values[-1]) if n < len(c.steps) and float(c.steps[-1]) == total else None
    return {
        "curve_id": curve_id,
        "metric": metric,
        "observed": n,
        "points": len(c.steps),
        "total_steps": total,
        "fit": fit,
        "curve": c,
        "observed_last": float(c.values[n - 1]),
        "true_final": truth,
    }


def curve_eval(
    path: str | Path,
    metric: str,
    theta: float,
    methods: tuple[str, ...],
    direction: str | None = None,
) -> dict[str, Any]:
    """Every method on every curve of ``path`` with ≥ 3 finite points; ``skipped`` names the
    others; ``curves`` is the file read; ``observed_points`` the fewest and most points observed
    per curve; ``warnings`` says when the curves end at different steps (:func:`uneven_ends`)."""
    import numpy as np

    from spotwise.predictors.curves import (
        check_theta,
        curves_file,
        dataset_direction,
        evaluate_curves,
        finite_curve,
        load_curves,
        observed_count,
        uneven_ends,
    )

    check_theta(theta)  # before reading the file
    curves = load_curves(path, metric)
    d = direction or dataset_direction(curves, metric)
    rows = evaluate_curves(curves, theta, methods, direction=d)
    skipped = [cid for cid, c in curves.items() if int(np.isfinite(c.values).sum()) < 3]
    finite = {cid: finite_curve(c) for cid, c in curves.items() if cid not in skipped}
    seen = [observed_count(c, theta) for c in finite.values()]
    warning = uneven_ends(finite)
    return {
        "curves": str(curves_file(path)),  # the file read (a folder's curves CSV)
        "metric": metric,
        "theta": theta,
        "direction": d,
        "rows": rows,
        "skipped": skipped,
        # points observed per scored curve (the first θ of its steps): min and max
        "observed_points": {"min": min(seen), "max": max(seen)},
        "warnings": [warning] if warning else [],
    }
