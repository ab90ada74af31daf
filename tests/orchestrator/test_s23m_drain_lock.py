"""The drain after a held database lock, and records closed by another process never reopened
(s23 helper M: review-az AZ2, AZ3; helper J's notes).

AZ2: once the orchestrator's store gave up waiting out a lock (its patience), the drain's first
step re-billed the failed bills, and that step's error event, each waiting a whole patience
again (and a heartbeat before each step), before any running instance was terminated: ~10 min
more of every instance. Now the store is impatient once it gave up, and the drain terminates
what runs before it touches the database.
AZ3: a revoked life whose bill failed twice was sent a terminate and billed as our stop.
Helper J: a launch that answered after a `cancel --force` had closed its record reopened it
(``state="running"``); a failed launch's cleanup wrote over a close by a cancel.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_s20g_drain_steps import PRICE, SPOT, Book, _book

from spotwise.errors import StoreError
from spotwise.planner import actions
from spotwise.planner.launch_retry import SameRequest
from spotwise.planner.runstate import TrialRun
from spotwise.providers.base import Instance, InstanceState, LaunchRequest, our_tags
from spotwise.store.existing import DatabaseLocked
from spotwise.store.heartbeat import Heartbeat

BUSY_S, GIVE_UP_S, PATIENCE_S = 0.05, 0.3, 3.0


def _hold_lock(path: Path, release: threading.Event) -> None:
    taken = threading.Event()

    def hold() -> None:
        con = sqlite3.connect(path, isolation_level=None, timeout=5)
        con.execute("BEGIN IMMEDIATE")
        taken.set()
        release.wait(20)
        con.execute("COMMIT")
        con.close()

    threading.Thread(target=hold, daemon=True).start()
    assert taken.wait(5)


def test_after_the_store_gave_up_the_drain_terminates_first_and_waits_no_patience(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("spotwise.store.db.SQLITE_BUSY_TIMEOUT_S", BUSY_S)
    monkeypatch.setattr("spotwise.store.records.LOCK_RETRY_PAUSE_S", 0.01)
    book = _book(tmp_path)
    taken = book.live(0, noticed=True)  # the market took it: its bill's write fails
    book.live(1), book.live(2)  # still running
    assert taken.life is not None
    taken.life.exited = True
    book.prov.running.discard("i-0")
    book.store.wait_out_locks(book.job_id, patience_s=GIVE_UP_S)  # the orchestrator's opt-in
    book.heartbeat = Heartbeat(book.store, book.job_id)
    release = threading.Event()
    _hold_lock(tmp_path / "state.db", release)
    revoked = Instance("i-0", SPOT, InstanceState.REVOKED, ended_at=1302.0)
    with pytest.raises(DatabaseLocked, match="after waiting"):  # the loop's write gives up
        book._settle_lives({"i-0": revoked}, 1307.0)
    # (a patience long enough to tell: opting in again does not make the store patient again)
    book.store.wait_out_locks(book.job_id, patience_s=PATIENCE_S)
    order: list[str] = []
    scope, terminate = book.store._scope, book.prov.terminate
    book.store._scope = lambda action: (order.append("db"), scope(action))[1]  # type: ignore[method-assign]
    book.prov.terminate = lambda ids: (order.append("terminate"), terminate(ids))[1]  # type: ignore[method-assign]

    started = time.monotonic()
    closing = book._drain(book.backend)  # type: ignore[arg-type]
    took = time.monotonic() - started
    release.set()

    assert order[0] == "terminate"  # before: a re-bill, an event and a heartbeat first
    assert book.prov.terminated == [["i-1", "i-2"]]  # the taken one is never terminated
    assert took < PATIENCE_S  # no write waited a patience (before: 2 x patience at least)
    assert isinstance(closing, DatabaseLocked)
    assert book.lives == {} and book.leftovers() == []  # all confirmed ended
    for n in range(3):  # the database never came back: left open for `spotwise cancel`
        assert book.store.get_instance(f"l-{n}").state == "running"
    book.store.close()


def _fail_writes(book: Book, n: int) -> list[str]:
    real, calls = book.store.rebill_instance_if_unchanged, []

    def rebill(seen: Any, **fields: Any) -> Any:
        calls.append(str(fields.get("state")))
        if len(calls) <= n:
            raise StoreError("database error while updating instance: database is locked")
        return real(seen, **fields)

    book.store.rebill_instance_if_unchanged = rebill  # type: ignore[method-assign]
    return calls


def test_a_revoked_life_whose_bill_fails_twice_is_billed_revoked_not_terminated(
    tmp_path: Path,
) -> None:
    """review-az AZ3: the loop's write and the drain's first re-bill fail, then the database
    is free: the life stays revoked, $0 (AWS's free first hour), never sent a terminate (was:
    terminated, billed ``stopped`` $0.025)."""
    book = _book(tmp_path)
    t = book.live(0, noticed=True)
    assert t.life is not None
    t.life.exited = True
    book.prov.running.discard("i-0")
    calls = _fail_writes(book, 2)
    with pytest.raises(StoreError):
        book._settle_lives(
            {"i-0": Instance("i-0", SPOT, InstanceState.REVOKED, ended_at=1302.0)}, 1307.0
        )

    assert book._drain(book.backend) is None  # type: ignore[arg-type]
    assert calls == ["revoked", "revoked", "revoked"]
    assert book.prov.terminated == []
    row = book.store.get_instance("l-0")
    assert (row.state, row.end_reason, row.cost_usd) == ("revoked", "revoked", 0.0)
    assert row.market_seconds == pytest.approx(1302.0)
    assert book.leftovers() == [] and book.lives == {} and book.spent_usd == 0.0
    book.store.close()


def test_a_revoked_life_whose_bills_all_fail_is_left_open_never_terminated(
    tmp_path: Path,
) -> None:
    book = _book(tmp_path)
    t = book.live(0, noticed=True)
    assert t.life is not None
    t.life.exited = True
    book.prov.running.discard("i-0")
    _fail_writes(book, 99)
    with pytest.raises(StoreError):
        book._settle_lives(
            {"i-0": Instance("i-0", SPOT, InstanceState.REVOKED, ended_at=1302.0)}, 1307.0
        )

    closing = book._drain(book.backend)  # type: ignore[arg-type]

    assert isinstance(closing, StoreError)
    assert book.drain_error(closing).startswith("billing the lives whose bill failed failed: ")
    assert book.prov.terminated == []  # was: [["i-0"]], a taken instance terminated as ours
    assert book.store.get_instance("l-0").state == "running"  # open: `spotwise cancel` bills it
    assert book.leftovers() == [] and book.lives == {} and book.spent_usd == 0.0
    book.store.close()


class Launcher(Book, actions.Actions):
    """:class:`Book` with the launch's own code (:meth:`actions.Actions._call_launch`)."""


