"""Budget admission before any step has been timed.

Until a trial has timed a step, every ``seconds_per_step`` is a 60 s guess. With a budget and
``parallel`` > 1 every trial used to be admitted on that guess; when real steps were slower the
budget guard later stopped all of them and none completed. Now, with a budget and no speed
measured, one trial runs until its steps are timed; the others are then admitted on
projections at the measured speed, and when a slower trial makes the running trials'
projections overrun the cap, the one furthest from done is stopped so the rest can finish.
"""

from __future__ import annotations

from typing import Any

import pytest
from plan_helpers import T0, curve, make_traces

from spotwise.planner.policies._common import over_budget, shed_for_budget
from spotwise.planner.policy import (
    Launch,
    OfferView,
    Phase,
    PlannerView,
    StopEarly,
    Tick,
    TrialView,
    get_policy,
)
from spotwise.planner.runstate import TrialRun, build_view
from spotwise.planner.simulator import Engine, SimSettings
from spotwise.providers.base import Market, Offer
from spotwise.providers.billing import rule_for
from spotwise.providers.replay import ReplayMarket

ALL = ("on-demand", "spot-greedy", "asha", "spottune", "spotwise", "greedy", "uniform-progress")
NOW = 1_000_000.0
SPS = 600.0  # the trials' measured seconds per step
STEPS = 10
# spot and on-demand at $1/h: every policy's pick costs the same to launch
SPOT = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 1.0, 1.0)
OD = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.ON_DEMAND, 1.0, 1.0)
# one launch: (60 s start-up + 10 steps x 600 s) at $1/h
ONE = (60.0 + STEPS * SPS) / 3600.0


def trial(n: int, phase: Phase = Phase.QUEUED, **kw: Any) -> TrialView:
    kw.setdefault("steps_total", STEPS)
    kw.setdefault("seconds_per_step", SPS)
    return TrialView(trial_id=f"t{n}", number=n, phase=phase, **kw)


def view(trials: list[TrialView], **kw: Any) -> PlannerView:
    kw.setdefault("parallel", 4)
    kw.setdefault("trials_total", len(trials))
    kw.setdefault("restart_overhead_s", 60.0)
    return PlannerView(now=NOW, offers=(OfferView(SPOT), OfferView(OD)), trials=tuple(trials), **kw)


def launches(name: str, v: PlannerView) -> list[str]:
    return [a.trial_id for a in get_policy(name).decide(v, Tick(NOW)) if isinstance(a, Launch)]


QUEUED = [trial(n) for n in range(4)]


# ---- the pure policy ------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_no_speed_measured_and_a_budget_admits_one_trial(name: str) -> None:
    v = view(QUEUED, max_cost_usd=100.0, speed_measured=False)
    assert launches(name, v) == ["t0"]


@pytest.mark.parametrize("name", ALL)
def test_the_others_wait_while_the_first_has_timed_no_step(name: str) -> None:
    booting = trial(0, Phase.RUNNING, offer_key=OD.key, launched_at=NOW - 30.0)
    v = view([booting, *QUEUED[1:]], max_cost_usd=100.0, speed_measured=False)
    assert launches(name, v) == []


@pytest.mark.parametrize("name", ALL)
def test_a_measured_speed_admits_as_many_as_the_projection_allows(name: str) -> None:
    v = view(QUEUED, max_cost_usd=2.5 * ONE, speed_measured=True)
    assert launches(name, v) == ["t0", "t1"]  # the third would project past the cap: it waits


@pytest.mark.parametrize("name", ALL)
def test_without_a_budget_nothing_waits_for_a_speed(name: str) -> None:
    v = view(QUEUED, max_cost_usd=None, speed_measured=False)
    assert launches(name, v) == ["t0", "t1", "t2", "t3"]


def test_a_relaunch_takes_the_one_slot_before_a_new_trial() -> None:
    # the admitted trial lost its instance before its first step: it is relaunched first
    lost = trial(0, Phase.WAITING)
    v = view([lost, *QUEUED[1:]], max_cost_usd=100.0, speed_measured=False)
    assert launches("on-demand", v) == ["t0"]


def test_running_projections_over_the_cap_stop_the_trial_furthest_from_done() -> None:
    run = {"phase": Phase.RUNNING, "offer_key": OD.key, "launched_at": NOW - 3600.0}
    near, far, mid = trial(0, step=9, **run), trial(1, step=2, **run), trial(2, step=5, **run)
    # spent $3, still to go: 1 + 8 + 5 steps of 600 s at $1/h = $2.33 → $5.33
    v = view([near, far, mid], max_cost_usd=4.5, spent_usd=3.0, speed_measured=True)
    assert shed_for_budget(v) == [StopEarly("t1", "budget", None)]  # 8 steps to go: $1.33
    # the guards stop it before anything else, for every policy
    for name in ALL:
        assert get_policy(name).decide(v, Tick(NOW)) == [StopEarly("t1", "budget", None)], name
    # within the cap, or a guessed speed, or one trial alone: nothing is shed
    assert shed_for_budget(view([near, far, mid], max_cost_usd=5.5, spent_usd=3.0)) == []
    unmeasured = view([near, far, mid], max_cost_usd=4.5, spent_usd=3.0, speed_measured=False)
    assert shed_for_budget(unmeasured) == []
    assert shed_for_budget(view([far], max_cost_usd=3.5, spent_usd=3.0)) == []


