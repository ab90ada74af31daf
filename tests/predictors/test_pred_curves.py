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
    resolve_metric,
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


def _csv(tmp_path: Path, header: str, rows: list[str], name: str = "c.csv") -> Path:
    p = tmp_path / name
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


def test_default_metric_works_on_the_shipped_data_and_long_csvs(tmp_path: Path) -> None:
    assert resolve_metric(LCBENCH_SUBSET) == "val_accuracy"
    assert len(load_curves(LCBENCH_SUBSET)) == 100  # the default: no --metric needed
    both = _csv(tmp_path, "curve_id,step,value,acc,lr", ["a,1,0.5,1,0.1"])
    assert resolve_metric(both) == "value"
    only = _csv(
        tmp_path, "curve_id,step,loss,lr,seconds", ["a,1,0.5,0.1,2", "a,2,0.4,0.1,4"], "l.csv"
    )
    assert resolve_metric(only) == "loss" and load_curves(only)["a"].values.tolist() == [0.5, 0.4]
    two = _csv(tmp_path, "curve_id,step,loss,acc", ["a,1,0.5,1"], "t.csv")
    with pytest.raises(SpecError) as e:
        resolve_metric(two)
    assert str(e.value) == (
        "--metric: t.csv has several metric columns and none is called 'value'; "
        "pass one of: loss, acc"
    )
    assert resolve_metric(two, "acc") == "acc"


def test_errors_name_the_path_as_the_user_gave_it(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as e:
        resolve_metric("/nope.csv", None, "FILE")
    assert str(e.value) == (
        "FILE: /nope.csv does not exist; pass a long CSV or the LCBench folder "
        "(builtin:lcbench-subset: the shipped one)"
    )
    with pytest.raises(SpecError, match=r"^--curves: /nope.csv does not exist"):
        load_curves("/nope.csv")
    bad = _csv(tmp_path, "curve_id,step,value", ["a,1,0.5", "a,2,oops"])
    with pytest.raises(SpecError) as e:
        load_curves(bad, label="FILE")
    assert str(e.value) == "FILE: c.csv line 3: value 'oops' is not a number"
    odd = _csv(tmp_path, "id,when,value", ["a,1,0.5"], "o.csv")
    with pytest.raises(SpecError, match=r"^--curves: .*o.csv needs columns curve_id, step"):
        load_curves(odd)


def test_evaluate_checks_and_infers_the_direction() -> None:
    c = load_curves(LCBENCH_SUBSET)
    with pytest.raises(SpecError) as e:
        evaluate_curves(c, 0.3, ("last-value",), direction="up")
    assert str(e.value) == "--direction must be min or max (or leave it out to infer it), got 'up'"
    assert evaluate_curves(c, 0.3, ("last-value",), direction=None)[0]["direction"] == "max"
    with pytest.raises(SpecError) as e:
        evaluate_curves(c, 1.5)
    assert str(e.value) == "--theta must be in (0, 1), got 1.5"
