"""A compare-and-set bill write reads its date once it holds the lock it waits for, on SQLite
and PostgreSQL (:meth:`~spotwise.store.bills.BillWrites.rebill_instance_if_unchanged`'s
``clock``; s23, s22 report_I item 3, option 2).

`spotwise report` ends its default window a minute back (``SETTLE_S``) because a bill dated
before its write commits is invisible until then. A date read before the write waited (up to
the 30 s lock timeout, or a cancel's whole billing loop) could fall before the end of a
window read meanwhile; read under the lock, only the commit separates it from being seen."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

import sqlalchemy as sa
from shared_helpers import record_launch

from spotwise.store import Store
from spotwise.store.bills import extra_bills


class _Holder:
    """Another process that holds the lock a write of record l-0 waits for: SQLite's write
    lock, PostgreSQL's row lock."""

    def __init__(self, url: str, backend: str) -> None:
        self.backend = backend
        if backend == "sqlite":
            self.lite = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
            self.lite.execute("BEGIN IMMEDIATE")
        else:
            self.engine = sa.create_engine(url)
            self.conn = self.engine.connect()
            self.conn.exec_driver_sql("SELECT id FROM instance WHERE id = 'l-0' FOR UPDATE")

    def release(self) -> None:
        if self.backend == "sqlite":
            self.lite.execute("ROLLBACK")
            self.lite.close()
        else:
            self.conn.rollback()
            self.conn.close()
            self.engine.dispose()


def _dated_while_held(url: str, backend: str, **fields: Any) -> tuple[list[bool], Any]:
    """Write ``fields`` to l-0 as read, dated 5000 by a clock that notes whether the other
    process had let go of the lock when it was read; the notes and the row written."""
    with Store.open(url) as store:
        job = store.create_job("j", "{}", "job.yaml", "spot-greedy", "maximize")
        trial = store.add_trial(job.id, 0, {"lr": 0.1})
        record_launch(
            store, job.id, trial.id, price_per_hour=0.9, id="l-0", state="running",
            launched_at=1000.0, provider_instance_id="i-0", requested_at=999.0,
        )  # fmt: skip
        if fields.pop("closed", False):
            store.update_instance("l-0", state="terminated", ended_at=1100.0, cost_usd=0.025)
        seen = store.get_instance("l-0")
        released = threading.Event()
        notes: list[bool] = []
        out: list[Any] = []

        def clock() -> float:
            notes.append(released.is_set())
            return 5000.0

        holder = _Holder(url, backend)
        writer = threading.Thread(
            target=lambda: out.append(
                store.rebill_instance_if_unchanged(seen, clock=clock, **fields)
            )
        )
        try:
            writer.start()
            time.sleep(0.3)  # the write waits for the lock
        finally:
            released.set()
            holder.release()
            writer.join(timeout=60)
    return notes, out[0] if out else None


def test_a_close_is_dated_once_its_write_holds_the_lock(fresh_url: str, backend: str) -> None:
    """A cancel's close of an open record (billed_at). Was: no ``clock``; a date given was
    read before the write waited."""
    notes, row = _dated_while_held(
        fresh_url, backend, state="terminated", end_reason="reconciled", ended_at=1100.0,
        cost_usd=0.025, market_seconds=100.0,
    )  # fmt: skip
    assert notes == [True]  # read after the other let go, not while the write waited
    assert row is not None and (row.state, row.ended_at, row.billed_at) == (
        "terminated", 1100.0, 5000.0
    )  # fmt: skip


def test_a_part_of_a_closed_record_is_dated_once_its_write_holds_the_lock(
    fresh_url: str, backend: str
) -> None:
    """A sweep's bill of an instance that outlived its closed record: a part, dated so."""
    notes, row = _dated_while_held(
        fresh_url, backend, closed=True, part_of="i-0", cost_usd=0.05, market_seconds=200.0
    )
    assert notes == [True]
    assert row is not None and [p["at"] for p in extra_bills(row)] == [5000.0]
    assert row.billed_at == 1100.0  # its first bill stays where it was counted
