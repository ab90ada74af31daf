"""Tiny hand-made worlds for the planner tests: traces built by hand, curves with a known best.

A module of its own, not ``conftest``: several test folders have a ``conftest.py``, and
``from conftest import …`` picked up whichever was loaded last (``pytest tests/planner
tests/store`` failed to collect)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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


def curve(
    cid: str, finals: float, steps: int = 12, step_s: float = 600.0, start: float = 0.5
) -> RecordedCurve:
    """A saturating curve that rises from ``start`` towards ``finals`` (always ordered by final)."""
    values = tuple(start + (finals - start) * (1 - 0.6 ** (k + 1)) for k in range(steps))
    return RecordedCurve(cid, values, (step_s,) * steps)


def last_value_predictor(
    steps: list[int], values: list[float], total: int, direction: str = "maximize"
) -> tuple[float, float, float]:
    """A stand-in for EarlyCurve: the curve's last value, with a narrow band."""
    v = values[-1]
    return v, v - 0.01, v + 0.01
