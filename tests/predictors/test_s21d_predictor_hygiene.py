"""s21 D: a revocation model refuses a trace whose numbers would make a feature NaN or infinite
(one line naming the field), a NaN probability is an error and never 0.5, and a model file's
sizes (seq_len, hidden, head, members, horizon_s) are bounded and must match its weights before
a net is allocated."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pred_helpers import synthetic_traces

from spotwise.errors import PredictorError, SpecError
from spotwise.predictors import revocation as rev
from spotwise.predictors import service
from spotwise.traces import TraceSet

TICKS = np.arange(2500, 2600)


@pytest.fixture(scope="module")
def lstm() -> rev.RevocationModel:
    return rev.load_pretrained()


@pytest.fixture(scope="module")
def base_rate() -> rev.RevocationModel:
    m = rev.get_revocation_model("base-rate")
    m.fit(synthetic_traces(n=400), 3600.0)
    return m


def _changed(ts: TraceSet, **changes: Any) -> TraceSet:
    return dataclasses.replace(ts, **changes)


def _with(a: np.ndarray, where: Any, value: float) -> np.ndarray:
    out = np.array(a, dtype=float)
    out[where] = value
    return out


# ---- 2: the trace's numbers are checked at the model's boundary ------------------------------


def _bad_traces() -> list[tuple[str, TraceSet, str]]:
    syn = synthetic_traces()
    return [
        (
            "nan time",
            _changed(syn, times=_with(syn.times, 2590, np.nan)),
            "trace times[2590] is nan",
        ),
        (
            "time going back",
            _changed(syn, times=_with(syn.times, 2590, syn.times[2580])),
            f"trace times[2590] is {syn.times[2580]:.0f}, not after times[2589]",
        ),
        ("nan gap", _changed(syn, gap_seconds=float("nan")), "trace gap_seconds is nan"),
        ("negative gap", _changed(syn, gap_seconds=-300.0), "trace gap_seconds is -300"),
        (
            "infinite price",
            _changed(syn, price=_with(syn.price, (2, 2550), np.inf)),
            "trace price of zone us-test-1c at tick 2550 is inf: a price must be > 0 and finite",
        ),
        (
            "zero price",
            _changed(syn, price=_with(syn.price, (1, 2000), 0.0)),
            "trace price of zone us-test-1b at tick 2000 is 0: a price must be > 0",
        ),
    ]


BAD = _bad_traces()


@pytest.mark.parametrize(("why", "ts", "msg"), BAD, ids=[b[0] for b in BAD])
def test_a_trace_with_bad_numbers_is_refused_naming_the_field(
    lstm: rev.RevocationModel, why: str, ts: TraceSet, msg: str
) -> None:
    with pytest.raises(PredictorError) as info:
        lstm.predict_series(ts, TICKS)
    text = str(info.value)
    assert msg in text and "\n" not in text, text
    assert "the trace readers (spotwise.traces.load_traces) refuse such a trace" in text


def test_an_unknown_price_is_not_refused_and_a_bad_one_outside_the_history_read_is_not_looked_at(
    lstm: rev.RevocationModel,
) -> None:
    syn = synthetic_traces()
    unknown = _changed(syn, price=_with(syn.price, (0, slice(2000, 2100)), np.nan))
    assert np.isfinite(lstm.predict_series(unknown, TICKS)).all()
    later = _changed(syn, price=_with(syn.price, (0, 2999), -1.0))  # after the last tick asked
    before = lstm.predict_series(syn, TICKS)
    assert (lstm.predict_series(later, TICKS) == before).all()


def test_fit_refuses_a_trace_with_bad_numbers_too() -> None:
    syn = synthetic_traces(n=400)
    m = rev.get_revocation_model("base-rate")
    with pytest.raises(PredictorError, match=r"^trace times\[7\] is nan: "):
        m.fit(_changed(syn, times=_with(syn.times, 7, np.nan)), 3600.0)
    with pytest.raises(PredictorError, match=r"^trace price of zone us-test-1a at tick 399 is inf"):
        m.fit(_changed(syn, price=_with(syn.price, (0, 399), np.inf)), 3600.0)


def test_a_nan_probability_is_an_error_never_one_half(base_rate: Any) -> None:
    syn = synthetic_traces()
    rates, pooled = base_rate.rates, base_rate.pooled
    base_rate.rates, base_rate.pooled = {}, float("nan")  # as a damaged model would answer
    try:
        with pytest.raises(PredictorError) as info:
            base_rate.predict_series(syn, TICKS)
    finally:
        base_rate.rates, base_rate.pooled = rates, pooled
    text = str(info.value)
    assert text.startswith("base-rate: the probability for zone us-test-1a at tick 2500 is nan, ")
    assert "\n" not in text
    assert np.isfinite(base_rate.predict_series(syn, TICKS)).all()


# ---- 3: a model file's sizes are bounded and must match its weights ---------------------------


def _edited(tmp_path: Path, src: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    import torch

    doc = torch.load(str(src), map_location="cpu", weights_only=True)
    edit(doc)
    out = tmp_path / "edited.pt"
    torch.save(doc, str(out))
    return out


def _config(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["config"][key] = value

    return edit


def _horizon(doc: dict[str, Any]) -> None:
    doc["horizon_s"] = 1e30


SIZES: list[tuple[Callable[[dict[str, Any]], None], str]] = [
    (_config("seq_len", 10**9), "lstm: seq_len is 1000000000, more than the 512 this spotwise"),
    (_config("hidden", 600), "lstm: hidden is 600, more than the 512 this spotwise loads"),
    (_config("head", 10**7), "lstm: head is 10000000, more than the 512 this spotwise loads"),
    (_config("members", 1000), "lstm: members is 1000, more than the 16 this spotwise loads"),
    (
        _config("hidden", 16),
        "lstm: weight members.0.lstm.weight_ih_l0 is shaped (128, 9), not (64, 9) as hidden 16",
    ),
    (
        _config("members", 4),
        "lstm: its weights are not those of 4 member(s) (first odd one: members.3.",
    ),
    (_horizon, "lstm: its horizon_s 1e+30 is more than 100 years (3.15576e+09 s); retrain it"),
]


@pytest.mark.parametrize(("edit", "reason"), SIZES, ids=[r.split(",")[0] for _, r in SIZES])
def test_a_model_file_with_absurd_sizes_is_refused_before_allocating(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], reason: str
) -> None:
    path = _edited(tmp_path, rev.PRETRAINED, edit)
    with pytest.raises(SpecError) as info:
        service.load_model_file(path)
    text = str(info.value)
    assert text.startswith(f"--model {path}: not a spotwise model file ("), text
    assert reason in text and "\n" not in text, text


def test_the_bounds_are_well_above_what_train_writes() -> None:
    from spotwise.predictors.lstm import _MOST, LSTMModel

    m = LSTMModel()
    assert (m.seq_len, m.hidden, m.head, m.members) == (32, 32, 32, 3)  # predictor train's
    assert _MOST == {"seq_len": 512, "hidden": 512, "head": 512, "members": 16}
    assert rev.MAX_HORIZON_S == 3_155_760_000.0  # 100 years of 365.25 days
