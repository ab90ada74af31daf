"""The replay market and the local provider against the clouds' and `simulate`'s rules
(s22 helper F, review-au): a zone being reclaimed refuses launches (F1), no market past the
trace's end (F2), ``next_revocation`` inside an outage (F8), and the billing rules' figures and
sources (F5, F6), a refund for spot lives only (F7)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from spotwise.bill_parts import billed_seconds
from spotwise.errors import CapacityError
from spotwise.planner.sim_money import Meter
from spotwise.planner.sim_state import Life as SimLife
from spotwise.providers.base import LaunchRequest, Market, Offer, our_tags
from spotwise.providers.billing import rule_for
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.replay import MarketClock, ReplayMarket
from spotwise.traces import TraceSet

T0 = 1_700_000_000.0
GAP = 60.0
TICKS = 60  # the trace ends at T0 + 3600
REVOKE_AT = T0 + 50 * GAP  # zone a: available ticks 0..49 and 55..59, taken at tick 50
LEAD = 120.0  # AWS's notice lead
SPEEDUP = 100.0


class FakeWall:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def at_market(self, market_time: float) -> None:
        self.t = (market_time - T0) / SPEEDUP


def traces() -> TraceSet:
    available = np.ones((2, TICKS), dtype=bool)
    available[0, 50:55] = False
    price = np.vstack([np.full(TICKS, 1.0), np.full(TICKS, 0.5)])
    return TraceSet(
        ["us-east-1a", "us-east-1b"], T0 + GAP * np.arange(TICKS), available, price,
        instance_type="p3.2xlarge", on_demand_price=3.06, gap_seconds=GAP,
    )  # fmt: skip


@pytest.fixture
def wall() -> FakeWall:
    return FakeWall()


@pytest.fixture
def market() -> ReplayMarket:
    return ReplayMarket(traces())


@pytest.fixture
def prov(market: ReplayMarket, wall: FakeWall, tmp_path: Path) -> Iterator[LocalProvisioner]:
    clock = MarketClock(T0, SPEEDUP, wall=wall)
    p = LocalProvisioner(
        market, clock, notice_lead_s=LEAD, notice_floor_wall_s=0.2, logs_dir=tmp_path / "logs",
        kill_grace_s=0.5, records_dir=tmp_path / "records",
    )  # fmt: skip
    yield p
    p.shutdown()


def offer(market: ReplayMarket, zone: str, kind: Market, at: float) -> Offer:
    (o,) = market.offers(at=at, zones=[zone], market=kind)
    return o


def request(o: Offer, tmp_path: Path, token: str) -> LaunchRequest:
    argv = (sys.executable, "-c", "import time; time.sleep(30)")
    return LaunchRequest(o, argv, {}, our_tags("job-1", "trial-1", token), token, str(tmp_path))


# ---- F1: a zone inside its notice window before a revocation ------------------------------
def test_a_spot_launch_inside_the_notice_lead_is_refused_as_simulate_hides_the_zone(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    """review-au F1: launched 50 s before the revocation, the trial was noticed at once, paid
    its start-up and migrated, where `simulate` (sim_view) shows the zone unavailable."""
    for before in (50.0, 100.0, LEAD):  # 120 s ahead: inside too (sim_view's `<=`)
        wall.at_market(REVOKE_AT - before)
        o = offer(market, "us-east-1a", Market.SPOT, REVOKE_AT - before)
        assert not o.available, before  # the market's offers show it as simulate does
        with pytest.raises(CapacityError, match=r"reclaimed \d+ s later, within the 120 s"):
            prov.launch(request(o, tmp_path, f"in-{before:.0f}"))
    assert prov.describe() == []
    # the other zone and on-demand in the same zone are sold meanwhile
    assert offer(market, "us-east-1b", Market.SPOT, REVOKE_AT - 50).available
    od = offer(market, "us-east-1a", Market.ON_DEMAND, REVOKE_AT - 50)
    assert od.available and prov.launch(request(od, tmp_path, "od")).instance_id


def test_a_spot_launch_just_outside_the_notice_lead_is_noticed_one_lead_before(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    wall.at_market(REVOKE_AT - LEAD - 1.0)
    o = offer(market, "us-east-1a", Market.SPOT, REVOKE_AT - LEAD - 1.0)
    assert o.available
    inst = prov.launch(request(o, tmp_path, "outside"))
    assert prov.notices() == []  # not at launch: one lead before the revocation
    wall.at_market(REVOKE_AT - LEAD)
    (notice,) = prov.notices()
    assert (notice.instance_id, notice.received_at, notice.deadline) == (
        inst.instance_id,
        REVOKE_AT - LEAD,
        REVOKE_AT,
    )


def test_offers_follow_simulates_rule_over_the_whole_trace() -> None:
    """At every 10 s of the trace, the replay's spot offer is available exactly when
    `simulate`'s view shows it (sim_view: available at the tick, and the zone's revocation
    more than the notice lead ahead); a market without a lead (the simulator's own) keeps the
    trace's availability."""
    market, plain = ReplayMarket(traces(), reclaim_lead_s=LEAD), ReplayMarket(traces())
    shown = []
    stamps = np.arange(T0, T0 + TICKS * GAP, 10.0)
    for t in stamps:
        gone = plain.next_revocation("us-east-1a", t)
        up = plain.available("us-east-1a", t)
        sim = up and not (gone is not None and gone - t <= LEAD)
        (o,) = market.offers(at=t, zones=["us-east-1a"], market=Market.SPOT)
        (p,) = plain.offers(at=t, zones=["us-east-1a"], market=Market.SPOT)
        assert (o.available, p.available) == (sim, up), t - T0
        shown.append(o.available)
    # hidden from +2880 s (the last 120 s before +3000) through the outage to +3300
    hidden = [float(t - T0) for t, s in zip(stamps, shown, strict=True) if not s]
    assert (hidden[0], hidden[-1], len(hidden)) == (2880.0, 3290.0, 42)


# ---- F2: no market past the trace's end ---------------------------------------------------
def test_no_launch_and_no_offer_past_the_trace_end(
    prov: LocalProvisioner, market: ReplayMarket, wall: FakeWall, tmp_path: Path
) -> None:
    end = T0 + TICKS * GAP
    assert market.end_time == end
    before = offer(market, "us-east-1b", Market.ON_DEMAND, end - 1.0)
    assert before.available
    wall.at_market(end)
    for kind in (Market.SPOT, Market.ON_DEMAND):
        o = offer(market, "us-east-1b", kind, end)
        assert not o.available  # the trace says nothing there: nothing is obtainable
        with pytest.raises(CapacityError, match=r"trace ended 1 h into it: no market after"):
            prov.launch(request(o, tmp_path, f"late-{kind.value}"))
    assert prov.describe() == []


# ---- F8: next_revocation inside an outage -------------------------------------------------
def test_next_revocation_inside_an_outage_is_now() -> None:
    market = ReplayMarket(traces())
    assert market.next_revocation("us-east-1a", REVOKE_AT - 1.0) == REVOKE_AT
    # inside the outage (ticks 50..54): an instance there now is being taken now, not at the
    # next outage (there is none: HEAD answered None, "never revoked")
    for t in (REVOKE_AT, REVOKE_AT + 60.0, REVOKE_AT + 299.0):
        assert market.next_revocation("us-east-1a", t) == t
    assert market.next_revocation("us-east-1a", REVOKE_AT + 300.0) is None  # back, for good
    assert market.next_revocation("us-east-1b", T0) is None


# ---- F5, F6: the rules' figures and sources -----------------------------------------------
def test_azure_bills_a_five_minute_minimum_and_says_why() -> None:
    azure = rule_for("azure")
    assert (azure.granularity_s, azure.minimum_s, azure.free_if_revoked_within_s) == (
        1.0,
        300.0,
        0.0,
    )
    # a 10 s life: 300 s billed ($0.25 at $3/h), evicted or not; 400.2 s: 401 s
    assert azure.charge([(10.0, 3.0)], revoked_by_provider=True) == pytest.approx(0.25)
    assert azure.charge([(400.2, 3.6)], revoked_by_provider=False) == pytest.approx(0.401)
    src = azure.source
    assert "answers/questions/2259765" in src and "2025-06-01" in src
    assert "if-my-virtual-machine-ran-for-6-minutes-and-45" in src and "per full minute" in src
    assert "disagree" in src


def test_aws_cites_the_interrupted_spot_billing_page_and_its_scope() -> None:
    src = rule_for("aws").source
    assert src.startswith(
        "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/billing-for-interrupted-spot-"
        "instances.html"
    )
    assert "Linux and Windows AMIs" in src and "SUSE" in src and "not modelled" in src


# ---- F7: only a spot life is refunded -----------------------------------------------------
def test_an_on_demand_life_marked_revoked_is_billed() -> None:
    aws, gcp = rule_for("aws"), rule_for("gcp")
    segs = [(100.0, 3.6)]
    assert aws.charge(segs, revoked_by_provider=True, market=Market.SPOT) == 0.0
    assert aws.charge(segs, revoked_by_provider=True) == 0.0  # not said: spot, as before
    assert aws.charge(segs, revoked_by_provider=True, market=Market.ON_DEMAND) == (
        pytest.approx(0.1)
    )
    assert gcp.charge([(30.0, 3.6)], True, market=Market.ON_DEMAND) == pytest.approx(0.06)


def test_report_and_simulator_bill_a_revoked_on_demand_life() -> None:
    row = SimpleNamespace(
        provider="aws", market="on-demand", end_reason="revoked", market_seconds=100.0,
        cost_usd=0.085, price_per_hour=3.06,
    )  # fmt: skip
    assert billed_seconds(row) == 100.0  # HEAD: 0 (refunded as AWS refunds a spot first hour)
    assert billed_seconds(SimpleNamespace(**{**vars(row), "market": "spot"})) == 0.0

    market = ReplayMarket(traces())
    meter = Meter(market, rule_for("aws"))
    od = offer(market, "us-east-1a", Market.ON_DEMAND, T0)
    spot = offer(market, "us-east-1a", Market.SPOT, T0)
    life = SimLife(1, od, T0, T0, 0, None)
    assert meter.charge(life, T0 + 100.0, revoked=True) == pytest.approx(100 * 3.06 / 3600)
    life.noticed = True
    assert meter.accrued([life], T0 + 100.0) == pytest.approx(100 * 3.06 / 3600)
    assert meter.charge(SimLife(2, spot, T0, T0, 0, None), T0 + 100.0, revoked=True) == 0.0


def test_the_provisioner_tells_its_market_its_lead(market: ReplayMarket) -> None:
    assert market.reclaim_lead_s == 0.0
    LocalProvisioner(market, MarketClock(T0, 1.0, wall=time.monotonic), notice_lead_s=30.0)
    assert market.reclaim_lead_s == 30.0
