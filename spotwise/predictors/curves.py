"""Learning curves: load them, and measure how well each curve predictor calls the final value.

Formats (:func:`load_curves`), from a file, a folder (:func:`curves_file`) or
``builtin:lcbench-subset`` (the shipped LCBench subset, :data:`BUILTIN_CURVES`):

* a long CSV (``.csv`` / ``.csv.gz``) ``curve_id, step, value[, lr][, seconds]``; ``metric``
  names the value column (default ``value``, else the only column besides those);
* the LCBench folder (or its ``*_curves_long.csv.gz``): ``trial, epoch, lr, time, <metrics>``
  (default metric ``val_accuracy``).
  Epoch 0 (measured before training) and epoch 51 (a repeat of epoch 50) are dropped, as Ax does:
  a curve is epochs 1..50.

Each step appears once per curve (a repeated step is refused); steps need not be integers.

Evaluation (:func:`evaluate_curves`): for each curve, observe the first θ of its step span
(:func:`observed_count`: with steps from ``first`` to ``total`` and one step ``unit``, those with
``step − first + unit ≤ θ·(total − first + unit)``, at least 2; for epochs 1..50 that is
``step ≤ θ·50``), predict the value at the last step, and compare with
the true last value (points with no finite value are left out; a curve with fewer than 3 finite
points is skipped): MAE, Spearman rank correlation of predicted vs true finals, the recall of the
true top 10 % when keeping the predicted top 25 %, the share of true finals inside the band, and
the fit time per curve.
"""

from __future__ import annotations

import csv
import gzip
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotwise.errors import SpecError, did_you_mean

if TYPE_CHECKING:
    import numpy as np

LCBENCH_DROP_EPOCHS = (0, 51)
LCBENCH_METRIC = "val_accuracy"  # the default metric of the LCBench format
_DATA = Path(__file__).resolve().parent.parent / "data"
BUILTIN_CURVES = {"lcbench-subset": _DATA / "lcbench-subset"}  # builtin:NAME → shipped folder
_NOT_METRICS = {  # the columns a curves file may hold besides its metrics, and what each is
    "curve_id": "the curve's id",
    "step": "the step",
    "trial": "LCBench's curve id",
    "epoch": "LCBench's step",
    "lr": "the learning rate",
    "seconds": "the cumulative seconds",
    "time": "the cumulative seconds (LCBench's time)",
}
_MIN_WORDS = ("loss", "error", "cross_entropy", "perplexity", "mse", "mae", "rmse")


@dataclass
class Curve:
    curve_id: str
    steps: np.ndarray
    values: np.ndarray
    lr: np.ndarray | None = None
    seconds: np.ndarray | None = None


def metric_direction(metric: str) -> str | None:
    """``"min"`` for losses/errors, ``"max"`` for accuracies, ``None`` when the name is silent."""
    m = metric.lower()
    if any(w in m for w in _MIN_WORDS):
        return "min"
    if "acc" in m or "auc" in m or "f1" in m or m.endswith("result") or "score" in m:
        return "max"
    return None


def _open(path: Path) -> Any:
    return gzip.open(path, "rt", newline="") if path.suffix == ".gz" else open(path, newline="")


def resolve_curves(path: str | Path, label: str = "--curves") -> Path:
    """``builtin:NAME`` as the shipped folder; any other value as the path it names."""
    text = str(path).strip()
    if not text.startswith("builtin:"):
        return Path(text).expanduser()
    name = text.removeprefix("builtin:")
    if name not in BUILTIN_CURVES:
        valid = [f"builtin:{n}" for n in BUILTIN_CURVES]
        raise SpecError(
            f"{label}: unknown shipped curves {text!r}{did_you_mean(text, valid)}; "
            f"valid: {', '.join(valid)}"
        )
    return BUILTIN_CURVES[name]


