"""Every policy on a tiny hand-made trace with a known best answer."""

from __future__ import annotations

import numpy as np
import pytest
from plan_helpers import T0, last_value_predictor

from spotwise.errors import SpecError
from spotwise.planner.policies.asha import rungs
from spotwise.planner.policies.odds import p_beat
from spotwise.planner.policy import get_policy, policy_names
from spotwise.planner.simulator import Engine, RunResult, SimSettings
from spotwise.providers.billing import rule_for
from spotwise.providers.replay import ReplayMarket
from spotwise.traces import TraceSet

SETTINGS = SimSettings(parallel=2, time_scale=1.0, restart_overhead_s=120.0, checkpoint_s=10.0)
ALL = ("on-demand", "spot-greedy", "asha", "spottune", "spotwise", "greedy", "uniform-progress")


def options(name: str) -> dict[str, object]:
    if name == "spottune":
        return {"predictor": last_value_predictor, "keep_top": 1}
    if name == "spotwise":
        return {"predictor": last_value_predictor}
    return {}


def run(
    name: str, traces: TraceSet, curves: list, risk: np.ndarray | None = None, **kw: object
) -> RunResult:
    settings = SimSettings(**{**SETTINGS.__dict__, **kw})  # type: ignore[arg-type]
    fn = (lambda i: risk[:, i]) if risk is not None else None
    return Engine(
        get_policy(name, **options(name)),
        ReplayMarket(traces),
        rule_for("aws"),
        curves,
        settings,
        T0,
        risk=fn,
    ).run()


def test_registry_lists_every_policy_and_rejects_unknown_names() -> None:
    assert set(ALL) <= set(policy_names())
    with pytest.raises(SpecError, match=r"valid: .*spotwise"):
        get_policy("spot-gredy")


@pytest.mark.parametrize("name", ALL)
def test_every_policy_returns_the_best_trial(
    name: str, two_zones: TraceSet, six_curves: list
) -> None:
    r = run(name, two_zones, six_curves)
    assert r.returned == "best" and r.regret == 0.0
    assert not (r.budget_exceeded or r.deadline_missed or r.unfinished)


def test_reference_costs_and_where_each_policy_runs(two_zones: TraceSet, six_curves: list) -> None:
    od = run("on-demand", two_zones, six_curves)
    greedy = run("spot-greedy", two_zones, six_curves)
    per_trial = 120 + 12 * 600 + 2 * 10
    assert od.cost_usd == pytest.approx(6 * per_trial * 3.0 / 3600)
    assert od.spot_hours == 0.0
    assert greedy.on_demand_hours == 0.0 and greedy.revocations >= 1  # the cheap zone goes at 2 h
    assert greedy.cost_usd < 0.4 * od.cost_usd
    assert greedy.early_stopped == 0 and greedy.completed == 6


def test_early_stoppers_cost_less_than_training_everything(
    two_zones: TraceSet, six_curves: list
) -> None:
    greedy = run("spot-greedy", two_zones, six_curves)
    for name in ("asha", "spottune", "spotwise"):
        r = run(name, two_zones, six_curves)
        assert r.early_stopped >= 3, name
        assert r.cost_usd < greedy.cost_usd, name
        assert r.steps_run < greedy.steps_run, name


def test_asha_rungs_and_promotions(two_zones: TraceSet, six_curves: list) -> None:
    assert rungs(12, 1, 3) == [1, 3, 9]
    assert rungs(50, 1, 3) == [1, 3, 9, 27]
    r = run("asha", two_zones, six_curves, parallel=1)
    # one at a time, ordered a .70, b .80, best .95, c .60, d .75, e .65: c, d and e are worse
    # than the top third at rung 1 when they arrive; a, b and best each lead when they arrive
    assert r.stopped_by == {"asha rung 1": 3}
    assert r.completed == 3


def test_spotwise_prices_the_risk_spottune_ignores(two_zones: TraceSet, six_curves: list) -> None:
    # the cheap zone is (correctly) forecast to go soon; the steady one is safe
    p = np.zeros((2, two_zones.n_ticks))
    p[0, :] = 0.95
    p[1, :] = 0.02
    ours = run("spotwise", two_zones, six_curves, risk=p)
    theirs = run("spottune", two_zones, six_curves, risk=p)
    assert ours.regret == theirs.regret == 0.0
    # SpotTune discounts the risky zone by (1 − p) and lands there; spotwise also prices the
    # restart and the lost work, and stops hopeless trials earlier
    assert ours.cost_usd < theirs.cost_usd
    assert ours.steps_run < theirs.steps_run


def test_p_beat() -> None:
    assert p_beat(0.9, 0.85, 0.95, 0.9, "maximize") == pytest.approx(0.5)
    assert p_beat(0.5, 0.45, 0.55, 0.9, "maximize") < 1e-6
    assert p_beat(0.5, 0.45, 0.55, 0.9, "minimize") > 1 - 1e-6
    assert p_beat(0.8, 0.8, 0.8, 0.81, "maximize", noise=0.05) > 0.3  # noise widens a thin band


@pytest.mark.parametrize("bad", [{"theta": 0.0}, {"theta": 1.0}, {"keep_top": 0}])
def test_spottune_validates(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="got"):
        get_policy("spottune", predictor=last_value_predictor, **bad)


def test_spotwise_validates() -> None:
    with pytest.raises(ValueError, match="epsilon"):
        get_policy("spotwise", predictor=last_value_predictor, epsilon=0.7)
