"""``simulate deadline``: the same seed gives the same JSON to the bit whatever ``--workers``.

Each worker ran every n-th (zone, start) pair and the runs were concatenated chunk by chunk,
so the means summed the same numbers in an order that depended on the worker count: the 16th
digit moved between ``--workers 1`` and ``--workers 2`` (review-am F13).
"""

from __future__ import annotations

import json

import numpy as np
from plan_helpers import T0

from spotwise.planner.deadline_sim import DeadlineJob, run_deadline_suite, sample_starts
from spotwise.traces import TraceSet

H = 3600.0
GAP = 360.0


def traces() -> TraceSet:
    """Two zones of 40 h, spot off now and then, a price drawn per tick (sums that round)."""
    rng = np.random.default_rng(7)
    n = 400
    return TraceSet(
        zones=["a", "b"],
        times=T0 + GAP * np.arange(n),
        available=rng.random((2, n)) > 0.15,
        price=rng.uniform(0.7, 1.3, size=(2, n)),
        instance_type="p3.2xlarge",
        on_demand_price=3.06,
        gap_seconds=GAP,
        source="hand-made",
    )


def doc(workers: int) -> str:
    job = DeadlineJob(job_s=4 * H, deadline_s=6 * H, restart_s=0.2 * H)
    out = run_deadline_suite(
        traces(), job, ["greedy", "on-demand"], starts=23, seed=3, start_from=0.0, workers=workers
    )
    del out["wall_seconds"]
    return json.dumps(out, sort_keys=True)


def test_the_runs_are_summarised_in_the_order_of_the_start_pairs() -> None:
    one = json.loads(doc(1))
    assert one["policies"]["greedy"]["runs"] == 46  # 23 starts in each of 2 zones
    assert len(sample_starts(traces(), DeadlineJob(4 * H, 6 * H, 0.2 * H), 23, 3, 0.0)) == 46


def test_one_two_and_three_workers_give_the_same_json_to_the_bit() -> None:
    one = doc(1)
    assert doc(2) == one
    assert doc(3) == one