def curves_file(path: str | Path, label: str = "--curves") -> Path:
    """The CSV file behind ``path``: the file itself; in a folder, LCBench's
    ``*_curves_long.csv(.gz)``, else its only ``.csv(.gz)`` file. A folder of several is refused
    with their names (the first alphabetically is rarely the curves: ``datasets.csv``)."""
    p = resolve_curves(path, label)
    what = "pass a long CSV or the LCBench folder (builtin:lcbench-subset: the shipped one)"
    if not p.exists():
        raise SpecError(f"{label}: {p} does not exist; {what}")
    if not p.is_dir():
        return p
    found = sorted(p.glob("*curves_long.csv*")) or sorted([*p.glob("*.csv"), *p.glob("*.csv.gz")])
    if not found:
        raise SpecError(f"{label}: {p} holds no *_curves_long.csv(.gz) or .csv file; {what}")
    if len(found) > 1:
        names = ", ".join(f.name for f in found[:6])
        more = f" and {len(found) - 6} more" if len(found) > 6 else ""
        raise SpecError(
            f"{label}: {p} holds {len(found)} CSV files ({names}{more}); pass the curves "
            f"file itself: {label} {p / 'FILE.csv'}"
        )
    return found[0]


def is_lcbench(path: str | Path, label: str = "--curves") -> bool:
    """Whether the curves behind ``path`` are in LCBench's layout (trial, epoch, …)."""
    return _columns(curves_file(path, label), label)[1]


def _columns(p: Path, label: str) -> tuple[list[str], bool]:
    """The header of a curves CSV, and whether it is LCBench's (trial, epoch, …)."""
    try:
        with _open(p) as fh:
            cols = list(csv.DictReader(fh).fieldnames or [])
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise SpecError(f"{label}: cannot read {p} as a CSV ({e})") from e
    lcbench = "trial" in cols and "epoch" in cols
    if not lcbench and ("curve_id" not in cols or "step" not in cols):
        raise SpecError(
            f"{label}: {p} needs columns curve_id, step, <metric> (or LCBench's trial, epoch); "
            f"it has {', '.join(cols) or 'none'}"
        )
    return cols, lcbench


def resolve_metric(
    path: str | Path,
    metric: str | None = None,
    label: str = "--curves",
    lcbench_default: str = LCBENCH_METRIC,
) -> str:
    """The metric column to read: ``metric`` if the file has it, else the default — LCBench:
    ``lcbench_default`` (``val_accuracy`` unless the caller has its own); a long CSV: ``value``
    if present, else its only metric column. ``label`` names the path in errors as the user
    gave it (``--curves``, ``FILE``)."""
    p = curves_file(path, label)
    cols, lcbench = _columns(p, label)
    choices = [c for c in cols if c not in _NOT_METRICS]
    if metric is None:
        default = lcbench_default if lcbench else "value"
        if default in cols:
            return default
        if len(choices) == 1:
            return choices[0]
        raise SpecError(
            f"--metric: {p.name} has several metric columns and none is called {default!r}; "
            f"pass one of: {', '.join(choices) or 'none'}"
        )
    if metric in _NOT_METRICS:
        raise SpecError(
            f"--metric {metric}: {_NOT_METRICS[metric]}, not a metric; "
            f"valid: {', '.join(choices) or 'none'}"
        )
    if metric not in cols:
        raise SpecError(
            f"--metric: no column {metric!r} in {p.name}{did_you_mean(metric, choices)}; "
            f"valid: {', '.join(choices)}"
        )
    return metric


