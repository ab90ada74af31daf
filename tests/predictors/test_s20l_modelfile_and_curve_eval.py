"""Model files' numbers are checked on load (review-am F5); ``curve eval``'s θ is a share of each
curve's own step span (F10), curves ending at different steps are warned about (F11), and
``--metric`` refuses the columns that are not metrics; values near 1e300 fit (F12)."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pred_helpers import synthetic_traces

from spotwise.errors import SpecError
from spotwise.predictors import service
from spotwise.predictors.curve_service import curve_eval
from spotwise.predictors.curves import Curve, evaluate_curves, observed_count, resolve_metric
from spotwise.predictors.earlycurve import fit_curve
from spotwise.predictors.revocation import PRETRAINED, get_revocation_model

# ---- F5: a damaged model file is one line naming the field, never 0.5 everywhere or exit 70 --


def _edited(tmp_path: Path, src: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    import torch

    doc = torch.load(str(src), map_location="cpu", weights_only=True)
    edit(doc)
    out = tmp_path / f"edited-{len(list(tmp_path.iterdir()))}.pt"
    torch.save(doc, str(out))
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("models")
    ts = synthetic_traces(n=400)
    out = {}
    for name in ("base-rate", "persistence", "logistic"):
        m = get_revocation_model(name)
        m.fit(ts, 3600.0)
        m.save(folder / f"{name}.pt")
        out[name] = folder / f"{name}.pt"
    shutil.copy(PRETRAINED, folder / "lstm.pt")
    out["lstm"] = folder / "lstm.pt"
    return out


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        target = doc["config"]
        *path, last = key.split(".")
        for k in path:
            target = target[k]
        target[last] = value(target[last]) if callable(value) else value

    return edit


def _first_rate(doc: dict[str, Any], value: float) -> None:
    rates = doc["config"]["rates"]
    rates[next(iter(rates))] = value


def _nan_weight(doc: dict[str, Any]) -> None:
    t = next(iter(doc["tensors"].values()))
    t.view(-1)[0] = float("nan")


BAD: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("base-rate", lambda d: _first_rate(d, math.nan), "is nan, not in [0, 1]; retrain it"),
    ("base-rate", lambda d: _first_rate(d, 7.0), "is 7, not in [0, 1]; retrain it"),
    ("base-rate", _set("pooled", -3.0), "pooled is -3, not in [0, 1]; retrain it"),
    ("persistence", _set("y", lambda y: [math.nan] * len(y)), "y[0] is nan, not in [0, 1]"),
    ("persistence", _set("y", lambda y: y[:1]), "x has "),
    ("persistence", _set("x", lambda x: x[::-1]), "x is not in increasing order; retrain it"),
    ("persistence", _set("y", lambda y: ["a"] * len(y)), "a malformed persistence model"),
    ("logistic", _set("std", lambda s: [0.0] * len(s)), "a feature's std is 0 or less"),
    ("lstm", _set("platt", [math.nan, 0.0]), "platt[0] is nan, not a finite number; retrain it"),
    ("lstm", _set("platt", [-1.0, 0.0]), "platt[0] is -1, not > 0; retrain it"),
    ("lstm", _set("platt", [1.0]), "platt has 1 numbers, not 2 (a, b); retrain it"),
    ("lstm", _set("seq_len", -5), "seq_len is -5, not a whole number ≥ 1; retrain it"),
    ("lstm", _set("members", 0), "members is 0, not a whole number ≥ 1; retrain it"),
    ("lstm", _set("norm.stat_mean", lambda v: [math.nan, *v[1:]]), "norm.stat_mean[0] is nan"),
    ("lstm", _set("norm.seq_std", lambda v: [0.0, *v[1:]]), "norm.seq_std[0] is 0, not > 0"),
    ("lstm", _set("norm.seq_mean", lambda v: v[1:]), "norm.seq_mean has 8 entries, not 9"),
    ("lstm", _nan_weight, "holds NaN or infinite numbers; retrain it"),
]


@pytest.mark.parametrize(("name", "edit", "reason"), BAD, ids=[f"{n}-{r}" for n, _, r in BAD])
def test_a_model_file_with_bad_numbers_is_refused_naming_the_field(
    tmp_path: Path,
    trained: dict[str, Path],
    name: str,
    edit: Callable[[dict[str, Any]], None],
    reason: str,
) -> None:
    path = _edited(tmp_path, trained[name], edit)
    with pytest.raises(SpecError) as info:
        service.load_model_file(path)
    msg = str(info.value)
    assert msg.startswith(f"--model {path}: not a spotwise model file ("), msg
    assert name in msg and reason in msg and "\n" not in msg


def test_the_untouched_files_still_load(trained: dict[str, Path]) -> None:
    for path in trained.values():
        assert service.load_model_file(path).fitted


# ---- F10: θ is a share of the curve's own step span ---------------------------------------


def _curves(first: float, n: int = 30, k: int = 8, unit: float = 1.0) -> dict[str, Curve]:
    rng = np.random.default_rng(3)
    out = {}
    x = np.arange(1, n + 1, dtype=float)
    for i in range(k):
        values = 0.9 - (0.5 + 0.05 * i) / x**0.7 + 0.003 * rng.standard_normal(n)
        out[str(i)] = Curve(str(i), first + unit * (x - 1), values)
    return out


def test_theta_counts_the_curves_own_steps_wherever_they_start() -> None:
    c1, c101, cneg = (_curves(f)["0"] for f in (1.0, 101.0, -14.0))
    cfrac = _curves(0.01, unit=0.01)["0"]
    for theta, n in ((0.1, 3), (0.2, 6), (0.3, 9), (0.5, 15)):
        assert [observed_count(c, theta) for c in (c1, c101, cneg, cfrac)] == [n] * 4
    # epochs 1..50 (LCBench): steps ≤ θ·50, as before and as the docs say (15 of 50 at 0.3)
    lc = Curve("x", np.arange(1.0, 51.0), np.zeros(50))
    assert [observed_count(lc, t) for t in (0.1, 0.2, 0.25, 0.3, 0.5)] == [5, 10, 12, 15, 25]


def test_curves_logged_after_a_warm_up_score_as_the_same_curves_from_step_1() -> None:
    at1 = evaluate_curves(_curves(1.0), 0.3, ("earlycurve", "last-value"))
    at101 = evaluate_curves(_curves(101.0), 0.3, ("earlycurve", "last-value"))
    for a, b in zip(at1, at101, strict=True):
        assert a["mae"] == pytest.approx(b["mae"], rel=1e-9, abs=1e-12)
        assert a["spearman"] == pytest.approx(b["spearman"], rel=1e-9)


def _write(path: Path, curves: dict[str, Curve]) -> Path:
    rows = ["curve_id,step,value"]
    for cid, c in curves.items():
        rows += [f"{cid},{s:g},{float(v)!r}" for s, v in zip(c.steps, c.values, strict=True)]
    path.write_text("\n".join(rows) + "\n")
    return path


# ---- F11: curves ending at different steps are warned about -------------------------------


def test_curve_eval_warns_when_curves_end_at_different_steps(tmp_path: Path) -> None:
    curves = _curves(1.0)
    c = curves["3"]
    curves["3"] = Curve("3", c.steps[:8], c.values[:8])
    res = curve_eval(_write(tmp_path / "ragged.csv", curves), "value", 0.3, ("last-value",))
    assert res["warnings"] == [
        "of 8 curves, 1 ends earlier (e.g. curve '3' at step 8) than step 30, where most end: "
        "each is scored on its own last value, so finals from different points of training are "
        "ranked together; keep curves of one length in the file"
    ]
    assert res["observed_points"] == {"min": 2, "max": 9}
    even = curve_eval(_write(tmp_path / "even.csv", _curves(1.0)), "value", 0.3, ("last-value",))
    assert even["warnings"] == [] and even["observed_points"] == {"min": 9, "max": 9}


# ---- F12: --metric refuses what is not a metric; huge values fit --------------------------


@pytest.mark.parametrize(
    ("metric", "what"),
    [
        ("time", "the cumulative seconds (LCBench's time)"),
        ("epoch", "LCBench's step"),
        ("lr", "the learning rate"),
        ("trial", "LCBench's curve id"),
    ],
)
def test_metric_refuses_the_columns_that_are_not_metrics(metric: str, what: str) -> None:
    with pytest.raises(SpecError) as info:
        resolve_metric("builtin:lcbench-subset", metric)
    msg = str(info.value)
    assert msg.startswith(f"--metric {metric}: {what}, not a metric; valid: "), msg
    assert "val_accuracy" in msg and f" {metric}," not in msg


def test_values_near_1e300_fit_instead_of_an_internal_error(tmp_path: Path) -> None:
    curves = {cid: Curve(cid, c.steps, c.values * 1e299) for cid, c in _curves(1.0).items()}
    fit = fit_curve(curves["0"].steps[:9], curves["0"].values[:9], None, 30.0, direction="max")
    assert math.isfinite(fit.final) and fit.band[0] <= fit.final <= fit.band[1]
    res = curve_eval(_write(tmp_path / "huge.csv", curves), "value", 0.3, ("earlycurve",))
    assert math.isfinite(res["rows"][0]["mae"]) and res["rows"][0]["n_curves"] == 8
