from __future__ import annotations

import numpy as np
import pytest
from pred_helpers import synthetic_traces

from spotwise.errors import PredictorError
from spotwise.predictors.reveval import evaluate, evaluate_transfer, scores


def test_scores_math() -> None:
    y = np.array([0, 0, 1, 1])
    perfect = scores(y, np.array([0.0, 0.0, 1.0, 1.0]))
    assert perfect["auc"] == 1.0 and perfect["brier"] < 1e-9 and perfect["log_loss"] < 1e-4
    half = scores(y, np.full(4, 0.5))
    assert half["auc"] == 0.5 and half["brier"] == pytest.approx(0.25)
    assert half["log_loss"] == pytest.approx(np.log(2))
    assert sum(b["count"] for b in half["reliability"]) == 4
    rng = np.random.default_rng(0)
    p = rng.random(20000)
    calibrated = scores(rng.random(20000) < p, p)
    assert calibrated["ece"] < 0.02


def test_evaluate_rows_on_same_test_ticks() -> None:
    ts = synthetic_traces()
    res = evaluate(ts, 3600.0, names=("base-rate", "persistence", "logistic"))
    rows = res["rows"]
    assert [r["name"] for r in rows] == ["base-rate", "persistence", "logistic"]
    assert len({(r["n_test"], r["positives"]) for r in rows}) == 1
    assert res["split"]["train_ticks"][1] == res["split"]["test_ticks"][0]
    for r in rows:
        assert 0 <= r["brier"] <= 1 and r["log_loss"] > 0 and 0 <= r["auc"] <= 1


def test_transfer() -> None:
    res = evaluate_transfer(
        synthetic_traces(seed=1), synthetic_traces(seed=2), 3600.0, names=("base-rate", "logistic")
    )
    assert {r["name"] for r in res["rows"]} == {"base-rate", "logistic"}
    # zone names match here, but the logistic model is zone-agnostic and should rank well
    assert res["rows"][1]["auc"] > 0.6


def test_a_model_that_cannot_be_fitted_on_the_part_is_a_predictor_error() -> None:
    # 10.4 days of ticks; the LSTM keeps the last 20 % of its 7.3-day training part (1.5 days)
    # to validate on, shorter than a 2-day horizon: one PredictorError, not a bare ValueError
    with pytest.raises(PredictorError) as info:
        evaluate(synthetic_traces(), 2 * 86400.0, names=("lstm",))
    assert str(info.value) == "lstm: too few labelled ticks for a train/validation split"