def load_curves(
    path: str | Path, metric: str | None = None, label: str = "--curves"
) -> dict[str, Curve]:
    """Curves by id from a long CSV or the LCBench folder/file; ``metric`` as in
    :func:`resolve_metric` (None: the default column)."""
    import numpy as np

    metric = resolve_metric(path, metric, label)
    p = curves_file(path, label)
    with _open(p) as fh:
        reader = csv.DictReader(fh)
        cols = list(reader.fieldnames or [])
        lcbench = "trial" in cols and "epoch" in cols
        id_col, step_col = ("trial", "epoch") if lcbench else ("curve_id", "step")
        lr_col = "lr" if "lr" in cols else None
        sec_col = "seconds" if "seconds" in cols else ("time" if "time" in cols else None)
        cols4 = (step_col, metric, lr_col, sec_col)
        raw: dict[str, list[tuple[float, float, float, float]]] = {}
        for row in reader:
            step, val, lr, sec = (_number(row, c, p, reader.line_num, label) for c in cols4)
            if not np.isfinite(step) or (lcbench and int(step) in LCBENCH_DROP_EPOCHS):
                continue
            cid = row[id_col]
            if cid is None or not cid.strip():  # '' was taken as a curve of its own
                raise SpecError(
                    f"{label}: {p.name} line {reader.line_num}: empty {id_col}; "
                    f"give every row its curve's {id_col}"
                )
            raw.setdefault(cid, []).append((step, val, lr, sec))
    if not raw:
        raise SpecError(f"{label}: {p} has no rows")
    out: dict[str, Curve] = {}
    for cid, pts in raw.items():
        a = np.array(sorted(pts))
        twice = np.flatnonzero(np.diff(a[:, 0]) == 0)
        if len(twice):
            raise SpecError(
                f"{label}: {p.name}: curve {cid!r} has step {a[twice[0], 0]:g} more than once; "
                "each step of a curve must appear once"
            )
        out[cid] = Curve(
            curve_id=cid,
            steps=a[:, 0],
            values=a[:, 1],
            lr=a[:, 2] if lr_col and np.isfinite(a[:, 2]).all() else None,
            seconds=a[:, 3] if sec_col and np.isfinite(a[:, 3]).all() else None,
        )
    return out


def _number(row: dict[str, Any], col: str | None, p: Path, line: int, label: str) -> float:
    """``row[col]`` as a float; NaN when the column is absent or the cell empty."""
    cell = row.get(col) if col else None
    if cell is None or cell.strip() == "":
        return float("nan")
    try:
        return float(cell)
    except ValueError:
        raise SpecError(f"{label}: {p.name} line {line}: {col} {cell!r} is not a number") from None


def dataset_direction(curves: dict[str, Curve], metric: str) -> str:
    """The metric's direction from its name, else from whether curves end above where they start."""
    import numpy as np

    d = metric_direction(metric)
    if d is not None:
        return d
    finite = [c.values[np.isfinite(c.values)] for c in curves.values()]
    ups = [float(np.mean(v[-3:]) - np.mean(v[:3])) for v in finite if len(v) >= 2]
    return "max" if ups and float(np.median(ups)) > 0 else "min"


def check_theta(theta: float, *, whole: bool = False) -> None:
    """``--theta`` in (0, 1), or (0, 1] with ``whole`` (``curve fit`` may observe all of it)."""
    if not (0 < theta <= 1 if whole else 0 < theta < 1):
        raise SpecError(f"--theta must be in (0, 1{']' if whole else ')'}, got {theta:g}")


def observed_count(c: Curve, theta: float) -> int:
    """How many points the first θ of a curve holds: θ of its step span, counted as EarlyCurve
    counts steps (the first step is one ``unit`` in: epochs 1..50 at θ 0.3 observe 1..15; steps
    101..130 observe 101..109, not 2 points), at least 2 (or all the curve has, if fewer)."""
    import numpy as np

    from spotwise.predictors._curvestages import step_unit

    first, unit = float(c.steps[0]), step_unit(c.steps)
    span = float(c.steps[-1]) - first + unit
    n = max(2, int(np.sum(c.steps - first + unit <= theta * span + 1e-9)))
    return min(n, len(c.steps))


def finite_curve(c: Curve) -> Curve:
    """``c`` without its points whose value is NaN or infinite (a step not measured)."""
    import numpy as np

    ok = np.isfinite(c.values)
    if ok.all():
        return c
    return Curve(
        c.curve_id,
        c.steps[ok],
        c.values[ok],
        None if c.lr is None else c.lr[ok],
        None if c.seconds is None else c.seconds[ok],
    )


def observed(c: Curve, theta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, float]:
    """The first θ of a curve (:func:`observed_count` points) and its last step."""
    n = observed_count(c, theta)
    return c.steps[:n], c.values[:n], None if c.lr is None else c.lr[:n], float(c.steps[-1])


