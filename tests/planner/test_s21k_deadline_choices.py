"""Deadline and budget placement on a multi-type market (review-aq AQ1, AQ3, AQ4, AQ5).

Pure planner calls: a PlannerView built by hand, one decide() each. The market has a V100
(p3.2xlarge, 60 s a step) and a T4 (g4dn.xlarge, 133.3 s a step by the hardware prior).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotwise.planner.policies.deadline import job_clock
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
from spotwise.providers.base import Market, Offer

NOW = 10_000.0
T4_SPS = 60.0 / 0.45
SPEEDS = (("p3.2xlarge", 60.0), ("g4dn.xlarge", T4_SPS))
DEADLINE_POLICIES = ["greedy", "uniform-progress", "spotwise"]


def offer(zone: str, itype: str, spot: bool, price: float, avail: bool = True) -> OfferView:
    gpu = "T4" if itype.startswith("g4dn") else "V100"
    market = Market.SPOT if spot else Market.ON_DEMAND
    o = Offer("aws", "us-east-1", zone, itype, market, price, 3.06, 8, 61.0, 1, gpu, avail)
    return OfferView(o, 0.0, notice_lead_s=120.0, free_if_revoked_within_s=3600.0, minimum_s=60.0)


P3_SPOT_GONE = offer("a", "p3.2xlarge", True, 1.0, avail=False)
P3_OD = offer("a", "p3.2xlarge", False, 3.06)
G4_OD = offer("b", "g4dn.xlarge", False, 0.526)


def waiting(sps: float = 60.0, step: int = 20, tid: str = "t1", number: int = 0) -> TrialView:
    """A trial whose spot instance was taken at ``step`` of 40 (checkpoint there)."""
    return TrialView(
        tid,
        number,
        Phase.WAITING,
        step=step,
        checkpoint_step=step,
        steps_total=40,
        seconds_per_step=sps,
        step_seconds=SPEEDS,
    )


def done(i: int) -> TrialView:
    return TrialView(f"d{i}", i, Phase.DONE, step=40, steps_total=40, curve=((40, 0.9),))


def view(trials: tuple[TrialView, ...], deadline: float | None, **kw: object) -> PlannerView:
    settings: dict[str, object] = {
        "now": NOW,
        "offers": (P3_SPOT_GONE, P3_OD, G4_OD),
        "trials": trials,
        "parallel": 1,
        "trials_total": len(trials),
        "deadline": deadline,
        "started_at": 0.0,
        "restart_overhead_s": 60.0,
        "tick_s": 60.0,
    }
    settings.update(kw)
    return PlannerView(**settings)  # type: ignore[arg-type]


def launches(name: str, v: PlannerView) -> list[str]:
    return [a.offer_key for a in get_policy(name).decide(v, Tick(v.now)) if isinstance(a, Launch)]


# ---- AQ1: the Safety Net's on-demand offer finishes by the deadline --------------------------


@pytest.mark.parametrize("name", DEADLINE_POLICIES)
def test_safety_net_takes_the_on_demand_type_that_finishes_in_time(name: str) -> None:
    # 20 steps left: the V100 finishes at now + 60 + 1200 = +1260, the T4 (a sixth of its
    # price per hour, cheaper per step too) at now + 60 + 2667: 1367 s past the deadline
    v = view((waiting(),), deadline=NOW + 1300.0)
    assert job_clock(v).safety_net  # type: ignore[union-attr]
    assert launches(name, v) == [P3_OD.key]


@pytest.mark.parametrize("name", DEADLINE_POLICIES)
def test_when_no_on_demand_type_finishes_in_time_the_fastest_is_taken(name: str) -> None:
    v = view((waiting(),), deadline=NOW + 1200.0)  # even the V100 needs 1260 s
    assert launches(name, v) == [P3_OD.key]


@pytest.mark.parametrize(
    ("name", "want"), [("greedy", []), ("uniform-progress", [G4_OD.key]), ("spotwise", [G4_OD.key])]
)
def test_when_both_finish_in_time_the_cheaper_per_step_is_taken(name: str, want: list[str]) -> None:
    # measured on the T4; the Safety Net is timed on the fastest on-demand type (the V100:
    # C = 1200 s, s22 helper D), so with 2750 s left it is off: greedy waits for spot;
    # uniform-progress and spotwise are behind and take on-demand, where both types finish in
    # time and the T4 is cheaper per step ($0.0195 against the V100's $0.051)
    v = view((waiting(sps=T4_SPS),), deadline=NOW + 2750.0)
    assert not job_clock(v).safety_net  # type: ignore[union-attr]
    assert launches(name, v) == want


@pytest.mark.parametrize("name", ["greedy", "uniform-progress"])
@pytest.mark.parametrize("deadline", [None, 1e9])
def test_greedy_and_uniform_progress_rank_spot_per_step(name: str, deadline: float | None) -> None:
    # the V100 at $1/h makes a step for $0.0167, the T4 at $0.5/h for $0.0185: the V100
    fast = offer("a", "p3.2xlarge", True, 1.0)
    slow = offer("b", "g4dn.xlarge", True, 0.5)
    queued = TrialView("t1", 0, Phase.QUEUED, steps_total=40, step_seconds=SPEEDS)
    v = view((queued,), deadline=deadline, offers=(fast, slow), now=0.0)
    assert launches(name, v) == [fast.key]


# ---- AQ3: no launch that cannot make a step before the deadline ------------------------------


@pytest.mark.parametrize("name", ["greedy", "uniform-progress"])
def test_no_launch_that_cannot_make_a_step_before_the_deadline(name: str) -> None:
    # start-up 60 s + one step 60 s > the 100 s left: stopped, as spot-greedy/asha/spotwise do
    queued = TrialView("t1", 3, Phase.QUEUED, steps_total=40, seconds_per_step=60.0)
    spot = offer("a", "p3.2xlarge", True, 1.0)
    v = view((queued,), deadline=NOW + 100.0, offers=(spot, P3_OD), trials_total=4)
    assert get_policy(name).decide(v, Tick(NOW)) == [StopEarly("t1", "deadline")]


# ---- AQ5: the clock's work per slot at the tail of a job --------------------------------------


def test_one_trial_left_is_not_spread_over_the_idle_slots() -> None:
    # parallel 4, three trials done, the fourth has 20 × 60 s left: C(t) is 1200 s, not 300
    v = view((done(0), done(1), done(2), waiting(number=3, tid="t3")), NOW + 1400.0, parallel=4)
    clock = job_clock(v)
    assert clock is not None and clock.remaining == pytest.approx(1200.0)


def test_the_longest_trial_bounds_the_work_per_slot() -> None:
    # two slots, two trials left: 1 step and 20 steps; the long one runs alone: 1200 s, not 630
    short, long_ = waiting(step=39, tid="a", number=0), waiting(step=20, tid="b", number=1)
    clock = job_clock(view((short, long_), NOW + 5000.0, parallel=2))
    assert clock is not None and clock.remaining == pytest.approx(1200.0)


def test_a_trial_not_yet_created_is_a_whole_trial_on_one_slot() -> None:
    # one trial waiting (20 steps) and two not yet created (40 steps each), 4 slots: the three
    # use three slots, (1200 + 2 × 2400) / 3 = 2000 s, but a new trial alone takes 2400 s
    clock = job_clock(view((waiting(),), NOW + 9000.0, parallel=4, trials_total=3))
    assert clock is not None and clock.remaining == pytest.approx(2400.0)


@pytest.mark.parametrize("name", DEADLINE_POLICIES)
@pytest.mark.parametrize("started_ago", [0.0, 1000.0])  # the job behind / ahead of ep(t)
def test_the_last_trial_gets_on_demand_in_time(name: str, started_ago: float) -> None:
    # 1300 s left; the last trial needs 60 + 1200 s on on-demand: the Safety Net fires now
    # (C = 1200 + 2d = 1320 > 1300); with C spread over 4 slots (300 s) everyone waited
    trials = (done(0), done(1), done(2), waiting(number=3, tid="t3"))
    v = view(trials, NOW + 1300.0, parallel=4, started_at=NOW - started_ago)
    assert launches(name, v) == [P3_OD.key]


# ---- AQ4: spotwise tries the next offers before stopping for the budget ----------------------


def test_spotwise_launches_on_an_offer_that_fits_when_its_favourite_does_not() -> None:
    # $0.75 of room; A ($1.20/h, p = 0.8: its favourite by the refund) costs $0.83 to launch,
    # B ($0.90/h, p = 0) $0.62: B, not a trial stopped for the budget
    a = OfferView(
        offer("a", "p3.2xlarge", True, 1.2).offer,
        0.8,
        notice_lead_s=120.0,
        free_if_revoked_within_s=3600.0,
        minimum_s=60.0,
    )
    b = offer("b", "p3.2xlarge", True, 0.9)
    queued = TrialView("t1", 1, Phase.QUEUED, steps_total=40, seconds_per_step=60.0)
    v = PlannerView(
        now=0.0,
        offers=(a, b),
        trials=(done(0), queued),
        trials_total=2,
        spent_usd=1.0,
        max_cost_usd=1.75,
        restart_overhead_s=60.0,
        wind_down_s=30.0,
    )
    assert launches("spotwise", v) == [b.key]
    # with room for neither, it is stopped for the budget as before
    tight = replace(v, max_cost_usd=1.5)
    acts = get_policy("spotwise").decide(tight, Tick(0.0))
    assert acts == [StopEarly("t1", "budget")]


# ---- the same rule for the on-demand and spot-greedy policies (_common.place) ----------------


@pytest.mark.parametrize("name", ["on-demand", "spot-greedy"])
def test_every_policys_on_demand_placement_finishes_by_the_deadline_first(name: str) -> None:
    """No spot to be had: the on-demand pool is placed by price per step, the types that
    finish the trial by the deadline first (was: the T4, cheaper per step, 1367 s late)."""
    v = view((waiting(),), deadline=NOW + 1300.0)
    assert launches(name, v) == [P3_OD.key]
    assert launches(name, view((waiting(),), deadline=None)) == [G4_OD.key]  # no deadline
