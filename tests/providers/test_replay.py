"""The replay market over the shipped SkyNomad trace, checked against the CSV rows themselves."""

from __future__ import annotations

import csv
import gzip
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from spotwise.errors import NotFoundError, SpecError
from spotwise.providers.base import Catalog, Market
from spotwise.providers.replay import (
    BUILTIN_TRACES,
    MarketClock,
    ReplayMarket,
    load_market_traces,
    resolve_trace,
    zone_region,
)
from spotwise.traces import TraceSet

Row = tuple[bool, float, float]  # spot_available, spot price, on-demand price


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def csv_rows() -> dict[float, dict[str, Row]]:
    """The shipped CSV read with the csv module: {epoch: {zone: row}}."""
    (path,) = BUILTIN_TRACES["skynomad-v100-2023"].glob("*.csv.gz")
    out: dict[float, dict[str, Row]] = {}
    with gzip.open(path, "rt", newline="") as fh:
        for r in csv.DictReader(fh):
            out.setdefault(epoch(r["timestamp"]), {})[r["availability_zone"]] = (
                r["spot_available"] == "1",
                float(r["spot_price_usd_per_hour"]),
                float(r["on_demand_price_usd_per_hour"]),
            )
    return out


@pytest.fixture(scope="module")
def market() -> ReplayMarket:
    return ReplayMarket(load_market_traces("builtin:skynomad-v100-2023"))


def test_resolve_builtin_and_paths(tmp_path: Path) -> None:
    path = resolve_trace("builtin:skynomad-v100-2023")
    assert path == Path(__import__("spotwise").__file__).parent / "data" / "skynomad-v100-2023"
    assert len(list(path.glob("*.csv.gz"))) == 1
    with pytest.raises(SpecError, match="did you mean 'skynomad-v100-2023'"):
        resolve_trace("builtin:skynomad-v100-2032")
    (tmp_path / "t.csv").write_text("x")
    assert resolve_trace("t.csv", base=tmp_path) == tmp_path / "t.csv"
    with pytest.raises(SpecError, match="does not exist"):
        resolve_trace("missing.csv", base=tmp_path)


def test_every_tick_of_the_csv_is_a_tick_of_the_market(
    market: ReplayMarket, csv_rows: dict[float, dict[str, Row]]
) -> None:
    assert len(csv_rows) == market.traces.n_ticks == 20_158
    assert sum(len(z) for z in csv_rows.values()) == 181_422  # no zone misses a tick
    np.testing.assert_array_equal(market.traces.times, sorted(csv_rows))


@pytest.mark.parametrize("tick", [0, 1, 777, 10_000, 15_432, 20_157])
def test_offers_at_a_tick_equal_the_csv_row(
    market: ReplayMarket, csv_rows: dict[float, dict[str, Row]], tick: int
) -> None:
    t = sorted(csv_rows)[tick]
    rows = csv_rows[t]
    for at in (t, t + 60.0):  # at the tick and inside it
        offers = market.offers(at=at)
        spot = {o.zone: o for o in offers if o.market is Market.SPOT}
        assert set(spot) == set(rows)
        for zone, (avail, price, od) in rows.items():
            assert spot[zone].available is avail, (tick, zone)
            assert spot[zone].price_per_hour == price, (tick, zone)
            assert spot[zone].on_demand_price_per_hour == od == 3.06
            assert spot[zone].region == zone[:-1]
            assert spot[zone].instance_type == "p3.2xlarge" and spot[zone].gpus == 1
            assert market.available(zone, at) is avail
            assert market.spot_price(zone, at) == price