def evaluate_curves(
    curves: dict[str, Curve],
    theta: float = 0.3,
    methods: tuple[str, ...] = ("earlycurve", "last-value", "mean-last-k", "power-law"),
    direction: str | None = "max",
    options: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per method: mae, spearman, top10_recall_at_25, band_coverage, fit_ms_per_curve.
    ``direction`` None: inferred from the curves."""
    import numpy as np
    from scipy.stats import spearmanr

    from spotwise.predictors.earlycurve import check_direction, get_curve_predictor

    check_theta(theta)
    direction = check_direction(direction) or dataset_direction(curves, "")
    curves = {cid: finite_curve(c) for cid, c in curves.items()}
    ids = [cid for cid, c in curves.items() if len(c.values) >= 3]
    if len(ids) < 2:
        raise SpecError("need at least 2 curves with ≥ 3 finite points to evaluate")
    truth = np.array([curves[c].values[-1] for c in ids])
    sign = 1.0 if direction == "max" else -1.0
    rows = []
    for name in methods:
        opts = dict((options or {}).get(name, {}))
        if name in ("earlycurve", "power-law"):
            opts.setdefault("direction", direction)
        pred = get_curve_predictor(name, **opts)
        finals, lo, hi = np.empty(len(ids)), np.empty(len(ids)), np.empty(len(ids))
        t0 = time.perf_counter()
        for i, cid in enumerate(ids):
            k, v, lr, total = observed(curves[cid], theta)
            with np.errstate(over="ignore", invalid="ignore"):  # values near 1e300: no warning
                finals[i], lo[i], hi[i] = pred.predict_final(k, v, total, lr)
        ms = (time.perf_counter() - t0) * 1000 / len(ids)
        rows.append(
            {
                "name": name,
                "theta": theta,
                "n_curves": len(ids),
                "direction": direction,
                "mae": float(np.mean(np.abs(finals - truth))),
                "spearman": float(spearmanr(finals, truth).statistic),
                "top10_recall_at_25": top_recall(sign * finals, sign * truth),
                "band_coverage": float(np.mean((truth >= lo) & (truth <= hi))),
                "fit_ms_per_curve": round(ms, 3),
                "nan_predictions": int(np.sum(~np.isfinite(finals))),
            }
        )
    return rows


def uneven_ends(curves: dict[str, Curve]) -> str | None:
    """A warning when the curves (those :func:`evaluate_curves` scores) do not all end at the
    same step: each is scored on its own last value, so a curve stopped early is ranked by a
    final from another point of training than the others'. None when they all end together."""
    import numpy as np

    ends = {cid: float(c.steps[-1]) for cid, c in curves.items() if len(c.values) >= 3}
    if len(set(ends.values())) <= 1:
        return None
    last = np.array(list(ends.values()))
    steps, counts = np.unique(last, return_counts=True)
    common = float(steps[np.argmax(counts)])  # the most common last step (the earliest on a tie)
    early = [cid for cid, e in ends.items() if e < common]
    late = [cid for cid, e in ends.items() if e > common]
    parts = []
    for which, said in ((early, "earlier"), (late, "later")):
        if which:
            ex, s = which[0], "s" * (len(which) == 1)
            parts.append(f"{len(which)} end{s} {said} (e.g. curve {ex!r} at step {ends[ex]:g})")
    return (
        f"of {len(ends)} curves, {' and '.join(parts)} than step {common:g}, where most end: "
        "each is scored on its own last value, so finals from different points of training "
        "are ranked together; keep curves of one length in the file"
    )


def top_recall(pred: np.ndarray, truth: np.ndarray, top: float = 0.10, keep: float = 0.25) -> float:
    """Share of the true top ``top`` (highest ``truth``) among the predicted top ``keep``.

    Ties at the true threshold count as top (so the set may exceed ``top`` when values repeat).
    """
    import numpy as np

    n = len(truth)
    thr = np.sort(truth)[::-1][max(int(np.ceil(top * n)) - 1, 0)]
    best = truth >= thr
    kept = np.zeros(n, dtype=bool)
    kept[np.argsort(-pred, kind="stable")[: max(int(np.ceil(keep * n)), 1)]] = True
    return float((best & kept).sum() / best.sum())
