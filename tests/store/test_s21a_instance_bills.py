"""A sweep's bills of instances to their launch's record, decided per instance
(:class:`~spotwise.store.bills.InstanceBills`, review-al F7), on SQLite and PostgreSQL.

Two processes (here: two stores on one database) bill instances of launch l-0 to its closed
record, each having read it before either wrote. Each bill is a part naming its instance; a
write that loses reads the record again and bills its instance unless a part written since
names it. A change that names no instance (an older spotwise's part, a record that was open)
leaves the record's instances to the other process, as before."""

from __future__ import annotations

import json
from typing import Any

import pytest
from shared_helpers import record_launch

from spotwise.store import Store
from spotwise.store.bills import InstanceBills, billed_instances, parts_since

HOUR = {"cost_usd": 0.9, "market_seconds": 3600.0}


def _record(store: Store, state: str = "terminated") -> Any:
    job = store.create_job("j", "{}", "job.yaml", "spot-greedy", "maximize")
    trial = store.add_trial(job.id, 0, {"lr": 0.1})
    ended = {"ended_at": 100.0} if state == "terminated" else {}
    record_launch(
        store, job.id, trial.id, price_per_hour=0.9, id="l-0", provider_instance_id="i-0",
        state=state, cost_usd=0.9, market_seconds=3600.0, **ended,
    )  # fmt: skip
    return store.get_instance("l-0")


def _parts(store: Store) -> list[tuple[str, float]]:
    parts = json.loads(store.get_instance("l-0").extra_bills_json or "[]")
    return [(p.get("instance", "?"), p["cost_usd"]) for p in parts]


def test_an_instance_the_other_did_not_bill_is_billed_on_the_record_as_read_again(
    fresh_url: str,
) -> None:
    with Store.open(fresh_url) as mine, Store.open(fresh_url) as other:
        seen = _record(mine)
        ours = InstanceBills(mine, {"l-0": seen})
        assert InstanceBills(other, {"l-0": seen}).bill("l-0", "i-a", HOUR).written is not None
        lost = ours.bill("l-0", "i-a", HOUR)  # the other's part names it: not again
        assert (lost.written, lost.others_usd) == (None, pytest.approx(0.9))
        assert ours.elsewhere("l-0", "i-a") and not ours.elsewhere("l-0", "i-b")
        won = ours.bill("l-0", "i-b", HOUR)  # the other never listed it: billed here
        assert won.written is not None and won.others_usd == 0.0
        assert _parts(mine) == [("i-a", pytest.approx(0.9)), ("i-b", pytest.approx(0.9))]
        row = mine.get_instance("l-0")
        assert (row.cost_usd, row.market_seconds) == (pytest.approx(2.7), 10800.0)
        assert billed_instances(row) == {"i-a", "i-b"}


def test_a_lost_write_whose_instance_the_other_billed_meanwhile_is_not_made_again(
    fresh_url: str,
) -> None:
    """The other bills i-b, then i-a, after this one read the record: this one's i-b write loses
    to the i-b part and is dropped; its i-a write then finds i-a named (no write at all)."""
    with Store.open(fresh_url) as mine, Store.open(fresh_url) as other:
        seen = _record(mine)
        ours, theirs = InstanceBills(mine, {"l-0": seen}), InstanceBills(other, {"l-0": seen})
        theirs.bill("l-0", "i-b", HOUR)
        theirs.bill("l-0", "i-a", HOUR)
        assert ours.bill("l-0", "i-b", HOUR).written is None
        assert ours.bill("l-0", "i-a", HOUR).written is None
        assert sorted(_parts(mine)) == [("i-a", pytest.approx(0.9)), ("i-b", pytest.approx(0.9))]


@pytest.mark.parametrize("change", ["unnamed part", "open record"])
def test_a_change_that_names_no_instance_leaves_the_launch_to_the_other(
    fresh_url: str, change: str
) -> None:
    """An older spotwise's part (no instance named), or a record read open (its close writes no
    part): which instance was billed cannot be told, so none of the launch's is billed here
    (as before F7: never twice)."""
    with Store.open(fresh_url) as mine, Store.open(fresh_url) as other:
        seen = _record(mine, "terminated" if change == "unnamed part" else "running")
        ours = InstanceBills(mine, {"l-0": seen})
        if change == "unnamed part":
            assert other.rebill_instance_if_unchanged(seen, cost_usd=1.8, market_seconds=7200.0)
        else:  # the other's bill closes it (a drain settling a failed launch): no part
            shut = {"state": "terminated", "ended_at": 100.0}
            bills = InstanceBills(other, {"l-0": seen})
            assert bills.bill("l-0", "i-a", HOUR, lambda r: shut).written
        fresh = mine.get_instance("l-0")
        assert parts_since(seen, fresh) is None
        assert ours.bill("l-0", "i-a", HOUR).written is None
        assert ours.elsewhere("l-0", "i-b")
        assert mine.get_instance("l-0").cost_usd == pytest.approx(1.8)
