"""The compare-and-set bill writes (:class:`spotwise.store.bills.BillWrites`), on SQLite and
PostgreSQL: two `spotwise cancel` of one job that read the same record and both bill it (one
closing it open, or one adding an outlived instance's bill to it closed) each write it only
while it is still as they read it, so exactly one of them bills it; the other gets None and
changes nothing (before: both wrote, and the later one's bill was a part of its own)."""

from __future__ import annotations

import json

import pytest
from shared_helpers import record_launch

from spotwise.store import Store


def _open_record(store: Store) -> str:
    job = store.create_job("j", "{}", "job.yaml", "spot-greedy", "maximize")
    trial = store.add_trial(job.id, 0, {"lr": 0.1})
    record_launch(
        store, job.id, trial.id, price_per_hour=0.9, id="l-0", state="running",
        launched_at=1000.0, provider_instance_id="i-0", requested_at=999.0,
    )  # fmt: skip
    return job.id


def test_only_the_first_close_of_an_open_record_applies(fresh_url: str) -> None:
    """Two stores (two processes' connections) read the same open record, then both close it
    (as `spotwise cancel`'s ``_bill_record`` does): the first gets the closed row, billed as it
    wrote; the second None, and its bill is nowhere."""
    with Store.open(fresh_url) as first, Store.open(fresh_url) as second:
        _open_record(first)
        seen_1, seen_2 = first.get_instance("l-0"), second.get_instance("l-0")
        won = first.rebill_instance_if_unchanged(
            seen_1, state="terminated", end_reason="reconciled", ended_at=1100.0,
            billed_at=5000.0, cost_usd=0.025, market_seconds=100.0,
        )  # fmt: skip
        lost = second.rebill_instance_if_unchanged(
            seen_2, state="terminated", end_reason="reconciled", ended_at=1200.0,
            billed_at=5001.0, cost_usd=0.05, market_seconds=200.0,
        )  # fmt: skip
        row = second.get_instance("l-0")
    assert won is not None and lost is None
    assert (won.state, won.ended_at, won.billed_at, won.cost_usd) == (
        "terminated", 1100.0, 5000.0, 0.025
    )  # fmt: skip
    assert (row.ended_at, row.billed_at, row.cost_usd, row.market_seconds) == (
        1100.0, 5000.0, 0.025, 100.0
    )  # fmt: skip
    assert row.extra_bills_json is None  # update_instance made the second bill a part


def test_a_rebill_names_known_columns(store: Store) -> None:
    _open_record(store)
    seen = store.get_instance("l-0")
    with pytest.raises(Exception, match="no updatable field 'costs'"):
        store.rebill_instance_if_unchanged(seen, state="terminated", costs=1.0)
    assert store.get_instance("l-0").state == "running"  # it wrote nothing


def test_a_closed_records_bill_is_added_to_once_by_two_writers_that_read_it(
    fresh_url: str,
) -> None:
    """Both read the closed record ($0.025 for 100 s), then each adds an outlived instance's
    100 s more: the first's part is written, dated when it wrote; the second changes nothing."""
    with Store.open(fresh_url) as first, Store.open(fresh_url) as second:
        _open_record(first)
        first.update_instance(
            "l-0", state="terminated", end_reason="completed", ended_at=1100.0,
            cost_usd=0.025, market_seconds=100.0,
        )  # fmt: skip
        seen_1, seen_2 = first.get_instance("l-0"), second.get_instance("l-0")
        more = {"cost_usd": 0.05, "market_seconds": 200.0, "ended_at": 1200.0}
        won = first.rebill_instance_if_unchanged(seen_1, billed_at=6000.0, **more)
        lost = second.rebill_instance_if_unchanged(seen_2, billed_at=6001.0, **more)
        row = second.get_instance("l-0")
    assert won is not None and lost is None
    assert (row.cost_usd, row.market_seconds, row.ended_at) == (0.05, 200.0, 1200.0)
    part = {"at": 6000.0, "cost_usd": 0.025, "on_demand_cost_usd": 0.0, "market_seconds": 100.0}
    assert json.loads(row.extra_bills_json or "[]") == [part]  # one part, not two
    assert row.billed_at == 1100.0  # its first bill stays where it was counted


def test_a_rebill_of_a_record_read_open_closes_it_as_update_instance_does(store: Store) -> None:
    _open_record(store)
    seen = store.get_instance("l-0")
    row = store.rebill_instance_if_unchanged(
        seen, state="terminated", ended_at=1100.0, billed_at=7000.0, cost_usd=0.025
    )
    assert row is not None and (row.state, row.billed_at, row.extra_bills_json) == (
        "terminated", 7000.0, None
    )  # fmt: skip
    assert store.rebill_instance_if_unchanged(seen, cost_usd=1.0) is None  # read open: stale
