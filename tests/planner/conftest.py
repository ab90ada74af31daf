"""Tiny hand-made worlds for the planner tests: traces built by hand, curves with a known best."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spotwise.planner.sim_curves import RecordedCurve
from spotwise.traces import TraceSet

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
T0 = 1_700_000_000.0
GAP = 300.0


def make_traces(
    available: dict[str, list[int]], price: dict[str, float], od: float = 3.0
) -> TraceSet:
    zones = list(available)
    n = len(next(iter(available.values())))
    return TraceSet(
        zones=zones,
        times=T0 + GAP * np.arange(n),
        available=np.array([available[z] for z in zones], dtype=bool),
        price=np.array([[price[z]] * n for z in zones], dtype=float),
        instance_type="p3.2xlarge",
        on_demand_price=od,
        gap_seconds=GAP,
        source="hand-made",
    )


@pytest.fixture
def two_zones() -> TraceSet:
    """Zone ``cheap`` ($0.8) is taken 2 h in and back 1 h later; ``steady`` ($1.0) never goes."""
    n = 12 * 24 * 3  # three days of 5-minute ticks
    cheap = [1] * n
    for i in range(24, 36):
        cheap[i] = 0
    return make_traces({"cheap": cheap, "steady": [1] * n}, {"cheap": 0.8, "steady": 1.0})


def curve(
    cid: str, finals: float, steps: int = 12, step_s: float = 600.0, start: float = 0.5
) -> RecordedCurve:
    """A saturating curve that rises from ``start`` towards ``finals`` (always ordered by final)."""
    values = tuple(start + (finals - start) * (1 - 0.6 ** (k + 1)) for k in range(steps))
    return RecordedCurve(cid, values, (step_s,) * steps)


@pytest.fixture
def six_curves() -> list[RecordedCurve]:
    """Six trials whose order never changes along the curve; ``best`` ends at 0.95."""
    finals = {"a": 0.70, "b": 0.80, "best": 0.95, "c": 0.60, "d": 0.75, "e": 0.65}
    return [curve(k, v) for k, v in finals.items()]


def last_value_predictor(
    steps: list[int], values: list[float], total: int, direction: str = "maximize"
) -> tuple[float, float, float]:
    """A stand-in for EarlyCurve: the curve's last value, with a narrow band."""
    v = values[-1]
    return v, v - 0.01, v + 0.01
