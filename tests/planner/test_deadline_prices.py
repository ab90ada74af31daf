"""``simulate deadline`` on a priced trace: spot billed at each tick's price, as ``simulate`` does.

``--spot-price`` prices spot flat; a trace without prices (Can't Be Late JSON) keeps the paper's
$0.9731 flat; otherwise the spot offer of tick i costs ``traces.price[z, i]`` and a spot life is
billed per tick interval, through the same ``BillingRule.charge`` segments as the tuning
simulator's ``ReplayMarket``.
"""

from __future__ import annotations

import csv
import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from plan_helpers import T0, make_traces
from typer.testing import CliRunner

from spotwise.cli.simulate import app
from spotwise.errors import SpecError
from spotwise.planner.deadline_sim import (
    DeadlineEngine,
    DeadlineJob,
    run_deadline_suite,
    sample_starts,
)
from spotwise.planner.policy import get_policy
from spotwise.providers.base import Market
from spotwise.providers.billing import RULES
from spotwise.providers.replay import CBL_SPOT_PRICE, ReplayMarket
from spotwise.traces import TraceSet, load_traces

H = 3600.0
GAP = 360.0  # 6-minute ticks: 0.1 h
runner = CliRunner()


def priced(
    hours: float = 6.0, cheap_hours: float = 1.0, avail: list[int] | None = None
) -> TraceSet:
    """One zone, spot available (always, or as ``avail`` says), $1/h for the first
    ``cheap_hours`` hours, then $3/h."""
    n = round(hours * 10)
    tr = make_traces({"z": avail or [1] * n}, {"z": 1.0}, od=3.0)
    tr.times = T0 + GAP * np.arange(n)
    tr.gap_seconds = GAP
    tr.price = np.where(np.arange(n) < round(cheap_hours * 10), 1.0, 3.0)[None, :]
    return tr


def job(spot_price: float | None = None) -> DeadlineJob:
    """Done at 0.1 (d) + 2.05 = 2.15 h on spot: the life ends inside a tick interval.
    Without ``spot_price``: DeadlineJob's default (the trace's prices)."""
    given = {} if spot_price is None else {"spot_price": spot_price}
    return DeadlineJob(job_s=2.05 * H, deadline_s=4 * H, restart_s=0.1 * H, **given)


def test_a_spot_life_is_billed_at_each_ticks_price() -> None:
    r = DeadlineEngine(get_policy("greedy"), priced(), 0, 0, job()).run()
    assert r.changeovers == 1 and r.spot_hours == pytest.approx(2.15)
    # 0-1 h at $1 (ticks 0-9), 1-2.15 h at $3 (ticks 10-21, the last one 0.05 h)
    assert r.cost_usd == pytest.approx(1.0 * 1.0 + 1.15 * 3.0)
    assert r.normalized_cost == pytest.approx((1.0 + 1.15 * 3.0) / (2.05 * 3.06))


def test_a_life_started_later_is_billed_from_its_launch() -> None:
    # start at tick 5 (0.5 h): 0.5 h at $1, then 1.65 h at $3
    r = DeadlineEngine(get_policy("greedy"), priced(), 0, 5, job()).run()
    assert r.cost_usd == pytest.approx(0.5 * 1.0 + 1.65 * 3.0)


def test_spot_price_prices_spot_flat_even_on_a_priced_trace() -> None:
    r = DeadlineEngine(get_policy("greedy"), priced(), 0, 0, job(0.5)).run()
    assert r.cost_usd == pytest.approx(2.15 * 0.5)


def test_a_trace_without_prices_keeps_the_papers_flat_price() -> None:
    tr = priced()
    tr.price = np.full(tr.price.shape, np.nan)
    r = DeadlineEngine(get_policy("greedy"), tr, 0, 0, job()).run()
    assert r.cost_usd == pytest.approx(2.15 * CBL_SPOT_PRICE)


def test_the_policy_sees_the_ticks_price() -> None:
    seen: list[tuple[float, float]] = []
    inner = get_policy("greedy")

    class Watch:
        name = "watch"

        def decide(self, view: Any, event: Any) -> Any:
            spot = next(o for o in view.offers if o.offer.market is Market.SPOT)
            seen.append((view.now, spot.offer.price_per_hour))
            return inner.decide(view, event)

    tr = priced()
    DeadlineEngine(Watch(), tr, 0, 3, job()).run()  # type: ignore[arg-type]
    assert len(seen) >= 20
    for now, price in seen:
        assert price == tr.price[0, tr.tick_at(now)], now
    assert {p for _, p in seen} == {1.0, 3.0}


@pytest.mark.parametrize(
    ("t0", "t1"),
    [(0.0, 2.15 * H), (0.25 * H, 1.0 * H), (0.95 * H, 1.32 * H), (5.5 * H, 7 * H), (2 * H, 2 * H)],
)
def test_segments_are_the_tuning_simulators(t0: float, t1: float) -> None:
    """The same pieces ``ReplayMarket.segments`` gives the tuning simulator (mid-interval
    launch and end, past the trace's last tick, empty)."""
    tr = priced()
    engine = DeadlineEngine(get_policy("greedy"), tr, 0, 0, job())
    market = ReplayMarket(tr)
    offer = next(o for o in market.offers() if o.market is Market.SPOT)
    assert engine._segments(T0 + t0, T0 + t1) == market.segments(offer, T0 + t0, T0 + t1)