def test_the_budget_guard_stops_the_trials_furthest_from_done_first() -> None:
    """It stopped every trial alive once the next tick's burn reached the cap, a trial one step
    from its end included; now only as many as the cap needs, furthest from done first."""
    run = {"phase": Phase.RUNNING, "offer_key": OD.key, "launched_at": NOW - 3600.0}
    near, far, queued = trial(0, step=9, **run), trial(1, step=2, **run), trial(2)
    # two instances at $1/h burn $0.067 over the next tick and minute (120 s); one, $0.033
    v = view([near, far, queued], max_cost_usd=3.05, spent_usd=3.0, tick_s=60.0)
    assert over_budget(v) == [StopEarly("t1", "budget", None), StopEarly("t2", "budget", None)]
    # at the cap itself everything still running is stopped
    v = view([near, far, queued], max_cost_usd=3.0, spent_usd=3.0, tick_s=60.0)
    assert {a.trial_id for a in over_budget(v)} == {"t0", "t1", "t2"}


def test_a_trial_that_made_its_last_step_is_not_stopped_by_the_budget() -> None:
    run = {"phase": Phase.RUNNING, "offer_key": OD.key, "launched_at": NOW - 3600.0}
    done, near = trial(0, step=STEPS, **run), trial(1, step=9, **run)
    # its instance is ending: only the other one's burn counts ($3.033 < $3.04)
    assert over_budget(view([done, near], max_cost_usd=3.04, spent_usd=3.0, tick_s=60.0)) == []
    v = view([done, near], max_cost_usd=3.02, spent_usd=3.0, tick_s=60.0)
    assert over_budget(v) == [StopEarly("t1", "budget", None)]


def test_a_guessed_speed_never_stops_the_first_trial() -> None:
    """On the 60 s guess a $0.30 budget stopped every trial of a job whose steps were fast
    (each really cost $0.10): nothing ran, and the job failed at $0. Until a step is timed the
    first trial is launched when its start-up fits; only then can the projection stop one."""
    v = view(QUEUED, max_cost_usd=0.3, speed_measured=False)  # each projected at $1.68
    assert launches("on-demand", v) == ["t0"]
    spent = view(QUEUED, max_cost_usd=0.3, spent_usd=0.29, speed_measured=False)
    actions = get_policy("on-demand").decide(spent, Tick(NOW))  # $0.29 + $0.017 start-up
    assert actions[:1] == [StopEarly("t0", "budget", None)]
    measured = view(QUEUED, max_cost_usd=0.3, speed_measured=True)
    assert launches("on-demand", measured) == []  # timed: the projection decides


def test_shedding_waits_for_more_than_a_tick_of_drift_a_started_trial_and_no_notice() -> None:
    """A trial admitted at a projection just under the cap was shed 107 s later, at 0 steps,
    when the projection had drifted $0.0003 over; another while the others were leaving under
    a notice (their refunds brought the spend down one pass later)."""
    run = {"phase": Phase.RUNNING, "offer_key": OD.key, "launched_at": NOW - 3600.0}
    near, far = trial(0, step=9, **run), trial(1, step=2, **run)
    # spent $3, to go 1 + 8 steps = $1.50 → $4.50; two instances burn $0.067 in a tick + 60 s
    drift = view([near, far], max_cost_usd=4.45, spent_usd=3.0, tick_s=60.0)
    assert shed_for_budget(drift) == []
    over = view([near, far], max_cost_usd=4.40, spent_usd=3.0, tick_s=60.0)
    assert shed_for_budget(over) == [StopEarly("t1", "budget", None)]
    # the furthest from done is still starting up: the next one is shed instead
    booting = trial(1, step=0, phase=Phase.RUNNING, offer_key=OD.key, launched_at=NOW - 30.0)
    mid = trial(2, step=5, **run)
    v = view([near, booting, mid], max_cost_usd=4.8, spent_usd=3.0, tick_s=60.0)
    assert shed_for_budget(v) == [StopEarly("t2", "budget", None)]
    noticed = trial(0, step=9, notice_deadline=NOW + 120.0, **run)
    assert shed_for_budget(view([noticed, far], max_cost_usd=4.40, spent_usd=3.0)) == []


