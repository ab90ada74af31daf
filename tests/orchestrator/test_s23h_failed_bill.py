"""A life whose bill's write fails stays known to the drain, which closes its record
(review-ax AX2 item 3).

Before: ``Ledger._bill`` took the life out of ``lives`` before writing its record. When that
write raised (the database locked past its busy timeout), the job failed, the drain no longer
knew the life, and its record stayed ``running``: resume was refused until a cancel, which
billed it from its start to the orchestrator's last record (3.3 market h, where the market had
taken it within its free first hour). Now the life leaves ``lives``, and its cost the totals,
only once its record is written; the drain writes the failed bill again as the life ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_s20g_drain_steps import PRICE, Book, _book

from spotwise.errors import StoreError
from spotwise.providers.base import Instance, InstanceState

REVOKED_AT = 1302.0  # market s after launch: within AWS's free first hour


def _fail_once(book: Book, launch_id: str) -> list[str]:
    """The bill's write (the store's compare-and-set of an open record) raises once for
    ``launch_id`` (a lock past its wait)."""
    real, failed = book.store.rebill_instance_if_unchanged, []

    def rebill(seen: Any, **fields: Any) -> Any:
        if seen.id == launch_id and not failed:
            failed.append(seen.id)
            raise StoreError(
                f"database error while updating instance {seen.id!r}: database is locked"
            )
        return real(seen, **fields)

    book.store.rebill_instance_if_unchanged = rebill  # type: ignore[method-assign]
    return failed


def test_a_revoked_life_whose_bill_failed_is_closed_by_the_drain_as_revoked(
    tmp_path: Path,
) -> None:
    book = _book(tmp_path)
    t = book.live(0, noticed=True)
    assert t.life is not None
    t.life.exited = True  # its trial left: the market took the instance
    book.prov.running.discard("i-0")
    failed = _fail_once(book, "l-0")
    taken = Instance("i-0", t.life.offer, InstanceState.REVOKED, ended_at=REVOKED_AT)

    with pytest.raises(StoreError, match="database is locked"):
        book._settle_lives({"i-0": taken}, REVOKED_AT + 5)  # what fails the job's loop

    assert failed == ["l-0"]
    assert "i-0" in book.lives  # before: popped, the drain never billed it
    assert book.spent_usd == 0.0 and t.cost_usd == 0.0  # nothing counted for an unwritten bill

    closing = book._drain(book.backend)  # type: ignore[arg-type]

    assert closing is None
    row = book.store.get_instance("l-0")
    assert (row.state, row.end_reason) == ("revoked", "revoked")  # before: ("running", None)
    assert row.cost_usd == 0.0  # taken within its first hour: free (AWS), not 100 s of ours
    assert row.market_seconds == pytest.approx(REVOKED_AT)
    assert book.lives == {} and book.leftovers() == []
    assert book.prov.terminated == []  # not terminated and billed as ours
    assert book.spent_usd == 0.0 and book.failed_bills == {}
    book.store.close()


def test_an_ended_life_whose_bill_fails_again_is_billed_as_it_ended_not_terminated(
    tmp_path: Path,
) -> None:
    """The database still locked at the drain's first re-bill: it is tried again at the end
    of the drain, and the life, known ended (at 50 s), is billed as it ended, never sent a
    terminate nor billed up to the drain as ours (review-az AZ3: it was terminated and billed
    100 s ``stopped``)."""
    book = _book(tmp_path)
    t = book.live(0)
    assert t.life is not None
    t.life.exited = True
    book.prov.running.discard("i-0")
    real = book.store.rebill_instance_if_unchanged
    calls: list[dict[str, Any]] = []

    def locked_until_open(seen: Any, **fields: Any) -> Any:
        calls.append(fields)
        if len(calls) <= 2:  # the loop's write and the drain's first re-bill
            raise StoreError("database error while updating instance: database is locked")
        return real(seen, **fields)

    book.store.rebill_instance_if_unchanged = locked_until_open  # type: ignore[method-assign]
    ended = Instance("i-0", t.life.offer, InstanceState.TERMINATED, ended_at=50.0)
    with pytest.raises(StoreError):
        book._settle_lives({"i-0": ended}, 60.0)

    closing = book._drain(book.backend)  # type: ignore[arg-type]

    assert closing is None  # the last re-bill wrote it
    assert [c.get("state") for c in calls] == ["terminated", "terminated", "terminated"]
    assert book.prov.terminated == []  # ended: never sent a terminate
    row = book.store.get_instance("l-0")
    assert (row.state, row.end_reason) == ("terminated", "stopped")
    assert row.market_seconds == pytest.approx(50.0)  # as it ended, not up to the drain (100)
    assert row.cost_usd == pytest.approx(60.0 * PRICE / 3600.0)  # AWS's 60 s minimum
    assert book.lives == {} and book.leftovers() == [] and book.failed_bills == {}
    assert book.spent_usd == pytest.approx(row.cost_usd)
    book.store.close()
