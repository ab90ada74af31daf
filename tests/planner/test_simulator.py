"""The simulation engine against answers worked out by hand."""

from __future__ import annotations

import pytest
from plan_helpers import GAP, T0, curve, make_traces

from spotwise.planner.policy import get_policy
from spotwise.planner.simulator import Engine, SimSettings
from spotwise.providers.billing import rule_for
from spotwise.providers.replay import ReplayMarket

SETTINGS = SimSettings(
    parallel=1, time_scale=1.0, restart_overhead_s=120.0, checkpoint_s=10.0, checkpoint_every=5
)


def test_revoked_in_the_first_hour_is_free_and_loses_work_since_the_checkpoint() -> None:
    # zone z ($0.8) goes at tick 11 (3300 s) and never comes back; on-demand costs $3/h
    n = 60
    tr = make_traces({"z": [1] * 11 + [0] * (n - 11)}, {"z": 0.8})
    one = [curve("only", 0.9, steps=12, step_s=600.0)]
    r = Engine(
        get_policy("spot-greedy"), ReplayMarket(tr), rule_for("aws"), one, SETTINGS, T0
    ).run()
    # spot: ready at 120, steps 1-5 end at 720..3120, checkpoint written 3130, step 6 runs
    # into the revocation at 3300 (notice at 3180 is too late for step 6): 180 s lost, and the
    # 3300 s life is free (revoked by AWS inside the first hour).
    # on-demand from 3300: ready 3420, steps 6..12 (4200 s) + checkpoint after step 10 → 7630
    assert r.revocations == 1
    assert r.lost_hours == pytest.approx(180 / 3600)
    assert r.cost_usd == pytest.approx((7630 - 3300) * 3.0 / 3600)
    assert r.makespan_hours == pytest.approx(7630 / 3600)
    assert r.spot_hours == pytest.approx(3300 / 3600)
    assert r.completed == 1 and r.regret == 0.0


def test_a_notice_long_enough_saves_the_work() -> None:
    # steps of 60 s: the 120 s notice lets the trial finish its step and checkpoint
    n = 60
    tr = make_traces({"z": [1] * 11 + [0] * (n - 11)}, {"z": 0.8})
    one = [curve("only", 0.9, steps=100, step_s=60.0)]
    r = Engine(
        get_policy("spot-greedy"), ReplayMarket(tr), rule_for("aws"), one, SETTINGS, T0
    ).run()
    assert r.revocations == 1
    # notice at 3180: the step in flight ends by 3240 at the latest, its checkpoint by 3250;
    # what is lost is the dead time between the exit and the revocation at most
    assert r.lost_hours == 0.0
    assert r.completed == 1


def test_on_demand_cost_is_the_work_at_the_on_demand_price() -> None:
    tr = make_traces({"z": [1] * 100}, {"z": 0.8})
    cs = [curve(str(i), 0.5 + i / 10, steps=12, step_s=600.0) for i in range(3)]
    r = Engine(get_policy("on-demand"), ReplayMarket(tr), rule_for("aws"), cs, SETTINGS, T0).run()
    per_trial = 120 + 12 * 600 + 2 * 10  # boot, steps, checkpoints after steps 5 and 10
    assert r.cost_usd == pytest.approx(3 * per_trial * 3.0 / 3600)
    assert r.spot_hours == 0.0 and r.revocations == 0
    assert r.returned == "2" and r.regret == 0.0


def test_run_past_the_trace_is_reported_unfinished() -> None:
    tr = make_traces({"z": [0] * 20}, {"z": 0.8})  # no spot at all, 100 min of trace
    cs = [curve("x", 0.9, steps=12, step_s=600.0)]
    r = Engine(get_policy("greedy"), ReplayMarket(tr), rule_for("aws"), cs, SETTINGS, T0).run()
    assert r.unfinished and r.completed == 0
    assert r.makespan_hours * 3600 <= 20 * GAP
