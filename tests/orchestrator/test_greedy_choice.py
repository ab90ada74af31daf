"""``spot-greedy`` and ``on-demand`` as pure functions of hand-built planner views."""

from __future__ import annotations

from typing import Any

import pytest

from spotwise.errors import SpecError
from spotwise.planner.policy import (
    Checkpoint,
    Launch,
    NoticeReceived,
    OfferView,
    Phase,
    PlannerView,
    StopEarly,
    Tick,
    TrialAdded,
    TrialView,
    get_policy,
    policy_names,
)
from spotwise.providers.base import Market, Offer

NOW = 1_000_000.0


def offer(zone: str, market: Market, price: float, available: bool = True) -> OfferView:
    return OfferView(
        Offer("aws", zone[:-1], zone, "p3.2xlarge", market, price, 3.06, available=available)
    )


def spot(zone: str, price: float, available: bool = True) -> OfferView:
    return offer(zone, Market.SPOT, price, available)


def od(zone: str, price: float = 3.06) -> OfferView:
    return offer(zone, Market.ON_DEMAND, price)


def trial(n: int, phase: Phase = Phase.QUEUED, **kw: Any) -> TrialView:
    kw.setdefault("steps_total", 100)
    kw.setdefault("seconds_per_step", 60.0)
    return TrialView(trial_id=f"t{n}", number=n, phase=phase, **kw)


def view(offers: list[OfferView], trials: list[TrialView], **kw: Any) -> PlannerView:
    return PlannerView(now=NOW, offers=tuple(offers), trials=tuple(trials), **kw)


MARKET = [
    spot("us-east-1a", 1.20),
    spot("us-east-2a", 0.918),
    spot("us-west-2b", 0.95),
    od("us-east-1a"),
    od("us-west-2b"),
]


def launches(actions: list[Any]) -> dict[str, str]:
    return {a.trial_id: a.offer_key for a in actions if isinstance(a, Launch)}


def test_both_policies_are_registered_and_unknown_names_list_them() -> None:
    assert {"spot-greedy", "on-demand"} <= set(policy_names())
    assert get_policy("spot-greedy").name == "spot-greedy"
    with pytest.raises(SpecError) as info:
        get_policy("spot-greedyy")
    assert "did you mean 'spot-greedy'" in str(info.value)
    assert "valid:" in str(info.value) and "on-demand" in str(info.value)


def test_greedy_launches_on_the_cheapest_available_spot() -> None:
    actions = get_policy("spot-greedy").decide(view(MARKET, [trial(0)]), TrialAdded("t0"))
    assert actions == [Launch("t0", "aws:us-east-2a:p3.2xlarge:spot")]


def test_greedy_skips_an_unavailable_cheaper_offer() -> None:
    offers = [spot("us-east-2a", 0.918, available=False), *MARKET[2:]]
    actions = get_policy("spot-greedy").decide(view(offers, [trial(0)]), Tick(NOW))
    assert actions == [Launch("t0", "aws:us-west-2b:p3.2xlarge:spot")]


def test_greedy_falls_back_to_the_cheapest_on_demand() -> None:
    offers = [
        spot("us-east-2a", 0.918, available=False),
        spot("us-west-2b", 0.95, available=False),
        od("us-east-1a", 3.06),
        od("us-west-2b", 2.90),
    ]
    actions = get_policy("spot-greedy").decide(view(offers, [trial(0)]), Tick(NOW))
    assert actions == [Launch("t0", "aws:us-west-2b:p3.2xlarge:on-demand")]


def test_on_demand_policy_never_picks_spot() -> None:
    policy = get_policy("on-demand")
    cheap_od = [*MARKET, od("us-east-2a", 3.00)]
    actions = policy.decide(view(cheap_od, [trial(0), trial(1)], parallel=2), Tick(NOW))
    assert launches(actions) == {
        "t0": "aws:us-east-2a:p3.2xlarge:on-demand",
        "t1": "aws:us-east-2a:p3.2xlarge:on-demand",
    }
    only_spot = [o for o in MARKET if o.is_spot]
    assert policy.decide(view(only_spot, [trial(0)]), Tick(NOW)) == []


