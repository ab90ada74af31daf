"""Bills naming an instance written to a record still open (s22 helper A2), on SQLite and
PostgreSQL.

A stray the drain bills to a leftover's open record, and the other instances of a launch a
cancel terminates, are parts naming their instance even while the record is open: the record's
own life's bill is what the parts naming others leave (:func:`own_bill`). A part written while
the record is open is dated with the record's close (its first bill: `spotwise report` counts
an open record from its close, never in a window already reported). A bill that names no
instance on an open record stays the record's own, as before. The cancel's close is a
compare-and-set on the bill and on the instance the record names."""

from __future__ import annotations

import json
from typing import Any

import pytest
from shared_helpers import record_launch

from spotwise.store import Store
from spotwise.store.bills import InstanceBills, billed_instances, decided_since, own_bill

STRAY = {"cost_usd": 0.15, "market_seconds": 600.0}  # ten minutes at $0.90/h


def _open(store: Store, **fields: Any) -> Any:
    """l-0, open: a leftover's record (i-0's first half hour billed by the drain), or as given."""
    job = store.create_job("j", "{}", "job.yaml", "spot-greedy", "maximize")
    trial = store.add_trial(job.id, 0, {"lr": 0.1})
    cols = fields or {
        "provider_instance_id": "i-0", "launched_at": 100.0, "cost_usd": 0.45,
        "market_seconds": 1800.0, "state": "running",
    }  # fmt: skip
    record_launch(store, job.id, trial.id, price_per_hour=0.9, id="l-0", **cols)
    return store.get_instance("l-0")


def _parts(row: Any) -> list[dict[str, Any]]:
    return list(json.loads(row.extra_bills_json or "[]"))


def test_a_stray_billed_to_an_open_record_is_a_part_dated_with_its_close(store: Store) -> None:
    seen = _open(store)
    bills = InstanceBills(store, {"l-0": seen})
    assert bills.bill("l-0", "i-x", STRAY).written is not None  # the drain, at 1000
    row = store.get_instance("l-0")
    assert (row.cost_usd, row.market_seconds, row.billed_at) == (pytest.approx(0.6), 2400.0, None)
    assert billed_instances(row) == {"i-x"}  # was: no part (the stray's seconds unnamed)
    assert own_bill(row, "i-0") == {
        "cost_usd": pytest.approx(0.45),
        "on_demand_cost_usd": 0.0,
        "market_seconds": 1800.0,
    }
    store.update_instance("l-0", state="terminated", ended_at=3700.0, billed_at=5000.0)
    (part,) = _parts(store.get_instance("l-0"))
    assert part == {
        "at": 5000.0,  # the close's first bill, when `report` counts the record
        "cost_usd": pytest.approx(0.15),
        "on_demand_cost_usd": 0.0,
        "market_seconds": 600.0,
        "instance": "i-x",
    }


def test_an_unnamed_bill_of_an_open_record_is_its_own_as_before(store: Store) -> None:
    seen = _open(store)
    assert store.rebill_instance_if_unchanged(seen, cost_usd=0.6, market_seconds=2400.0)
    row = store.get_instance("l-0")
    assert row.extra_bills_json is None and own_bill(row, "i-0")["market_seconds"] == 2400.0


def test_a_close_with_the_launchs_other_instances_names_each_in_a_part(store: Store) -> None:
    """The cancel's close: i-0's whole hour as the record's bill, and i-b (a retried create,
    half an hour) as a part naming it, both dated with the close."""
    seen = _open(store)
    row = store.rebill_instance_if_unchanged(
        seen, parts={"i-b": {"cost_usd": 0.45, "market_seconds": 1800.0}}, state="terminated",
        end_reason="reconciled", ended_at=3700.0, billed_at=4000.0, cost_usd=0.9,
        market_seconds=3600.0,
    )  # fmt: skip
    assert row is not None
    assert (row.state, row.cost_usd, row.market_seconds, row.billed_at) == (
        "terminated",
        pytest.approx(1.35),
        5400.0,
        4000.0,
    )
    assert _parts(row) == [
        {
            "at": 4000.0,
            "cost_usd": 0.45,
            "on_demand_cost_usd": 0.0,
            "market_seconds": 1800.0,
            "instance": "i-b",
        }
    ]
    assert own_bill(row, "i-0")["market_seconds"] == 3600.0


def test_a_close_is_not_written_over_a_bill_or_a_name_written_since(fresh_url: str) -> None:
    with Store.open(fresh_url) as mine, Store.open(fresh_url) as other:
        seen = _open(mine, state="requested", end_reason="unconfirmed")
        other.update_instance("l-0", provider_instance_id="i-s")  # the drain names a stray
        close = {"state": "terminated", "ended_at": 3700.0, "cost_usd": 0.9}
        assert mine.rebill_instance_if_unchanged(seen, **close) is None
        fresh = mine.get_instance("l-0")
        assert InstanceBills(other, {"l-0": fresh}).bill("l-0", "i-x", STRAY).written
        assert mine.rebill_instance_if_unchanged(fresh, **close) is None  # its bill, since
        assert mine.get_instance("l-0").cost_usd == pytest.approx(0.15)


def test_a_close_of_a_record_read_with_open_parts_is_told_apart_by_instance(
    fresh_url: str,
) -> None:
    """The drain read l-0 (a failed launch: no instance, no start) after billing i-x to it;
    a cancel then closed it with i-a's life (200 → 2000, 1800 s) and i-b as a part: the
    drain can tell both are billed (its part of i-x re-dated by the close is no change)."""
    with Store.open(fresh_url) as mine, Store.open(fresh_url) as other:
        first = _open(mine, state="requested", end_reason="unconfirmed")
        assert InstanceBills(mine, {"l-0": first}).bill("l-0", "i-x", STRAY).written
        seen = mine.get_instance("l-0")
        assert other.rebill_instance_if_unchanged(
            other.get_instance("l-0"), parts={"i-b": {"cost_usd": 0.3, "market_seconds": 1200}},
            state="terminated", end_reason="reconciled", ended_at=2000.0, billed_at=2000.0,
            provider_instance_id="i-a", launched_at=200.0, cost_usd=0.6, market_seconds=2400.0,
        )  # fmt: skip
        fresh = mine.get_instance("l-0")
        assert [p["at"] for p in _parts(fresh)] == [2000.0, 2000.0]
        assert decided_since(seen, fresh) == {"i-a", "i-b"}
        assert own_bill(fresh, "i-a")["market_seconds"] == 1800.0
