"""Billing rules: what one instance life costs under each provider's rule."""

from __future__ import annotations

from typing import Any

import pytest

from spotwise.errors import SpecError
from spotwise.providers.billing import RULES, BillingRule, rule_for

AWS, GCP, AZURE = rule_for("aws"), rule_for("gcp"), rule_for("azure")
PRICE = 0.918  # USD/h


def test_aws_revoked_in_the_first_hour_is_free() -> None:
    assert AWS.charge([(30.0, PRICE)], revoked_by_provider=True) == 0.0
    assert AWS.charge([(1800.0, PRICE)], revoked_by_provider=True) == 0.0
    assert AWS.charge([(3599.0, PRICE), (0.5, 9.0)], revoked_by_provider=True) == 0.0


def test_aws_revoked_after_the_first_hour_pays_every_second() -> None:
    cost = AWS.charge([(3600.0, PRICE), (600.0, PRICE)], revoked_by_provider=True)
    assert cost == pytest.approx(PRICE * 4200 / 3600)


def test_aws_terminated_by_us_pays_per_second() -> None:
    assert AWS.charge([(1800.0, PRICE)], revoked_by_provider=False) == pytest.approx(PRICE / 2)
    # partial seconds round up to the next second
    assert AWS.charge([(90.25, 3.6)], revoked_by_provider=False) == pytest.approx(91 * 3.6 / 3600)


def test_aws_minimum_is_sixty_seconds() -> None:
    assert AWS.charge([(30.0, PRICE)], revoked_by_provider=False) == pytest.approx(PRICE / 60)
    assert AWS.charge([(0.4, 3.6)], revoked_by_provider=False) == pytest.approx(60 * 3.6 / 3600)


def test_multi_segment_prices_integrate() -> None:
    segs = [(600.0, 1.0), (1200.0, 2.0), (1800.0, 0.5)]
    expected = (600 * 1.0 + 1200 * 2.0 + 1800 * 0.5) / 3600
    assert AWS.charge(segs, revoked_by_provider=False) == pytest.approx(expected)
    assert AZURE.charge(segs, revoked_by_provider=True) == pytest.approx(expected)


def test_minimum_is_billed_at_the_last_segment_price() -> None:
    # 10 s at $1 then 20 s at $4: 30 s used, 30 s of minimum at the last price ($4)
    cost = AWS.charge([(10.0, 1.0), (20.0, 4.0)], revoked_by_provider=False)
    assert cost == pytest.approx((10 * 1.0 + 20 * 4.0 + 30 * 4.0) / 3600)


def test_gcp_preempted_within_the_first_minute_is_free_then_charged() -> None:
    assert GCP.charge([(30.0, PRICE)], revoked_by_provider=True) == 0.0
    assert GCP.charge([(120.0, PRICE)], revoked_by_provider=True) == pytest.approx(
        PRICE * 120 / 3600
    )
    # stopped by us at 30 s: the one-minute minimum applies
    assert GCP.charge([(30.0, PRICE)], revoked_by_provider=False) == pytest.approx(PRICE / 60)


def test_azure_has_no_refund_and_a_five_minute_minimum() -> None:
    # s22 (review-au F5): Microsoft's notice of a 300 s minimum for every VM, Spot included,
    # from 2025-06-01 (the rule's source): 30 s at $3.6/h bills 300 s ($0.30, not $0.03),
    # evicted or not; past the minimum, per second
    assert AZURE.charge([(30.0, 3.6)], revoked_by_provider=True) == pytest.approx(0.30)
    assert AZURE.charge([(30.0, 3.6)], revoked_by_provider=False) == pytest.approx(0.30)
    assert AZURE.charge([(405.5, 3.6)], revoked_by_provider=True) == pytest.approx(0.406)


def test_an_empty_life_costs_nothing() -> None:
    for rule in RULES.values():
        assert rule.charge([], revoked_by_provider=False) == 0.0
        assert rule.charge([(0.0, PRICE)], revoked_by_provider=False) == 0.0


def test_rules_carry_their_notice_lead_and_source() -> None:
    assert (AWS.notice_lead_s, GCP.notice_lead_s, AZURE.notice_lead_s) == (120.0, 30.0, 30.0)
    for rule in RULES.values():
        assert rule.source.startswith("https://")


def test_unknown_provider_lists_the_valid_ones() -> None:
    with pytest.raises(SpecError) as info:
        rule_for("aws2")
    message = str(info.value)
    assert "did you mean 'aws'" in message and "valid: aws, gcp, azure" in message


def test_rule_validates_its_numbers() -> None:
    with pytest.raises(ValueError, match="granularity_s"):
        BillingRule("x", 0.0, 0.0, 0.0, 0.0, "src")
    with pytest.raises(ValueError, match=">= 0"):
        BillingRule("x", 1.0, -1.0, 0.0, 0.0, "src")