def test_on_demand_is_always_available_at_the_list_price(market: ReplayMarket) -> None:
    times = market.traces.times
    for t in times[:: len(times) // 50]:
        od = market.offers(at=float(t), market=Market.ON_DEMAND)
        assert len(od) == 9
        assert all(o.available and o.price_per_hour == 3.06 for o in od)


@pytest.mark.parametrize(("zone", "tick"), [("us-west-2b", 0), ("us-east-2a", 5_000)])
def test_next_revocation_is_the_first_later_unavailable_tick(
    market: ReplayMarket, csv_rows: dict[float, dict[str, Row]], zone: str, tick: int
) -> None:
    stamps = sorted(csv_rows)
    start = next(i for i in range(tick, len(stamps)) if csv_rows[stamps[i]][zone][0])
    expected = next(s for s in stamps[start + 1 :] if not csv_rows[s][zone][0])
    t = stamps[start] + 17.0
    assert market.available(zone, t)
    assert market.next_revocation(zone, t) == expected
    assert not market.available(zone, expected)
    assert all(market.available(zone, s) for s in stamps[start:] if s < expected)


def test_next_revocation_is_none_when_the_zone_stays_available() -> None:
    ts = TraceSet(
        ["z1a"], np.arange(4.0) * 10, np.array([[True, True, True, True]]), np.ones((1, 4))
    )
    assert ReplayMarket(ts).next_revocation("z1a", 0.0) is None


def test_segments_sum_to_the_interval_at_the_tick_prices(
    market: ReplayMarket, csv_rows: dict[float, dict[str, Row]]
) -> None:
    stamps = sorted(csv_rows)
    zone = "us-east-1a"  # its price moves: find ticks where it changes
    i = next(
        k
        for k in range(1, len(stamps))
        if csv_rows[stamps[k]][zone][1] != csv_rows[stamps[k - 1]][zone][1]
    )
    t0, t1 = stamps[i - 2] + 40.0, stamps[i + 3] + 10.0
    (offer,) = market.offers(at=t0, zones=[zone], market=Market.SPOT)
    segs = market.segments(offer, t0, t1)
    assert sum(s for s, _ in segs) == pytest.approx(t1 - t0)
    assert len(segs) == 6
    bounds = [t0, *stamps[i - 1 : i + 4]]
    for k, (secs, price) in enumerate(segs):
        start = bounds[k]
        end = bounds[k + 1] if k + 1 < len(bounds) else t1
        assert secs == pytest.approx(end - start)
        assert price == csv_rows[stamps[i - 2 + k]][zone][1]
    assert len({p for _, p in segs}) >= 2

    (od,) = market.offers(at=t0, zones=[zone], market=Market.ON_DEMAND)
    assert market.segments(od, t0, t1) == [(t1 - t0, 3.06)]
    assert market.segments(offer, t1, t0) == []


def test_price_history_is_the_tick_prices(
    market: ReplayMarket, csv_rows: dict[float, dict[str, Row]]
) -> None:
    stamps = sorted(csv_rows)
    hist = market.price_history("us-west-2", "p3.2xlarge", stamps[100], stamps[104])
    assert len(hist) == 3 * 5
    for p in hist:
        assert p.zone.startswith("us-west-2") and p.market is Market.SPOT
        assert p.price_per_hour == csv_rows[p.timestamp][p.zone][1]
    assert market.price_history("us-west-2", "g4dn.xlarge", stamps[100], stamps[104]) == []


def test_catalog_shape(market: ReplayMarket) -> None:
    assert isinstance(market, Catalog)
    assert market.regions() == ["us-east-1", "us-east-2", "us-west-2"]
    (it,) = market.instance_types("us-east-2")
    assert (it.name, it.gpus, it.gpu_name, it.on_demand_price_per_hour) == (
        "p3.2xlarge", 1, "V100", 3.06,
    )  # fmt: skip
    assert len(market.offers(region="us-east-1")) == 4 * 2
    assert len(market.offers(region="us-east-1", market=Market.SPOT)) == 4
    assert market.offers(instance_types=["g4dn.xlarge"]) == []
    assert zone_region("us-east-1a") == "us-east-1" and zone_region("eu") == "eu"


def test_unknown_region_and_zone_say_did_you_mean(market: ReplayMarket) -> None:
    with pytest.raises(NotFoundError) as info:
        market.offers(region="us-est-1")
    assert "did you mean 'us-east-1'" in str(info.value)
    assert "valid: us-east-1, us-east-2, us-west-2" in str(info.value)
    with pytest.raises(NotFoundError, match="did you mean 'us-west-2b'"):
        market.available("us-west-2bb", market.start_time)


def test_market_clock_maps_wall_to_market_time() -> None:
    wall = [100.0]
    clock = MarketClock(start=1_000.0, speedup=30.0, wall=lambda: wall[0])
    assert clock.now() == 1_000.0
    wall[0] = 102.5
    assert clock.now() == 1_075.0
    assert clock.wall_seconds(120.0) == 4.0
    with pytest.raises(ValueError, match="speedup"):
        MarketClock(0.0, 0.0)


def test_spot_prices_are_the_charged_table_read_only() -> None:
    traces = TraceSet(
        zones=["us-east-1a", "us-east-1b"],
        times=np.arange(3) * 60.0,
        available=np.ones((2, 3), bool),
        price=np.array([[1.0, 1.5, 2.0], [0.5, 0.5, 0.5]]),
        on_demand_price=3.0,
        gap_seconds=60.0,
    )
    market = ReplayMarket(traces)
    np.testing.assert_array_equal(market.spot_prices, traces.price)
    with pytest.raises(ValueError, match="read-only"):
        market.spot_prices[0, 0] = 9.0
    # an override is what the market charges, and what it reports
    flat = ReplayMarket(traces, spot_price=0.7)
    assert (flat.spot_prices == 0.7).all() and (traces.price != 0.7).all()
