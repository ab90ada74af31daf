"""A replay that reads the shipped forecast inside the ticks it was fitted on says so (review-y
F3): the LSTM was trained on the first 70 % of the shipped SkyNomad trace, and `tune` replays
it from hour 360 in the examples, so its placements there had seen those revocations."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotwise.planner.backend import in_sample_note
from spotwise.predictors._provenance import SHIPPED_RECORD
from spotwise.providers.replay import resolve_trace
from spotwise.traces import TraceSet, load_traces


@pytest.fixture(scope="module")
def shipped() -> TraceSet:
    return load_traces(resolve_trace("builtin:skynomad-v100-2023"))


def test_a_replay_inside_the_training_ticks_is_warned(shipped: TraceSet) -> None:
    start = float(shipped.times[0]) + 360 * 3600.0
    note = in_sample_note(dict(SHIPPED_RECORD), shipped, start)
    assert note.startswith(
        "warning: the revocation forecast was fitted on this trace up to 2023-03-19 19:01 UTC"
    )
    assert "set providers.0.replay.start above 765 (hours)" in note


def test_a_replay_after_them_or_on_another_trace_is_not(shipped: TraceSet) -> None:
    after = float(SHIPPED_RECORD["until"]) + 1.0
    assert in_sample_note(dict(SHIPPED_RECORD), shipped, after) == ""
    other = shipped.slice(1, shipped.n_ticks)  # other ticks: the record is not found there
    assert in_sample_note(dict(SHIPPED_RECORD), other, float(other.times[0])) == ""
    assert in_sample_note(None, shipped, float(shipped.times[0])) == ""


# ---- replay.forecast: choose the forecast, or fit one on the trace before the start ---------
def test_a_model_fitted_before_the_start_is_used_and_sees_nothing_after_it(
    shipped: TraceSet,
) -> None:
    from spotwise.planner.backend import replay_risk
    from spotwise.providers.base import Market, Offer

    start = float(shipped.times[0]) + 200 * 3600.0
    risk = replay_risk(shipped, start, "base-rate")
    assert risk is not None
    offers = [Offer("aws", z[:-1], z, "p3.2xlarge", Market.SPOT, 1.0, 3.0) for z in shipped.zones]
    p = risk(offers, start)
    assert set(p) == {o.key for o in offers} and all(0.0 <= v <= 1.0 for v in p.values())
    # the same model fitted on the trace cut at the start: what came after cannot move it
    cut = shipped.slice(0, shipped.tick_at(start) + 1)
    again = replay_risk(cut, start, "base-rate")
    assert again is not None and again(offers, start) == p


def test_none_means_no_forecast_and_a_typo_names_the_field(shipped: TraceSet) -> None:
    from spotwise.errors import SpecError
    from spotwise.planner.backend import replay_risk

    assert replay_risk(shipped, float(shipped.times[0]), "none") is None
    with pytest.raises(SpecError, match=r"^spec field 'providers.0.replay.forecast': unknown "):
        replay_risk(shipped, float(shipped.times[0]), "base_rate")


def test_a_model_with_no_trace_before_the_start_is_refused(shipped: TraceSet) -> None:
    from spotwise.errors import SpecError
    from spotwise.planner.backend import replay_risk

    with pytest.raises(SpecError, match=r"logistic cannot be fitted on the 1 trace ticks"):
        replay_risk(shipped, float(shipped.times[0]), "logistic")


def test_a_mistyped_forecast_is_refused_when_the_spec_is_read_and_when_the_market_opens(
    tmp_path: Path,
) -> None:
    """Read from a file: refused at once, naming the field, whatever the policy (spot-greedy
    reads no forecast: the typo would surface only on a later job). A stored spec reads back as
    recorded, and opening its market refuses it."""
    import json

    from spotwise.errors import SpecError
    from spotwise.planner.backend import open_backend
    from spotwise.spec import load_stored_spec, parse_spec

    data = {
        "name": "f",
        "command": ["python", "train.py"],
        "metric": {"name": "acc"},
        "steps": 2,
        "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
        "providers": [{"name": "local", "replay": {"forecast": "logistc"}}],
    }
    with pytest.raises(
        SpecError,
        match=r"^spec: spec field 'providers.0.replay.forecast': unknown 'logistc' "
        r"\(did you mean 'logistic'\?\); valid: pretrained, none, lstm, base-rate, persistence, "
        r"logistic$",
    ):
        parse_spec(data)
    spec = load_stored_spec(json.dumps(data))
    assert spec.providers[0].replay is not None
    assert spec.providers[0].replay.forecast == "logistc"
    with pytest.raises(SpecError, match=r"unknown 'logistc' \(did you mean 'logistic'\?\)"):
        open_backend(spec, tmp_path, tmp_path / "runs")  # spot-greedy: no forecast used
    for name in ("pretrained", "none", "lstm", "base-rate", "persistence", "logistic"):
        data["providers"] = [{"name": "local", "replay": {"forecast": name}}]
        replay = parse_spec(data).providers[0].replay
        assert replay is not None and replay.forecast == name


def test_a_forecast_of_another_horizon_is_read_within_the_hour(
    shipped: TraceSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The policies read every risk within the hour (OfferView.horizon_s = 3600): a model of a
    30-minute horizon's p was passed on as an hour's (review-y F7)."""
    import numpy as np

    from spotwise.planner import backend
    from spotwise.predictors import revocation
    from spotwise.providers.base import Market, Offer

    class HalfHour:
        horizon_s = 1800.0
        trained_on = None

        def predict_proba(self, traces: TraceSet, tick: int) -> np.ndarray:
            return np.full(len(traces.zones), 0.19)

    monkeypatch.setattr(revocation, "load_pretrained", HalfHour)
    risk = backend.replay_risk(shipped, float(shipped.times[0]), "pretrained")
    assert risk is not None
    offers = [Offer("aws", z[:-1], z, "p3.2xlarge", Market.SPOT, 1.0, 3.0) for z in shipped.zones]
    p = risk(offers, float(shipped.times[0]))
    assert list(p.values()) == [pytest.approx(1.0 - 0.81**2)] * len(offers)  # 2 × 30 min at 19 %


def test_the_forecast_runs_on_one_torch_thread_and_puts_the_pool_back(
    shipped: TraceSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LSTM's forward pass ran on torch's default pool (a thread per core) inside the
    orchestrator's loop, competing with the trials for the cores (review-ab)."""
    import numpy as np
    import torch

    from spotwise.planner import backend
    from spotwise.predictors import revocation
    from spotwise.providers.base import Market, Offer

    seen: list[int] = []

    class Hour:
        horizon_s = 3600.0
        trained_on = None

        def predict_proba(self, traces: TraceSet, tick: int) -> np.ndarray:
            seen.append(torch.get_num_threads())
            return np.full(len(traces.zones), 0.1)

    monkeypatch.setattr(revocation, "load_pretrained", Hour)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        risk = backend.replay_risk(shipped, float(shipped.times[0]), "pretrained")
        assert risk is not None
        offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 1.0, 3.0)
        assert risk([offer], float(shipped.times[0])) == {offer.key: pytest.approx(0.1)}
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