def test_a_waiting_trial_a_launch_now_finishes_in_time_is_not_stopped_by_the_deadline() -> None:
    """With 93 s of slack the guard stopped a job waiting for spot before the Safety Net could
    put it on on-demand, and the job missed a deadline it could have made."""
    from spotwise.planner.policies._common import past_deadline

    waiting = trial(0, Phase.WAITING, step=9)  # 1 step of 600 s + 60 s start-up to go
    v = view([waiting], deadline=NOW + 700.0, tick_s=800.0, started_at=NOW - 36000.0)
    assert past_deadline(v) == []
    late = view([waiting], deadline=NOW + 600.0, tick_s=800.0, started_at=NOW - 36000.0)
    assert past_deadline(late) == [StopEarly("t0", "deadline", None)]


# ---- the orchestrator's view ----------------------------------------------------------


def runs(n: int, steps: int = STEPS) -> list[TrialRun]:
    return [TrialRun(f"t{i}", i, {}, steps, 5) for i in range(n)]


def orchestrator_view(trials: list[TrialRun], max_cost: float | None = 100.0) -> PlannerView:
    return build_view(
        NOW,
        [SPOT, OD],
        {},
        trials,
        direction="maximize",
        parallel=4,
        trials_total=len(trials),
        spent_usd=0.0,
        max_cost_usd=max_cost,
        started_at=NOW,
        deadline=None,
        rules={"aws": rule_for("aws")},
    )


def test_the_orchestrators_view_says_whether_a_step_was_timed() -> None:
    trials = runs(4)
    v = orchestrator_view(trials)
    assert v.speed_measured is False
    assert launches("spot-greedy", v) == ["t0"]
    trials[0].restart_overhead_s = 90.0  # a first report: its start-up, not yet a step's time
    assert orchestrator_view(trials).speed_measured is False
    trials[0].seconds_per_step = SPS  # a second report: a step is timed
    v = orchestrator_view(trials)
    assert v.speed_measured is True
    assert v.trial("t3").seconds_per_step == SPS  # the others are projected at that speed
    assert launches("spot-greedy", v) == ["t0", "t1", "t2", "t3"]


def test_single_step_trials_count_their_first_report_as_timed() -> None:
    trials = runs(3, steps=1)
    assert orchestrator_view(trials).speed_measured is False
    trials[0].restart_overhead_s = 400.0  # start-up and the one step
    assert orchestrator_view(trials).speed_measured is True


# ---- the simulator --------------------------------------------------------------------


def test_a_budget_with_slow_steps_still_completes_a_trial() -> None:
    """Steps of 600 s, guessed at 60 s: four trials projected at $0.70 each fit $10 together,
    but one really costs $6.12 (120 s start-up, 12 x 600 s, two 10 s checkpoints at $3/h).
    All four used to start at once and be stopped at about $10 with none completed; now the
    first runs alone, its speed shows the second cannot fit, and it completes."""
    tr = make_traces({"z": [1] * 300}, {"z": 0.8})
    cs = [curve(str(i), 0.5 + i / 10, steps=12, step_s=600.0) for i in range(4)]
    settings = SimSettings(
        parallel=4, time_scale=1.0, restart_overhead_s=120.0, checkpoint_s=10.0, max_cost_usd=10.0
    )
    r = Engine(get_policy("on-demand"), ReplayMarket(tr), rule_for("aws"), cs, settings, T0).run()
    assert r.completed == 1 and r.returned == "0"
    assert r.cost_usd == pytest.approx((120 + 12 * 600 + 2 * 10) * 3.0 / 3600)
    assert r.stopped_by == {"budget": 3} and r.budget_stopped == 3
    assert not r.budget_exceeded


def test_simulate_on_demand_parallel_8_completes_trials_within_the_cap() -> None:
    """``spotwise simulate --trials 20 --seeds 2 --policy on-demand --max-cost 15 --parallel 8``
    completed 0 of 20 on both seeds ($13.92 each, every trial stopped by the budget)."""
    from spotwise.cli.simulate import SHIPPED_CURVES
    from spotwise.planner.sim_curves import load_curve_pool
    from spotwise.planner.sim_suite import Suite, revocation_risk, run_suite, tuning_settings
    from spotwise.providers.replay import resolve_trace
    from spotwise.traces import load_traces

    ts = load_traces(resolve_trace("builtin:skynomad-v100-2023"))
    settings = tuning_settings(
        parallel=8,
        time_scale=120.0,
        restart_s=180.0,
        checkpoint_s=20.0,
        max_cost_usd=15.0,
        deadline_hours=None,
    )
    suite = Suite(("on-demand",), 20, 2, 0, 0.3, settings, 0.7, 168 * 3600.0)
    out = run_suite(ts, load_curve_pool(SHIPPED_CURVES), suite, revocation_risk(ts, "none"))
    rs = out["runs"]["on-demand"]
    assert [r["completed"] for r in rs] == [3, 2]
    assert [r["cost_usd"] for r in rs] == pytest.approx([14.06665, 10.7015])
    for r in rs:
        assert r["cost_usd"] <= 15.0 and not r["budget_exceeded"]
    # as in `tune`, no new trial starts once one that never ran was stopped for the budget
    assert [r["budget_stopped"] for r in rs] == [5, 7]
