"""Determinism under a seed; budget and deadline never exceeded in simulation."""

from __future__ import annotations

import numpy as np
import pytest
from plan_helpers import curve, last_value_predictor, make_traces

from spotwise.planner.policy import Policy, get_policy
from spotwise.planner.sim_curves import CurvePool
from spotwise.planner.sim_suite import Risk, Suite, run_suite
from spotwise.planner.simulator import SimSettings
from spotwise.traces import TraceSet

POLICIES = (
    "on-demand",
    "spot-greedy",
    "asha",
    "spottune",
    "spotwise",
    "greedy",
    "uniform-progress",
)


def factory(name: str) -> Policy:
    if name in ("spottune", "spotwise"):
        return get_policy(name, predictor=last_value_predictor)
    return get_policy(name)


@pytest.fixture
def flaky() -> TraceSet:
    """Four days, three zones that come and go at random (seeded), different prices."""
    rng = np.random.default_rng(11)
    n = 12 * 24 * 4
    avail = {}
    for z, p_up in (("a", 0.5), ("b", 0.8), ("c", 0.95)):
        state, row = 1, []
        for _ in range(n):
            if rng.uniform() < (0.03 if state else 0.1):
                state = 1 - state
            row.append(int(state and rng.uniform() < p_up + 0.05))
        avail[z] = row
    return make_traces(avail, {"a": 0.7, "b": 0.9, "c": 1.1})


@pytest.fixture
def pool() -> CurvePool:
    rng = np.random.default_rng(5)
    cs = tuple(
        curve(f"c{i}", float(f), steps=20, step_s=float(s))
        for i, (f, s) in enumerate(
            zip(rng.uniform(0.55, 0.95, 30), rng.uniform(200, 900, 30), strict=True)
        )
    )
    return CurvePool(cs, "acc", "maximize", "hand-made")


def suite(**kw: object) -> Suite:
    settings = SimSettings(
        parallel=3, time_scale=1.0, restart_overhead_s=120.0, checkpoint_s=10.0, **kw
    )  # type: ignore[arg-type]
    return Suite(
        POLICIES, trials=12, seeds=2, seed=4, settings=settings, start_from=0.0, window_s=86400.0
    )


def risk_of(tr: TraceSet) -> Risk:
    p = np.where(tr.available, 0.2, 1.0)
    return Risk(p, 3600.0, "hand-made")


def test_same_seed_same_numbers_other_seed_other_draws(flaky: TraceSet, pool: CurvePool) -> None:
    a = run_suite(flaky, pool, suite(), risk_of(flaky), policy_factory=factory)
    b = run_suite(flaky, pool, suite(), risk_of(flaky), policy_factory=factory)
    for r in (a, b):
        r.pop("wall_seconds")
    assert a == b
    c = run_suite(
        flaky,
        pool,
        Suite(POLICIES, 12, 2, 99, settings=suite().settings, start_from=0.0, window_s=86400.0),
        risk_of(flaky),
        policy_factory=factory,
    )
    assert c["starts"] != a["starts"]


def test_every_policy_sees_the_same_trials_and_start(flaky: TraceSet, pool: CurvePool) -> None:
    out = run_suite(flaky, pool, suite(), risk_of(flaky), policy_factory=factory)
    for seed in out["seeds"]:
        best = {r["best_final"] for rs in out["runs"].values() for r in rs if r["seed"] == seed}
        start = {r["start"] for rs in out["runs"].values() for r in rs if r["seed"] == seed}
        assert len(best) == 1 and len(start) == 1
    assert out["policies"]["on-demand"]["cost_vs_on_demand"] == pytest.approx(1.0)


@pytest.mark.parametrize("budget", [3.0, 8.0, 20.0])
def test_budget_is_never_exceeded(flaky: TraceSet, pool: CurvePool, budget: float) -> None:
    out = run_suite(flaky, pool, suite(max_cost_usd=budget), risk_of(flaky), policy_factory=factory)
    for name, rs in out["runs"].items():
        for r in rs:
            assert r["cost_usd"] <= budget + 1e-9, (name, r["cost_usd"])
            assert not r["budget_exceeded"] and not r["unfinished"], name


@pytest.mark.parametrize("hours", [2.0, 5.0, 12.0])
def test_deadline_is_never_exceeded(flaky: TraceSet, pool: CurvePool, hours: float) -> None:
    out = run_suite(
        flaky, pool, suite(deadline_s=hours * 3600), risk_of(flaky), policy_factory=factory
    )
    for name, rs in out["runs"].items():
        for r in rs:
            assert r["makespan_hours"] <= hours + 1e-9, (name, r["makespan_hours"])
            assert not r["deadline_missed"] and not r["unfinished"], name
