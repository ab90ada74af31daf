from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pred_helpers import LCBENCH_SUBSET

from spotwise.errors import SpecError
from spotwise.predictors.curves import (
    dataset_direction,
    evaluate_curves,
    load_curves,
    metric_direction,
    top_recall,
)


def test_long_csv_with_lr_and_seconds(tmp_path: Path) -> None:
    p = tmp_path / "c.csv"
    rows = ["curve_id,step,value,lr,seconds,acc"]
    for cid in ("a", "b"):
        for s in range(1, 11):
            rows.append(f"{cid},{s},{1 / s},{0.1},{s * 2.0},{s}")
    p.write_text("\n".join(rows))
    c = load_curves(p)
    assert set(c) == {"a", "b"} and c["a"].lr is not None and c["a"].seconds is not None
    assert load_curves(p, metric="acc")["b"].values[-1] == 10
    with pytest.raises(SpecError, match="did you mean 'value'"):
        load_curves(p, metric="valeu")
    assert dataset_direction(c, "value") == "min"


def test_lcbench_subset_loads_epochs_1_to_50() -> None:
    c = load_curves(LCBENCH_SUBSET, "val_accuracy")
    assert len(c) == 100
    one = c["0"]
    assert one.steps[0] == 1 and one.steps[-1] == 50 and len(one.steps) == 50
    assert one.lr is not None and one.seconds is not None


def test_metric_direction() -> None:
    assert metric_direction("val_accuracy") == "max"
    assert metric_direction("val_cross_entropy") == "min"
    assert metric_direction("loss") == "min"
    assert metric_direction("value") is None


def test_top_recall() -> None:
    truth = np.arange(100.0)
    assert top_recall(truth, truth) == 1.0
    assert top_recall(-truth, truth) == 0.0
    assert top_recall(np.where(truth >= 95, 1000.0, truth), truth) == 1.0


def test_evaluate_on_subset() -> None:
    c = load_curves(LCBENCH_SUBSET, "val_accuracy")
    rows = evaluate_curves(c, 0.3, direction="max")
    assert [r["name"] for r in rows] == ["earlycurve", "last-value", "mean-last-k", "power-law"]
    for r in rows:
        assert r["nan_predictions"] == 0 and 0 <= r["top10_recall_at_25"] <= 1
        assert np.isfinite(r["mae"]) and -1 <= r["spearman"] <= 1
    with pytest.raises(SpecError, match="theta"):
        evaluate_curves(c, 1.5)
