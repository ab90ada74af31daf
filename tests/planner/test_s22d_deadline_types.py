"""The deadline clock on a market of several instance types (s22, the rest of review-aq AQ1).

C(t) timed each trial's remaining steps at its speed on the type it last ran on. Where the
on-demand type the Safety Net falls back to is slower, the net fired too late and the
deadline was missed; where it is faster, the net fired while a spot would have done; and a
spot type slower than the clock assumed was taken though it could not finish in time. Now a
trial's work counts at its speed on the fastest on-demand type, and a slower spot type is
taken only where the clock at its speed keeps the margin.

Pure planner calls on a view built by hand: a V100 (p3.2xlarge, 60 s a step) and a T4
(g4dn.xlarge, 133.3 s a step), 20 steps of 40 left, start-up 60 s, a decision every 60 s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotwise.planner.policies.deadline import job_clock
from spotwise.planner.policy import (
    Action,
    Checkpoint,
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


def offer(itype: str, spot: bool, price: float, avail: bool = True) -> OfferView:
    gpu = "T4" if itype.startswith("g4dn") else "V100"
    market = Market.SPOT if spot else Market.ON_DEMAND
    o = Offer("aws", "us-east-1", "a", itype, market, price, 3.06, 8, 61.0, 1, gpu, avail)
    return OfferView(o, 0.0, notice_lead_s=120.0, free_if_revoked_within_s=3600.0, minimum_s=60.0)


P3_SPOT = offer("p3.2xlarge", True, 0.92)
P3_SPOT_GONE = offer("p3.2xlarge", True, 0.92, avail=False)
G4_SPOT = offer("g4dn.xlarge", True, 0.16)
P3_OD = offer("p3.2xlarge", False, 3.06)
G4_OD = offer("g4dn.xlarge", False, 0.526)


def trial(sps: float, phase: Phase = Phase.WAITING, **kw: object) -> TrialView:
    """Taken at step 20 of 40 (its checkpoint), measured at ``sps`` on its last instance."""
    settings: dict[str, object] = {"step": 20, "checkpoint_step": 20, "steps_total": 40}
    settings.update(kw)
    return TrialView(
        "t1",
        0,
        phase,
        seconds_per_step=sps,
        step_seconds=SPEEDS,
        **settings,  # type: ignore[arg-type]
    )


def view(t: TrialView, offers: tuple[OfferView, ...], left: float, **kw: object) -> PlannerView:
    """``left`` seconds to the deadline; the job started now (not behind) unless told."""
    settings: dict[str, object] = {
        "now": NOW,
        "offers": offers,
        "trials": (t,),
        "deadline": NOW + left,
        "started_at": NOW,
        "restart_overhead_s": 60.0,
        "tick_s": 60.0,
    }
    settings.update(kw)
    return PlannerView(**settings)  # type: ignore[arg-type]


def decide(name: str, v: PlannerView) -> list[Action]:
    return get_policy(name).decide(v, Tick(v.now))


def launched(name: str, v: PlannerView) -> list[str]:
    return [a.offer_key for a in decide(name, v) if isinstance(a, Launch)]


def first_launch(name: str, t: TrialView, offers: tuple[OfferView, ...], left: float) -> tuple:
    """Decide every 60 s from ``left`` seconds before the deadline until a launch: (seconds
    left then, the offer)."""
    while left > 0:
        got = launched(name, view(t, offers, left, now=NOW, deadline=NOW + left))
        if got:
            return left, got[0]
        left -= 60.0
    return left, None


# ---- the Safety Net falls back to a slower type: it must fire in time for it ----------------


@pytest.mark.parametrize("name", DEADLINE_POLICIES)
def test_the_net_is_timed_on_the_slower_on_demand_type_it_falls_back_to(name: str) -> None:
    # measured on a V100 spot, now gone; on-demand only the T4: 20 steps take 2667 s there.
    # Timed at 60 s a step (C = 1200) the net fired with 1300 s left and the T4 finished
    # 1427 s past the deadline
    t = trial(60.0)
    offers = (P3_SPOT_GONE, G4_OD)
    clock = job_clock(view(t, offers, 2780.0))
    assert clock is not None and clock.remaining == pytest.approx(20 * T4_SPS)
    assert clock.safety_net
    left, key = first_launch(name, t, offers, 5000.0)
    assert key == G4_OD.key
    assert left == 2780.0  # the first decision with R < C + 2d
    assert left >= 60.0 + 20 * T4_SPS  # done by the deadline: 53 s to spare


# ---- the Safety Net falls back to a faster type: no net while a spot will do ---------------


@pytest.mark.parametrize("name", DEADLINE_POLICIES)
def test_a_trial_measured_on_a_slow_type_is_not_sent_to_on_demand_early(name: str) -> None:
    # measured on a T4 spot, now gone; a V100 spot at $0.92/h and the V100 on-demand at $3.06:
    # timed at 133 s a step (C = 2667 > R = 2000) the net sent it to on-demand ($1.07 for its
    # 1260 s); on the V100 it needs 1200 s, 680 s inside the margin's 120: spot ($0.32)
    t = trial(T4_SPS)
    v = view(t, (P3_SPOT, P3_OD), 2000.0)
    clock = job_clock(v)
    assert clock is not None and clock.remaining == pytest.approx(1200.0)
    assert not clock.safety_net
    assert launched(name, v) == [P3_SPOT.key]


# ---- a spot type slower than the clock's ----------------------------------------------------


@pytest.mark.parametrize("name", DEADLINE_POLICIES)
def test_a_spot_type_too_slow_to_finish_is_not_taken(name: str) -> None:
    # measured on a V100; only the T4 is on spot: 20 steps there end 727 s past a deadline
    # 2000 s away (the trial is then stopped without a final: its spot money bought nothing).
    # Wait, and the net takes the V100 on-demand in time
    t = trial(60.0)
    offers = (G4_SPOT, P3_OD)
    assert launched(name, view(t, offers, 2000.0)) == []
    left, key = first_launch(name, t, offers, 2000.0)
    assert key == P3_OD.key
    assert 60.0 + 20 * 60.0 <= left < 60.0 + 20 * 60.0 + 120.0


@pytest.mark.parametrize("name", DEADLINE_POLICIES)
def test_a_slower_spot_type_is_taken_while_its_run_keeps_the_margin(name: str) -> None:
    # 3500 s left: the T4 finishes 20 steps in 2727 s with more than the margin to spare
    t = trial(60.0)
    assert launched(name, view(t, (G4_SPOT, P3_OD), 3500.0)) == [G4_SPOT.key]


@pytest.mark.parametrize("name", ["uniform-progress", "spotwise"])
def test_behind_with_no_spot_that_fits_goes_to_on_demand(name: str) -> None:
    # the job is behind (started long ago): Uniform Progress's rule (1) takes on-demand now,
    # where it took the T4 spot that cannot finish
    t = trial(60.0)
    v = view(t, (G4_SPOT, P3_OD), 2000.0, started_at=0.0)
    assert job_clock(v).behind  # type: ignore[union-attr]
    assert launched(name, v) == [P3_OD.key]


@pytest.mark.parametrize("name", ["uniform-progress", "spotwise"])
def test_ahead_on_on_demand_it_does_not_leave_for_a_spot_too_slow(name: str) -> None:
    # running on the V100 on-demand, ahead of ep(t + 2d): the hysteresis (spotwise: back to
    # spot) checkpointed it to move to the T4 spot, which cannot finish 20 steps in 2000 s
    t = trial(60.0, Phase.RUNNING, offer_key=P3_OD.key, instance_id="i-1", launched_at=NOW - 600)
    v = view(t, (G4_SPOT, P3_OD), 2000.0)
    assert not [a for a in decide(name, v) if isinstance(a, Checkpoint)]
    # with 4000 s left the T4 spot finishes with room to spare: it moves
    far = view(t, (G4_SPOT, P3_OD), 4000.0)
    assert [a.trial_id for a in decide(name, far) if isinstance(a, Checkpoint)] == ["t1"]


# ---- past the deadline's last decision: a faster type can still finish it -------------------


@pytest.mark.parametrize("name", ["greedy", "uniform-progress", "spotwise", "spot-greedy"])
def test_a_waiting_trial_a_faster_type_finishes_is_not_stopped(name: str) -> None:
    # 90 s left, one step to go, start-up 10 s: the V100 on-demand finishes at +70; measured on
    # a T4 (133 s a step) it was stopped for the deadline as one that could not finish
    t = replace(trial(T4_SPS), step=39, checkpoint_step=39)
    v = view(t, (P3_SPOT_GONE, P3_OD), 90.0, restart_overhead_s=10.0)
    acts = decide(name, v)
    assert not [a for a in acts if isinstance(a, StopEarly)]
    assert [a.offer_key for a in acts if isinstance(a, Launch)] == [P3_OD.key]
    # measured on the V100 and offered only the T4 on-demand: it cannot finish, it is stopped
    slow = view(replace(t, seconds_per_step=60.0), (G4_OD,), 90.0, restart_overhead_s=10.0)
    assert [a.reason for a in decide(name, slow) if isinstance(a, StopEarly)] == ["deadline"]


# ---- one instance type: nothing changes ------------------------------------------------------


@pytest.mark.parametrize("sps", [60.0, T4_SPS])
def test_on_one_type_the_clock_is_the_trials_own_speed(sps: float) -> None:
    t = replace(trial(sps), step_seconds=())  # the simulator's markets: no per-type estimate
    clock = job_clock(view(t, (P3_SPOT, P3_OD, G4_OD), 5000.0))
    assert clock is not None and clock.remaining == pytest.approx(20 * sps)


# ---- spot and on-demand ranked together (spot-greedy, asha, spottune): in time first ---------


@pytest.mark.parametrize("name", ["spot-greedy", "asha", "spottune"])
def test_a_mixed_pool_puts_the_offers_that_finish_by_the_deadline_first(name: str) -> None:
    # a V100 spot at $1.5/h ($0.025 a step), the T4 on-demand at $0.526/h ($0.0195 a step, the
    # cheapest) and the V100 on-demand: 1500 s left, 20 steps. The T4 ends 1227 s past the
    # deadline (billed until the deadline stops it, about $0.22, with no final); the V100 spot
    # ends at +1260
    v_spot = offer("p3.2xlarge", True, 1.5)
    v = view(trial(60.0), (v_spot, G4_OD, P3_OD), 1500.0)
    assert launched(name, v) == [v_spot.key]
    # no deadline: the cheapest per step, as before
    assert launched(name, replace(v, deadline=None)) == [G4_OD.key]
