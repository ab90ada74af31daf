"""Small synthetic traces and curves for the predictor tests (no shared data needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spotwise.traces import TraceSet

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
SHIPPED_TRACE = REPO / "spotwise" / "data" / "skynomad-v100-2023"
LCBENCH_SUBSET = REPO / "spotwise" / "data" / "lcbench-subset"
T0 = 1_700_000_000.0


def synthetic_traces(n: int = 3000, gap: float = 300.0, seed: int = 0, zones: int = 4) -> TraceSet:
    """Zone 0 always available; the others flap with zone-specific revocation rates."""
    rng = np.random.default_rng(seed)
    avail = np.ones((zones, n), dtype=bool)
    for z in range(1, zones):
        up, p_down, p_up = True, 0.01 * z, 0.1
        for t in range(n):
            avail[z, t] = up
            up = (rng.random() > p_down) if up else (rng.random() < p_up)
    price = 0.9 + 0.1 * rng.random((zones, 1)) + np.zeros((zones, n))
    return TraceSet(
        zones=[f"us-test-1{chr(97 + z)}" for z in range(zones)],
        times=T0 + gap * np.arange(n),
        available=avail,
        price=price,
        instance_type="p3.2xlarge",
        on_demand_price=3.06,
        gap_seconds=gap,
        source="synthetic",
    )


def constant_traces(n: int = 3000, gap: float = 300.0, zones: int = 2) -> TraceSet:
    return TraceSet(
        zones=[f"eu-const-1{chr(97 + z)}" for z in range(zones)],
        times=T0 + gap * np.arange(n),
        available=np.ones((zones, n), dtype=bool),
        price=np.full((zones, n), 1.0),
        instance_type="p3.2xlarge",
        on_demand_price=3.06,
        gap_seconds=gap,
        source="constant",
    )