@pytest.mark.parametrize("billing", ["aws", "gcp", "azure"])
def test_a_priced_life_is_charged_by_the_rule_over_the_whole_life(billing: str) -> None:
    # spot up for 1.5 h: revoked at 1.5 h, after AWS's free first hour; then on-demand
    tr = priced(avail=[1] * 15 + [0] * 45)
    rule = RULES[billing]
    r = DeadlineEngine(get_policy("greedy"), tr, 0, 0, job(), rule).run()
    spot = rule.charge([(H, 1.0), (0.5 * H, 3.0)], revoked_by_provider=True)
    assert spot == pytest.approx(1.0 + 0.5 * 3.0)
    assert r.spot_hours == pytest.approx(1.5)
    assert r.cost_usd == pytest.approx(spot + r.on_demand_hours * 3.06)


def test_a_zone_without_prices_in_a_priced_trace_is_refused() -> None:
    tr = make_traces({"a": [1] * 60, "b": [1] * 60}, {"a": 1.0, "b": 1.0})
    tr.price[1, :] = np.nan
    message = (
        "--traces: zone b has no spot price at some ticks while other zones have prices; "
        "give --spot-price to price spot flat in every zone"
    )
    with pytest.raises(SpecError) as e:
        run_deadline_suite(tr, job(), ["greedy"], starts=1, start_from=0.0)
    assert str(e.value) == message
    flat = run_deadline_suite(tr, job(0.5), ["greedy"], starts=1, start_from=0.0)
    assert flat["spot_prices"] == "flat"


def test_a_given_spot_price_is_still_checked() -> None:
    with pytest.raises(SpecError, match=r"^--spot-price must be > 0 \(\$/h\), got 0$"):
        job(0.0)


# ---- through the CLI: the JSON says which prices were used ---------------------------------


def write_priced_csv(path: Path) -> Path:
    """Two zones, 30-min ticks for 2 days, spot always available; us-east-2a's price cycles
    through $1, 1.5, 2, 2.5, 3 /h, us-east-1a costs $2/h throughout."""
    t0 = datetime(2023, 3, 1, tzinfo=UTC).timestamp()
    with gzip.open(path, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "availability_zone", "instance_type", "spot_available",
                    "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"])  # fmt: skip
        for i in range(96):
            ts = datetime.fromtimestamp(t0 + i * 1800, UTC).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([ts, "us-east-2a", "p3.2xlarge", 1, 1.0 + i % 5 * 0.5, 3.06])
            w.writerow([ts, "us-east-1a", "p3.2xlarge", 1, 2.0, 3.06])
    return path


def deadline_json(traces: Path, *extra: str) -> dict[str, Any]:
    res = runner.invoke(app, [
        "deadline", "--traces", str(traces), "--job-hours", "4", "--deadline-hours", "6",
        "--restart-hours", "0", "--policy", "greedy", "--starts", "3", "--start-from", "0",
        "--revocation-model", "none", "--workers", "1", "--json", *extra,
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.output)
    return doc


def test_the_json_says_the_traces_prices_were_used(tmp_path: Path) -> None:
    path = write_priced_csv(tmp_path / "t.csv.gz")
    doc = deadline_json(path)
    assert doc["spot_price"] is None and doc["spot_prices"] == "trace"
    assert doc["on_demand_price"] == 3.06
    # greedy runs the 4 h on spot from its start (d = 0): 8 half-hours at the trace's prices,
    # normalised by 4 h at $3.06
    ts = load_traces(path)
    z = ts.zones.index("us-east-2a")
    pairs = sample_starts(ts, DeadlineJob(4 * H, 6 * H, 0.0), 3, 0, 0.0)
    costs = [ts.price[z, s : s + 8].sum() * 0.5 / (4 * 3.06) for zi, s in pairs if zi == z]
    by_zone = doc["per_zone"]["greedy"]
    assert by_zone["us-east-1a"]["mean_cost"] == pytest.approx(2.0 / 3.06)
    assert by_zone["us-east-2a"]["mean_cost"] == pytest.approx(float(np.mean(costs)))
    assert len(set(costs)) > 1  # the starts saw different prices


def test_the_json_gives_the_flat_price_of_spot_price(tmp_path: Path) -> None:
    doc = deadline_json(write_priced_csv(tmp_path / "t.csv.gz"), "--spot-price", "0.5")
    assert doc["spot_price"] == 0.5 and doc["spot_prices"] == "flat"
    assert doc["policies"]["greedy"]["mean_cost"] == pytest.approx(0.5 / 3.06)


def test_the_json_gives_the_papers_price_for_a_trace_without_prices(tmp_path: Path) -> None:
    folder = tmp_path / "cbl"
    folder.mkdir()
    for z in ("us-west-2a", "us-west-2b"):
        (folder / f"{z}_v100_1.json").write_text(
            json.dumps({"metadata": {"gap_seconds": 600}, "data": [1] * 60})
        )
    doc = deadline_json(folder)
    assert doc["spot_price"] == CBL_SPOT_PRICE and doc["spot_prices"] == "flat"
    assert doc["policies"]["greedy"]["mean_cost"] == pytest.approx(CBL_SPOT_PRICE / 3.06)


def test_the_table_says_which_prices_were_billed(tmp_path: Path) -> None:
    path = write_priced_csv(tmp_path / "t.csv.gz")
    args = ["deadline", "--traces", str(path), "--job-hours", "4", "--deadline-hours", "6",
            "--policy", "greedy", "--starts", "2", "--revocation-model", "none"]  # fmt: skip
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())  # the footer wraps at the table's width
    assert "spot: the trace's price at each tick, on-demand: $3.06/h." in text
    res = runner.invoke(app, [*args, "--spot-price", "0.5"])
    assert res.exit_code == 0, res.output
    assert "spot: $0.5/h flat, on-demand: $3.06/h." in " ".join(res.output.split())
