"""A replay that reads the shipped forecast inside the ticks it was fitted on says so (review-y
F3): the LSTM was trained on the first 70 % of the shipped SkyNomad trace, and `tune` replays
it from hour 360 in the examples, so its placements there had seen those revocations."""

from __future__ import annotations

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
