"""The orchestrator never writes its bill over a record another process closed (s23 helper G,
"noticed, not fixed").

A machine frozen past the heartbeat's 90 s (SIGSTOP, a suspend) lets `spotwise cancel --force`
run from elsewhere: it terminates the job's instances and closes (bills) their records. The
orchestrator wakes, hears the cancel, and its own bill (``Ledger._bill``, from the loop or the
drain) was a plain ``update_instance``: it wrote its bill over the cancel's (the record's cost
replaced, a negative part added, ``reconciled`` renamed ``stopped``), counted the life again in
its totals, and named an instance the cancel had confirmed gone a leftover. Now the close is a
compare-and-set on the record still open; a record closed first keeps its bill, which is taken
as the life's (counted once), logged and a ``billed_elsewhere`` event.

Deterministic: the drain's test ledger over a real store (test_s20g_drain_steps), the forced
cancel's close written through the store as release.py writes it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from test_s20g_drain_steps import PRICE, Book, _book

from spotwise.errors import ProviderError
from spotwise.providers.base import Instance, InstanceState
from spotwise.store import Store

CANCEL_S = 250.0  # what the forced cancel billed each life: 250 market s
CANCEL_USD = CANCEL_S * PRICE / 3600.0  # $0.0625
DRAIN_USD = 100.0 * PRICE / 3600.0  # the test drain's own bill (its clock reads 100): $0.025


def _force_cancel_closes(store: Store, launch_id: str) -> None:
    """As `spotwise cancel --force` closes a record it confirmed gone (release.py
    ``_bill_record``): a compare-and-set dated as written, then the trial's and the job's
    cost set to their records' sums."""
    seen = store.get_instance(launch_id)
    done = store.rebill_instance_if_unchanged(
        seen,
        clock=time.time,
        state="terminated",
        end_reason="reconciled",
        ended_at=90.0,
        cost_usd=CANCEL_USD,
        on_demand_cost_usd=3 * CANCEL_USD,
        market_seconds=CANCEL_S,
    )
    assert done is not None
    store.update_trial_cost_to_lives(seen.trial_id)
    store.update_job_cost_to_records(seen.job_id)


def _records(book: Book) -> list[Any]:
    return book.store.list_instances(book.job_id)


def _kept_by_the_cancel(book: Book, launch_id: str) -> None:
    row = book.store.get_instance(launch_id)
    assert (row.state, row.end_reason, row.ended_at) == ("terminated", "reconciled", 90.0)
    assert row.cost_usd == pytest.approx(CANCEL_USD)
    assert row.market_seconds == pytest.approx(CANCEL_S)
    assert row.extra_bills_json is None  # no part: not billed again on top, nor replaced
    events = book.store.events(book.job_id, kind="billed_elsewhere")
    assert [(e.instance_id, e.detail["cost_usd"]) for e in events] == [(launch_id, CANCEL_USD)]


def test_the_drain_keeps_the_bill_of_a_record_a_forced_cancel_closed(tmp_path: Path) -> None:
    """Two lives; the cancel closed l-0 while the orchestrator was frozen. The drain
    terminates both and bills l-1 only; l-0 keeps the cancel's bill, counted once: the job's
    cost is its records' sum ($0.0625 + $0.025), each trial's its lives'."""
    book = _book(tmp_path)
    t0, t1 = book.live(0), book.live(1)
    _force_cancel_closes(book.store, "l-0")

    assert book._drain(book.backend) is None  # type: ignore[arg-type]

    _kept_by_the_cancel(book, "l-0")
    row1 = book.store.get_instance("l-1")
    assert (row1.state, row1.end_reason) == ("terminated", "stopped")
    assert row1.cost_usd == pytest.approx(DRAIN_USD)
    records = _records(book)
    assert book.spent_usd == pytest.approx(sum(r.cost_usd for r in records))
    assert book.spent_usd == pytest.approx(CANCEL_USD + DRAIN_USD)  # before: 2 x DRAIN_USD
    assert book.on_demand_usd == pytest.approx(sum(r.on_demand_cost_usd for r in records))
    assert (t0.cost_usd, t1.cost_usd) == (pytest.approx(CANCEL_USD), pytest.approx(DRAIN_USD))
    assert book.store.get_trial(t0.trial_id).cost_usd == pytest.approx(CANCEL_USD)
    job = book.store.update_job_cost_to_records(book.job_id)  # the end's `_cost_to_records`
    assert job.cost_usd == pytest.approx(book.spent_usd)  # one figure, each life once
    assert book.lives == {} and book.leftovers() == []
    book.store.close()


def test_a_life_seen_ended_after_the_forced_cancel_is_not_billed_again(tmp_path: Path) -> None:
    """The loop's pass after the wake: the cancel killed the trial's instance, the
    orchestrator sees it ended and bills it (``_settle_lives``): the cancel's bill stands."""
    book = _book(tmp_path)
    t = book.live(0)
    assert t.life is not None
    _force_cancel_closes(book.store, "l-0")
    t.life.exited = True
    book.prov.running.discard("i-0")
    ended = Instance("i-0", t.life.offer, InstanceState.TERMINATED, ended_at=95.0)

    book._settle_lives({"i-0": ended}, 100.0)

    _kept_by_the_cancel(book, "l-0")
    assert book.spent_usd == pytest.approx(CANCEL_USD)  # before: the loop's own $0.02375
    assert t.cost_usd == pytest.approx(CANCEL_USD) and book.lives == {}
    book.store.close()


def test_a_cancel_that_closes_the_record_between_read_and_write_wins(tmp_path: Path) -> None:
    """The cancel's close lands after the orchestrator read the record open and before its
    write: the write is a compare-and-set, so it loses, and the cancel's bill stands (a check
    of the state, then a plain write, would have written over it)."""
    book = _book(tmp_path)
    t = book.live(0)
    assert t.life is not None
    real = book.store.get_instance
    raced: list[str] = []

    def read_then_cancel(launch_id: str) -> Any:
        row = real(launch_id)
        if not raced:
            raced.append(launch_id)
            _force_cancel_closes(book.store, launch_id)  # the other process, in between
        return row

    book.store.get_instance = read_then_cancel  # type: ignore[method-assign]
    book._bill(t, t.life, InstanceState.TERMINATED, 100.0)
    book.store.get_instance = real  # type: ignore[method-assign]

    assert raced == ["l-0"]
    _kept_by_the_cancel(book, "l-0")
    assert book.spent_usd == pytest.approx(CANCEL_USD) and book.lives == {}
    book.store.close()


def test_a_life_the_provider_refuses_to_terminate_is_no_leftover_once_the_cancel_closed_it(
    tmp_path: Path,
) -> None:
    """The drain's terminate is refused (``_bill`` with ``RUNNING``: billed up to now, the
    record left open, the instance named a leftover). The cancel had closed the record, having
    confirmed the instance gone: its bill stands, and the job names no leftover."""
    book = _book(tmp_path)
    book.live(0)
    _force_cancel_closes(book.store, "l-0")
    book.prov.terminate_fails = ProviderError("aws: InvalidInstanceID.NotFound")

    assert book._drain(book.backend) is None  # type: ignore[arg-type]

    _kept_by_the_cancel(book, "l-0")
    assert book.leftovers() == []  # before: ["i-0"], and the job's end said to cancel again
    assert book.leftover_error(None) is None
    assert book.spent_usd == pytest.approx(CANCEL_USD)
    book.store.close()
