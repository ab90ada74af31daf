"""The budget judges the next offers when the policy's favourite does not fit (review-aq AQ4):
spottune ranks a risky spot offer by ``(1 - p) * price`` (the refund of a revoked first hour), so
its favourite can be the dearer launch; judged alone at its list price it stopped the trial for
the budget, and the job admitted no trial after it, while a cheaper offer fit."""

from __future__ import annotations

import pytest

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

RISKY = Offer("aws", "us-east-1", "a", "p3.2xlarge", Market.SPOT, 1.2, 3.06)
SAFE = Offer("aws", "us-east-1", "b", "p3.2xlarge", Market.SPOT, 0.9, 3.06)
DONE = TrialView("t0", 0, Phase.DONE, step=40, steps_total=40, curve=((40, 0.9),))
QUEUED = TrialView("t1", 1, Phase.QUEUED, steps_total=40, seconds_per_step=60.0)


def view(room: float, p_risky: float = 0.8) -> PlannerView:
    # a launch costs (60 s start-up + 40 steps x 60 s + 30 s wind-down) at the offer's price:
    # RISKY $0.83, SAFE $0.6225
    offers = tuple(
        OfferView(o, p, notice_lead_s=120.0, free_if_revoked_within_s=3600.0, minimum_s=60.0)
        for o, p in ((RISKY, p_risky), (SAFE, 0.0))
    )
    return PlannerView(
        now=0.0,
        offers=offers,
        trials=(DONE, QUEUED),
        parallel=1,
        trials_total=2,
        spent_usd=1.0,
        max_cost_usd=1.0 + room,
        restart_overhead_s=60.0,
        wind_down_s=30.0,
    )


@pytest.mark.parametrize("p_risky", [0.5, 0.8])
def test_spottune_launches_on_the_next_offer_that_fits(p_risky: float) -> None:
    # RISKY is spottune's favourite ((1 - p) * 1.2 < 0.9) and costs $0.83 > $0.75 left
    got = get_policy("spottune").decide(view(0.75, p_risky), Tick(0.0))
    assert got == [Launch("t1", SAFE.key)]


def test_the_favourite_still_wins_when_it_fits() -> None:
    got = get_policy("spottune").decide(view(0.85), Tick(0.0))
    assert got == [Launch("t1", RISKY.key)]


def test_a_trial_is_stopped_for_the_budget_only_when_no_offer_fits() -> None:
    got = get_policy("spottune").decide(view(0.60), Tick(0.0))
    assert got == [StopEarly("t1", "budget")]