def _launcher(tmp_path: Path) -> tuple[Launcher, TrialRun]:
    store = _book(tmp_path).store
    job = store.list_jobs()[0]
    book = Launcher(store, job.id, [])
    book.throttled, book.blocked, book.quota_full = {}, {}, {}
    row = store.add_trial(job.id, 0, {"lr": 0.01})
    t = TrialRun(row.id, 0, {"lr": 0.01}, 6, 2)
    book.trials.append(t)
    return book, t


def test_a_launch_answering_after_a_cancel_closed_its_record_does_not_reopen_it(
    tmp_path: Path,
) -> None:
    """Frozen in the launch call, the job was `cancel --force`d from elsewhere: its record
    closed ($0.01, reconciled; no instance found yet). The answer no longer writes the record
    ``running`` (was: reopened, a life billed again): its instance is terminated and billed to
    the record as a part naming it; no life."""
    book, t = _launcher(tmp_path)
    tags = our_tags(book.job_id, t.trial_id, "l-5")
    book.store.record_launch(
        id="l-5", job_id=book.job_id, trial_id=t.trial_id, provider="aws", region="us-east-1",
        zone="us-east-1a", instance_type="p3.2xlarge", market="spot", offer_key=SPOT.key,
        price_per_hour=PRICE, tags_json="{}", requested_at=time.time(),
    )  # fmt: skip

    def launch(req: LaunchRequest) -> Instance:
        book.store.update_instance(  # the cancel, meanwhile
            "l-5", state="terminated", end_reason="reconciled", ended_at=time.time(),
            cost_usd=0.01,
        )  # fmt: skip
        book.prov.running.add("i-5")
        return Instance("i-5", SPOT, InstanceState.RUNNING, tags, 40.0)

    book.prov.launch = launch  # type: ignore[attr-defined]
    req = LaunchRequest(SPOT, ("python",), {"SPOTWISE_RESUME_STEP": "0"}, tags, "l-5")
    book._call_launch(SameRequest(t, req, 40.0, 1), 40.0)

    row = book.store.get_instance("l-5")
    assert (row.state, row.end_reason) == ("terminated", "reconciled")  # was: running
    assert book.prov.terminated == [["i-5"]] and book.lives == {} and t.life is None
    assert row.cost_usd == pytest.approx(0.01 + 60.0 * PRICE / 3600.0)  # 60 s (AWS minimum)
    assert row.extra_bills_json and '"instance": "i-5"' in row.extra_bills_json
    assert book.store.get_trial(t.trial_id).cost_usd == pytest.approx(row.cost_usd)
    book.store.close()


def test_a_failed_launchs_cleanup_keeps_a_close_written_by_a_cancel(tmp_path: Path) -> None:
    """A failed launch's cleanup found nothing of it (clean) while a cancel had closed its
    record meanwhile: the cancel's close and bill stand (was: written over, ``failed``)."""
    book, t = _launcher(tmp_path)
    book.store.record_launch(
        id="l-6", job_id=book.job_id, trial_id=t.trial_id, provider="aws", region="us-east-1",
        zone="us-east-1a", instance_type="p3.2xlarge", market="spot", offer_key=SPOT.key,
        price_per_hour=PRICE, tags_json="{}", requested_at=time.time(),
    )  # fmt: skip
    describe = book.prov.describe

    def listing(tags: Any = None) -> list[Instance]:
        book.store.update_instance(  # the cancel, while the cleanup lists the launch
            "l-6", state="terminated", end_reason="reconciled", ended_at=1.0, cost_usd=0.02
        )
        return describe(tags)

    book.prov.describe = listing  # type: ignore[method-assign]
    book._close_failed_launch(t, "l-6", 40.0, SPOT)

    row = book.store.get_instance("l-6")
    assert (row.state, row.end_reason, row.cost_usd) == ("terminated", "reconciled", 0.02)
    assert book.unconfirmed == {} and book.leftovers() == []
    book.store.close()
