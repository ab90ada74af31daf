"""``--json`` is strict JSON: a NaN or infinite number is written as ``null``.

Python's ``json.dumps`` writes a bare ``NaN``/``Infinity`` that jq, JavaScript's JSON.parse and
Python's own strict mode refuse (``predictor eval`` printed ``"auc": NaN`` when the test part
had no revocation)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from spotwise.cli.output import emit, json_text


def _refuse_constants(name: str) -> None:
    raise ValueError(f"not JSON: {name}")


def test_non_finite_numbers_become_null_at_any_depth() -> None:
    result = {
        "auc": math.nan,
        "rows": [{"brier": math.inf}, {"brier": 0.25}],
        "pair": (-math.inf, 1),
        "numpy": np.float32("nan"),
        "ok": np.float64(0.5),
    }
    text = json_text(result)
    assert json.loads(text, parse_constant=_refuse_constants) == {
        "auc": None,
        "rows": [{"brier": None}, {"brier": 0.25}],
        "pair": [None, 1],
        "numpy": None,
        "ok": 0.5,
    }


def test_emit_prints_strict_json(capsys: pytest.CaptureFixture[str]) -> None:
    emit({"auc": math.nan, "n_test": 3}, True, lambda r: None)
    out = capsys.readouterr().out
    assert json.loads(out, parse_constant=_refuse_constants) == {"auc": None, "n_test": 3}