def test_release_after_a_notice_waits_for_the_free_first_hour_on_aws() -> None:
    from spotwise.planner.report import release_is_cheaper

    aws = rule_for("aws")
    # 50 min in, taken at 52 min: the provider's revocation is free, ours would cost $0.83
    assert not release_is_cheaper(aws, [(3000.0, 1.0)], [(3120.0, 1.0)])
    # 2 h in: waiting pays 120 s more for nothing
    assert release_is_cheaper(aws, [(7200.0, 1.0)], [(7320.0, 1.0)])
    # the deadline falls just past the hour: the refund is lost either way, release now
    assert release_is_cheaper(aws, [(3550.0, 1.0)], [(3670.0, 1.0)])


def test_release_after_a_notice_on_gcp_and_azure() -> None:
    from spotwise.planner.report import release_is_cheaper

    # GCP refunds only a first minute: inside it wait (free), after it release
    assert not release_is_cheaper(rule_for("gcp"), [(20.0, 2.0)], [(50.0, 2.0)])
    assert release_is_cheaper(rule_for("gcp"), [(600.0, 2.0)], [(630.0, 2.0)])
    # Azure never refunds: always release
    assert release_is_cheaper(rule_for("azure"), [(5.0, 2.0)], [(35.0, 2.0)])


def _life(start_step: int, max_step: int, boot_s: float) -> Any:
    from spotwise.planner.runstate import Life
    from spotwise.providers.base import Market, Offer

    offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 0.918, 3.6)
    life = Life("l-1", "i-1", offer, 0.0, start_step, attempt=1)
    life.first_report_at, life.first_report_step = boot_s + 60.0, start_step + 1
    life.max_step = max_step
    return life


def test_the_on_demand_reference_counts_one_start_up_per_trial_not_one_per_life() -> None:
    """A resumed life's start-up (30 min of market time at 300x) is not work an on-demand run
    would pay for; it used to be priced in, so every migration looked like a saving."""
    from spotwise.planner.report import life_cost

    rule = rule_for("aws")
    segments = [(1800.0 + 600.0, 0.918)]  # 30 min start-up, then 10 steps of 60 s
    # a resumed life: only the 10 kept steps
    _, od, seconds = life_cost(_life(50, 60, 1800.0), segments, rule, False, 60, 60.0)
    assert seconds == 2400.0
    assert od == pytest.approx(600.0 * 3.6 / 3600.0)
    # the trial's first life: its start-up too (an on-demand run starts once)
    _, od, _ = life_cost(_life(0, 10, 1800.0), segments, rule, False, 10, 60.0)
    assert od == pytest.approx(2400.0 * 3.6 / 3600.0)
    # revoked after step 60, checkpoint at 55: 5 kept steps
    _, od, _ = life_cost(_life(50, 60, 1800.0), segments, rule, True, 55, 60.0)
    assert od == pytest.approx(300.0 * 3.6 / 3600.0)
    # no measured speed yet: the life's seconds split by steps, as before
    _, od, _ = life_cost(_life(50, 60, 1800.0), segments, rule, False, 55, None)
    assert od == pytest.approx(1200.0 * 3.6 / 3600.0)
    # never more than the life's own seconds
    _, od, _ = life_cost(_life(50, 60, 1800.0), segments, rule, False, 60, 500.0)
    assert od == pytest.approx(2400.0 * 3.6 / 3600.0)


def test_a_tune_life_on_demand_read_as_revoked_is_billed() -> None:
    """review-au F7: the orchestrator's bill of a life (life_cost) passes the life's market:
    an on-demand life that a provider state read as a revocation is billed, never refunded
    as AWS refunds a spot life taken in its first hour."""
    from dataclasses import replace

    from spotwise.planner.report import life_cost
    from spotwise.providers.base import Market

    spot = _life(0, 10, 60.0)
    on_demand = replace(spot.offer, market=Market.ON_DEMAND, price_per_hour=3.6)
    spot_cost, _, _ = life_cost(spot, [(1200.0, 0.918)], rule_for("aws"), True, 10)
    spot.offer = on_demand
    od_cost, _, _ = life_cost(spot, [(1200.0, 3.6)], rule_for("aws"), True, 10)
    assert spot_cost == 0.0  # a spot life AWS took in its first hour: free
    assert od_cost == pytest.approx(1200.0 * 3.6 / 3600.0)  # $1.20


def test_a_cancels_bill_of_an_on_demand_life_read_as_revoked_is_not_refunded() -> None:
    """review-av F1: `spotwise cancel`'s bill of a life (release._whole_life_cost) refunded an
    on-demand life a provider listed as revoked: 1200 s at $3.06/h was billed $0."""
    from types import SimpleNamespace

    from spotwise.release import _whole_life_cost

    def bill(market: str) -> float:
        row = SimpleNamespace(market=market, market_seconds=0.0, cost_usd=0.0, price_per_hour=3.06)
        return _whole_life_cost(row, 1200.0, True, rule_for("aws"))

    assert bill("on-demand") == pytest.approx(1200.0 * 3.06 / 3600.0)  # $1.02
    assert bill("spot") == 0.0  # a spot life AWS took in its first hour: free
