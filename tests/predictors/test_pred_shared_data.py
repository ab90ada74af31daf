"""On the real sets in ../shared/data (skipped cleanly when it is absent)."""

from __future__ import annotations

import numpy as np
import pytest
from pred_helpers import SHARED

from spotwise.predictors.curves import evaluate_curves, load_curves
from spotwise.predictors.reveval import evaluate
from spotwise.predictors.revocation import load_pretrained
from spotwise.traces import load_traces

pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent"),
]
CBL = SHARED / "spot" / "cant-be-late-availability" / "availability" / "1-node"


def test_both_formats_load_the_same_availability() -> None:
    sky = load_traces(SHARED / "spot" / "skynomad-v100-2023")
    cbl = load_traces(CBL / "aws-02-15-2023")
    assert sky.available.shape == cbl.available.shape == (9, 20158)
    assert np.array_equal(sky.available, cbl.available)  # the same trace, zones in the same order


def test_pretrained_on_cbl_2022_unseen_period_and_types() -> None:
    ts = load_traces(CBL / "aws-10-26-2022")  # 600 s ticks, K80 + V100, no prices
    p = load_pretrained().predict_series(ts, np.arange(1000, 1500))
    assert p.shape == (len(ts.zones), 500) and np.all((p >= 0) & (p <= 1))


def test_baselines_on_skynomad() -> None:
    ts = load_traces(SHARED / "spot" / "skynomad-v100-2023")
    rows = {r["name"]: r for r in evaluate(ts, 3600.0, names=("base-rate", "logistic"))["rows"]}
    assert rows["logistic"]["auc"] > rows["base-rate"]["auc"] > 0.6


def test_earlycurve_beats_last_value_on_lcbench() -> None:
    curves = load_curves(SHARED / "curves" / "lcbench", "val_accuracy")
    rows = {r["name"]: r for r in evaluate_curves(curves, 0.3, ("earlycurve", "last-value"))}
    assert rows["earlycurve"]["mae"] < rows["last-value"]["mae"]