def test_parallel_limit_counts_running_trials() -> None:
    trials = [
        trial(0, Phase.RUNNING, offer_key=MARKET[1].key, instance_id="i-0"),
        trial(1),
        trial(2),
        trial(3),
    ]
    actions = get_policy("spot-greedy").decide(view(MARKET, trials, parallel=2), Tick(NOW))
    assert list(launches(actions)) == ["t1"]  # one free slot, lowest number first
    full = [trials[0], trial(1, Phase.RUNNING, offer_key=MARKET[1].key)]
    assert get_policy("spot-greedy").decide(view(MARKET, full, parallel=2), Tick(NOW)) == []


def test_a_waiting_trial_is_relaunched_before_a_new_one() -> None:
    trials = [trial(0), trial(1, Phase.WAITING, step=40, checkpoint_step=40)]
    actions = get_policy("spot-greedy").decide(view(MARKET, trials, parallel=1), Tick(NOW))
    assert list(launches(actions)) == ["t1"]


def test_done_and_stopping_trials_are_not_launched() -> None:
    trials = [trial(0, Phase.DONE), trial(1, Phase.WAITING, stopping=True)]
    assert get_policy("spot-greedy").decide(view(MARKET, trials, parallel=4), Tick(NOW)) == []


def test_launch_that_would_exceed_the_budget_becomes_stop_early() -> None:
    # 100 steps x 60 s at $0.918/h = $1.53 for the cheapest offer
    t = trial(0, curve=((3, 0.4),))
    policy = get_policy("spot-greedy")
    over = policy.decide(view(MARKET, [t], max_cost_usd=1.50), Tick(NOW))
    assert over == [StopEarly("t0", "budget")]
    within = policy.decide(view(MARKET, [t], max_cost_usd=1.60), Tick(NOW))
    assert within == [Launch("t0", "aws:us-east-2a:p3.2xlarge:spot")]
    # what is already spent counts too
    spent = policy.decide(view(MARKET, [t], max_cost_usd=1.60, spent_usd=0.10), Tick(NOW))
    assert spent == [StopEarly("t0", "budget")]


def test_budget_counts_the_running_trials_projection() -> None:
    running = trial(0, Phase.RUNNING, step=50, offer_key=MARKET[1].key)  # $0.765 to finish
    queued = trial(1)  # $1.545 on the cheapest offer (60 s start-up + 100 steps)
    policy = get_policy("spot-greedy")
    actions = policy.decide(
        view(MARKET, [running, queued], parallel=2, max_cost_usd=2.0), Tick(NOW)
    )
    # it fits on its own but not beside the running trial: it waits (it was stopped for good,
    # and a $1 budget ran 1 trial of 8 in review)
    assert actions == []
    # what is spent already leaves no room for it even alone: stopped
    actions = policy.decide(
        view(MARKET, [running, queued], parallel=2, max_cost_usd=2.0, spent_usd=0.5), Tick(NOW)
    )
    assert actions == [StopEarly("t1", "budget", None)]
    actions = policy.decide(
        view(MARKET, [running, queued], parallel=2, max_cost_usd=2.4), Tick(NOW)
    )
    assert actions == [Launch("t1", MARKET[1].key)]


