"""Bills of instances to a launch record that was open when the sweep read it and that another
process closed meanwhile (:func:`~spotwise.store.bills.decided_since`, s21 helper A's gap (b)),
and a record's own life's bill (:func:`~spotwise.store.bills.own_bill`, gap (a)), on SQLite
and PostgreSQL.

l-0 is a failed launch with no instance and no start, open. The other process (a cancel)
closes it with one instance's life: where its seconds are that life's, from the start it
wrote to its end, the close billed the instance it names, and the sweep bills the others."""

from __future__ import annotations

from typing import Any

import pytest
from shared_helpers import record_launch

from spotwise.store import Store
from spotwise.store.bills import InstanceBills, decided_since, own_bill

HALF = {"cost_usd": 0.45, "market_seconds": 1800.0}


def _open(store: Store) -> Any:
    job = store.create_job("j", "{}", "job.yaml", "spot-greedy", "maximize")
    trial = store.add_trial(job.id, 0, {"lr": 0.1})
    record_launch(store, job.id, trial.id, price_per_hour=0.9, id="l-0", requested_at=50.0)
    return store.get_instance("l-0")


def _close(store: Store, start: float, seconds: float) -> None:
    """The cancel's close (as ``_release`` writes it): i-a found by the launch's tag, named,
    its start written, ``seconds`` billed up to 2000."""
    assert store.rebill_instance_if_unchanged(
        store.get_instance("l-0"), state="terminated", end_reason="reconciled",
        ended_at=2000.0, billed_at=2000.0, provider_instance_id="i-a", launched_at=start,
        cost_usd=0.9 * seconds / 3600, market_seconds=seconds,
    )  # fmt: skip


def test_the_instance_a_close_billed_alone_is_its_the_others_are_billed_here(
    fresh_url: str,
) -> None:
    with Store.open(fresh_url) as mine, Store.open(fresh_url) as other:
        seen = _open(mine)
        ours = InstanceBills(mine, {"l-0": seen})
        _close(other, 200.0, 1800.0)
        assert decided_since(seen, other.get_instance("l-0")) == {"i-a"}
        lost = ours.bill("l-0", "i-a", HALF)
        assert (lost.written, lost.others_usd) == (None, pytest.approx(0.45))
        assert ours.elsewhere("l-0", "i-a") and "l-0" not in ours.blind
        won = ours.bill("l-0", "i-b", HALF)  # the close did not bill it: a part here
        assert won.written is not None and won.others_usd == 0.0
        row = mine.get_instance("l-0")
        assert (row.cost_usd, row.market_seconds) == (pytest.approx(0.9), 3600.0)
        assert (row.state, row.provider_instance_id) == ("terminated", "i-a")


def test_a_close_whose_seconds_are_not_the_named_life_leaves_the_record_to_it(
    fresh_url: str,
) -> None:
    """2400 s billed for a life the record says started 1800 s before its end: another life
    (from another start) was billed; which cannot be told: none is billed here."""
    with Store.open(fresh_url) as mine, Store.open(fresh_url) as other:
        seen = _open(mine)
        ours = InstanceBills(mine, {"l-0": seen})
        _close(other, 200.0, 2400.0)
        assert decided_since(seen, other.get_instance("l-0")) is None
        assert ours.bill("l-0", "i-b", HALF).written is None
        assert ours.elsewhere("l-0", "i-c")
        assert mine.get_instance("l-0").cost_usd == pytest.approx(0.6)


def test_a_close_that_billed_nothing_leaves_every_instance_to_be_billed(fresh_url: str) -> None:
    with Store.open(fresh_url) as mine, Store.open(fresh_url) as other:
        seen = _open(mine)
        ours = InstanceBills(mine, {"l-0": seen})
        assert other.rebill_instance_if_unchanged(
            other.get_instance("l-0"), state="terminated", ended_at=2000.0
        )
        assert decided_since(seen, other.get_instance("l-0")) == set()
        assert ours.bill("l-0", "i-a", HALF).written is not None
        assert ours.bill("l-0", "i-b", HALF).written is not None
        assert mine.get_instance("l-0").cost_usd == pytest.approx(0.9)


def test_the_own_life_is_the_bill_less_other_instances_parts(fresh_url: str) -> None:
    """Parts naming other instances come off; the own instance's, and an unnamed one (an older
    spotwise's: its own, as before), stay."""
    with Store.open(fresh_url) as s:
        seen = _open(s)
        s.update_instance("l-0", state="terminated", ended_at=100.0, provider_instance_id="i-0")
        s.update_instance("l-0", cost_usd=0.9, market_seconds=3600.0)  # a part naming none
        row = s.rebill_instance_if_unchanged(
            s.get_instance("l-0"), part_of="i-x", cost_usd=1.35, market_seconds=5400.0
        )
        assert row is not None and seen.state != row.state
        assert own_bill(row, "i-0") == {
            "cost_usd": pytest.approx(0.9),
            "on_demand_cost_usd": 0.0,
            "market_seconds": 3600.0,
        }
        assert own_bill(row, "i-x")["market_seconds"] == 5400.0  # i-x's own: nothing off
