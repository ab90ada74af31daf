"""Fixtures of the planner tests (the helpers they use are in ``plan_helpers``)."""

from __future__ import annotations

import pytest
from plan_helpers import curve, make_traces

from spotwise.planner.sim_curves import RecordedCurve
from spotwise.traces import TraceSet


@pytest.fixture
def two_zones() -> TraceSet:
    """Zone ``cheap`` ($0.8) is taken 2 h in and back 1 h later; ``steady`` ($1.0) never goes."""
    n = 12 * 24 * 3  # three days of 5-minute ticks
    cheap = [1] * n
    for i in range(24, 36):
        cheap[i] = 0
    return make_traces({"cheap": cheap, "steady": [1] * n}, {"cheap": 0.8, "steady": 1.0})


@pytest.fixture
def six_curves() -> list[RecordedCurve]:
    """Six trials whose order never changes along the curve; ``best`` ends at 0.95."""
    finals = {"a": 0.70, "b": 0.80, "best": 0.95, "c": 0.60, "d": 0.75, "e": 0.65}
    return [curve(k, v) for k, v in finals.items()]