def test_budget_counts_the_start_up_each_launch_pays_for() -> None:
    """Launch to first step is billed too: a replayed market at 300x turns a few wall seconds
    of start-up into half an hour of market time (measured into ``restart_overhead_s``)."""
    t = trial(0)  # 100 steps x 60 s at $0.918/h = $1.53, plus 1800 s of start-up = $1.989
    policy = get_policy("spot-greedy")
    slow = {"restart_overhead_s": 1800.0}
    assert policy.decide(view(MARKET, [t], max_cost_usd=1.98, **slow), Tick(NOW)) == [
        StopEarly("t0", "budget", None)
    ]
    assert policy.decide(view(MARKET, [t], max_cost_usd=1.99, **slow), Tick(NOW)) == [
        Launch("t0", MARKET[1].key)
    ]
    # a running trial still starting up: the rest of its start-up is projected too
    booting = trial(1, Phase.RUNNING, offer_key=MARKET[1].key, launched_at=NOW - 600.0)
    both = view(MARKET, [booting, t], parallel=2, max_cost_usd=1.99 + 1.53 + 0.30, **slow)
    assert policy.decide(both, Tick(NOW)) == []  # waits for the booting trial's room
    both = view(MARKET, [booting, t], parallel=2, max_cost_usd=1.99 + 1.53 + 0.31, **slow)
    assert policy.decide(both, Tick(NOW)) == [Launch("t0", MARKET[1].key)]


@pytest.mark.parametrize("name", ["greedy", "uniform-progress", "spotwise", "spottune"])
def test_every_policy_keeps_launches_within_the_budget(name: str) -> None:
    """The deadline policies launched without looking at the budget (a 78 % overspend)."""
    t = trial(0, curve=((3, 0.4),))
    policy = get_policy(name)
    tight = view(MARKET, [t], max_cost_usd=1.0, deadline=NOW + 10 * 86400.0, started_at=NOW)
    actions = policy.decide(tight, Tick(NOW))
    assert actions == [StopEarly("t0", "budget")], actions
    roomy = view(MARKET, [t], max_cost_usd=5.0, deadline=NOW + 10 * 86400.0, started_at=NOW)
    assert [type(a) for a in policy.decide(roomy, Tick(NOW))][-1] is Launch


def test_spent_budget_stops_every_live_trial() -> None:
    trials = [
        trial(0, Phase.RUNNING, offer_key=MARKET[1].key, curve=((5, 0.7),)),
        trial(1),
        trial(2, Phase.DONE),
    ]
    for name in ("spot-greedy", "on-demand"):
        actions = get_policy(name).decide(
            view(MARKET, trials, parallel=2, max_cost_usd=5.0, spent_usd=5.0), Tick(NOW)
        )
        assert actions == [StopEarly("t0", "budget"), StopEarly("t1", "budget", None)]


def test_notice_makes_the_running_trial_checkpoint() -> None:
    running = trial(0, Phase.RUNNING, offer_key=MARKET[1].key, instance_id="i-0")
    event = NoticeReceived("t0", "i-0", deadline=NOW + 120)
    actions = get_policy("spot-greedy").decide(view(MARKET, [running]), event)
    assert actions == [Checkpoint("t0", "notice")]
    # asked already: no second checkpoint
    asked = trial(0, Phase.RUNNING, offer_key=MARKET[1].key, instance_id="i-0", stopping=True)
    assert get_policy("spot-greedy").decide(view(MARKET, [asked]), event) == []


@pytest.mark.parametrize(
    "name", ["spot-greedy", "asha", "spottune", "spotwise", "greedy", "uniform-progress"]
)
def test_a_notice_for_an_instance_the_trial_has_left_stops_nothing(name: str) -> None:
    """Two notices in one pass: handling the first relaunched t0 on a fresh instance (its own
    instance is being taken); t0's notice, decided next, stopped the fresh one (review-ab: the
    stop file 2 ms after the launch, a life billed for nothing, a migration with no cause)."""
    relaunched = trial(0, Phase.RUNNING, offer_key=MARKET[1].key, instance_id="i-fresh")
    stale = NoticeReceived("t0", "i-taken", deadline=NOW + 120)
    actions = get_policy(name).decide(view(MARKET, [relaunched]), stale)
    assert not [a for a in actions if isinstance(a, Checkpoint)]
    own = NoticeReceived("t0", "i-fresh", deadline=NOW + 120)
    assert Checkpoint("t0", "notice") in get_policy(name).decide(view(MARKET, [relaunched]), own)
