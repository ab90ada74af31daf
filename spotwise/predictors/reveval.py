"""Measure revocation models on the later part of a trace: AUC, Brier, log loss, reliability.

Protocol (:func:`evaluate`): split the ticks chronologically (:func:`chrono_split`; default the
first 70 % for training, the last 30 % for testing; never shuffled across time), fit every model
on the training part only (the LSTM carves its own validation slice from the end of it), and score
all of them on exactly the same test ticks: (zone, tick) pairs where spot is available and the
whole horizon lies inside the trace. Test-time features use the history before each tick, which
may reach back into the training period (as it would in production), never after it.

Transfer (:func:`evaluate_transfer`): fit on all of one trace set, score on the test part of
another (same test ticks as the in-domain run on that set).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from spotwise.predictors.revocation import RevocationModel
    from spotwise.traces import TraceSet


@dataclass
class EvalRow:
    """One model's scores on the test ticks."""

    name: str
    auc: float
    brier: float
    log_loss: float
    n_test: int
    positives: int
    ece: float
    fit_seconds: float
    predict_ms_per_1k: float
    reliability: list[dict[str, float]] = field(default_factory=list)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def scores(y: np.ndarray, p: np.ndarray, bins: int = 10) -> dict[str, Any]:
    """AUC, Brier, log loss, expected calibration error and reliability bins of ``p`` vs ``y``."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    y = np.asarray(y, dtype=float)
    p = np.clip(np.asarray(p, dtype=float), 1e-6, 1 - 1e-6)
    auc = float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else float("nan")
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(p, edges) - 1, 0, bins - 1)
    rel, ece = [], 0.0
    for b in range(bins):
        m = which == b
        if m.any():
            pm, om = float(p[m].mean()), float(y[m].mean())
            rel.append(
                {
                    "lo": float(edges[b]),
                    "hi": float(edges[b + 1]),
                    "mean_p": pm,
                    "observed": om,
                    "count": int(m.sum()),
                }
            )
            ece += m.mean() * abs(pm - om)
    return {
        "auc": auc,
        "brier": float(np.mean((p - y) ** 2)),
        "log_loss": float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))),
        "ece": float(ece),
        "reliability": rel,
    }


def test_ticks(ts: TraceSet, horizon_s: float, test: tuple[int, int]) -> tuple[Any, Any, Any]:
    from spotwise.predictors._revfeatures import samples

    return samples(ts, horizon_s, test)


def score_model(
    model: RevocationModel,
    ts: TraceSet,
    horizon_s: float,
    test: tuple[int, int],
    fit_seconds: float = 0.0,
    note: str = "",
) -> EvalRow:
    """Score a fitted model on the labelled ticks of ``test`` in ``ts``."""
    import numpy as np

    zi, ti, y = test_ticks(ts, horizon_s, test)
    t0 = time.perf_counter()
    ticks = np.arange(test[0], test[1])
    p = model.predict_series(ts, ticks)[zi, ti - test[0]]
    ms = (time.perf_counter() - t0) * 1000 / max(len(ticks) * len(ts.zones) / 1000, 1e-9)
    s = scores(y, p)
    return EvalRow(
        name=model.name,
        auc=s["auc"],
        brier=s["brier"],
        log_loss=s["log_loss"],
        n_test=len(y),
        positives=int(y.sum()),
        ece=s["ece"],
        fit_seconds=round(fit_seconds, 2),
        predict_ms_per_1k=round(ms, 2),
        reliability=s["reliability"],
        note=note,
    )


def _fit(name: str, ts: TraceSet, horizon_s: float, options: dict[str, Any]) -> tuple[Any, float]:
    from spotwise.errors import PredictorError
    from spotwise.predictors.revocation import get_revocation_model

    model = get_revocation_model(name, **options.get(name, {}))
    t0 = time.perf_counter()
    try:
        model.fit(ts, horizon_s)
    except ValueError as e:  # e.g. the LSTM's "too few labelled ticks" on a short part
        raise PredictorError(f"{name}: {e}") from e
    return model, time.perf_counter() - t0


def evaluate(
    ts: TraceSet,
    horizon_s: float = 3600.0,
    *,
    names: tuple[str, ...] = ("base-rate", "persistence", "logistic", "lstm"),
    model: RevocationModel | None = None,
    test_fraction: float = 0.3,
    options: dict[str, dict[str, Any]] | None = None,
    model_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fit ``names`` on the earlier part of ``ts`` and score them on the later part.

    With ``model`` (a fitted model, e.g. loaded from a file), it is scored as given instead of
    fitting a fresh model of the same name; ``model_info`` is added to its row (what it was
    trained on, :func:`spotwise.predictors._provenance.check_model_ticks`).
    """
    from spotwise.predictors._revfeatures import chrono_split

    split = chrono_split(ts, horizon_s, test_fraction=test_fraction)
    # Everything before the test part; labels there need their whole horizon inside the slice,
    # so none looks at a test tick.
    train = ts.slice(0, split.test[0])
    rows = []
    for name in names:
        if model is not None and model.name == name:
            continue
        m, secs = _fit(name, train, horizon_s, options or {})
        rows.append(score_model(m, ts, horizon_s, split.test, secs).to_dict())
    if model is not None:
        info = model_info or {}
        checked = info.get("overlap_checked", True)
        note = "given model file" + ("" if checked else "; overlap not checked")
        row = score_model(model, ts, horizon_s, split.test, note=note)
        rows.append({**row.to_dict(), **info})
    return {
        "dataset": ts.source,
        "zones": list(ts.zones),
        "horizon_s": horizon_s,
        "gap_seconds": ts.gap_seconds,
        "split": {
            "train_ticks": [0, split.test[0]],
            "test_ticks": list(split.test),
            "test_fraction": test_fraction,
            "n_ticks": ts.n_ticks,
        },
        "rows": rows,
    }


def evaluate_transfer(
    train_ts: TraceSet,
    test_ts: TraceSet,
    horizon_s: float = 3600.0,
    *,
    names: tuple[str, ...] = ("base-rate", "persistence", "logistic", "lstm"),
    test_fraction: float = 0.3,
    options: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Fit on all of ``train_ts``; score on the test part of ``test_ts``."""
    from spotwise.predictors._revfeatures import chrono_split

    split = chrono_split(test_ts, horizon_s, test_fraction=test_fraction)
    rows = []
    for name in names:
        m, secs = _fit(name, train_ts, horizon_s, options or {})
        rows.append(score_model(m, test_ts, horizon_s, split.test, secs))
    return {
        "train_dataset": train_ts.source,
        "dataset": test_ts.source,
        "zones": list(test_ts.zones),
        "horizon_s": horizon_s,
        "split": {
            "test_ticks": list(split.test),
            "test_fraction": test_fraction,
            "n_ticks": test_ts.n_ticks,
        },
        "rows": [r.to_dict() for r in rows],
    }
