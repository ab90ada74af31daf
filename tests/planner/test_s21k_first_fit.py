"""The budget's fallback past a favourite offer that cannot fit (review-aq AQ4): pure calls of
``first_fit``, the choice spotwise, greedy and uniform-progress make for each launch."""

from __future__ import annotations

import pytest

from spotwise.planner.policies._common import first_fit, launch_cost
from spotwise.planner.policy import (
    Launch,
    OfferView,
    Phase,
    PlannerView,
    StopEarly,
    TrialView,
)
from spotwise.providers.base import Market, Offer


def offer(zone: str, price: float) -> OfferView:
    o = Offer("aws", "us-east-1", zone, "p3.2xlarge", Market.SPOT, price, 3.06, 8, 61.0, 1, "V100")
    return OfferView(o, 0.0, notice_lead_s=120.0, free_if_revoked_within_s=3600.0, minimum_s=60.0)


def done(i: int) -> TrialView:
    return TrialView(f"d{i}", i, Phase.DONE, step=40, steps_total=40, curve=((40, 0.9),))


def _budget_case(cap: float) -> tuple[PlannerView, TrialView, OfferView, OfferView]:
    """Launch costs: A (dear, $1.20/h) $0.830, B ($0.90/h) $0.622; $1.00 spent."""
    a, b = offer("a", 1.2), offer("b", 0.9)
    queued = TrialView("t1", 1, Phase.QUEUED, steps_total=40, seconds_per_step=60.0)
    v = PlannerView(
        now=0.0,
        offers=(a, b),
        trials=(done(0), queued),
        trials_total=2,
        spent_usd=1.0,
        max_cost_usd=cap,
        restart_overhead_s=60.0,
        wind_down_s=30.0,
    )
    return v, queued, a, b


def test_first_fit_tries_the_next_offers_only_when_the_favourite_cannot_fit() -> None:
    v, t, a, b = _budget_case(1.75)
    # the favourite A is over even with nothing running: B fits now, launched
    action, spend, chosen = first_fit(v, 1.0, t, [a, b])
    assert (action, chosen.key) == (Launch("t1", b.key), b.key)
    assert spend == pytest.approx(1.0 + launch_cost(v, t, b))
    # B fits only once the running trials' projections ($0.20 here) are paid: wait, not stop
    assert first_fit(v, 1.2, t, [a, b])[0] is None
    # nothing fits even alone: stopped for the budget
    v2, t2, a2, b2 = _budget_case(1.5)
    assert first_fit(v2, 1.0, t2, [a2, b2])[0] == StopEarly("t1", "budget")


def test_a_favourite_waiting_for_room_keeps_waiting() -> None:
    # cap $1.90, $0.10 projected for the running trials: A fits once they are done (1.83), B
    # would fit now (1.72); the favourite waits, as before (no move off the ranking's choice)
    v, t, a, b = _budget_case(1.9)
    assert first_fit(v, 1.1, t, [a, b]) == (None, 1.1, a)
