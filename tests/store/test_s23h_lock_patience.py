"""A running job's store waits out another process's lock on the database (review-ax AX2).

Another process held SQLite's write lock past the 30 s busy timeout (a VACUUM, a backup, a
stuck writer): one orchestrator write failed, and with it the whole running job (exit 5). A
store the orchestrator opted in (:meth:`Store.wait_out_locks`) runs a write that met the lock
again, logging a warning each time, up to its patience; then its error names the job and
`spotwise resume`. A command's store (not opted in) and the heartbeat still fail on one busy
timeout. The lock is a real one (a thread's ``BEGIN IMMEDIATE``); the busy timeout is cut to
0.2 s here.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotwise.errors import StoreError
from spotwise.store import Store
from spotwise.store.existing import DatabaseLocked

TIMEOUT_S = 0.2


@pytest.fixture(autouse=True)
def _short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spotwise.store.db.SQLITE_BUSY_TIMEOUT_S", TIMEOUT_S)
    monkeypatch.setattr("spotwise.store.records.LOCK_RETRY_PAUSE_S", 0.01)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[tuple[Store, str, Path]]:
    path = tmp_path / "spotwise.db"
    s = Store.open(f"sqlite:///{path}")
    job = s.create_job("j", "{}", "", "spot-greedy", "minimize", job_id="j-s23h")
    yield s, job.id, path
    s.close()


def _hold(path: Path, seconds: float) -> threading.Thread:
    """Another process's write lock, held ``seconds`` from now (a thread's own connection)."""
    taken = threading.Event()

    def hold() -> None:
        con = sqlite3.connect(path, isolation_level=None, timeout=5)
        con.execute("BEGIN IMMEDIATE")
        taken.set()
        time.sleep(seconds)
        con.execute("COMMIT")
        con.close()

    th = threading.Thread(target=hold, daemon=True)
    th.start()
    assert taken.wait(5)
    return th


def test_a_running_jobs_write_waits_out_a_lock_past_the_busy_timeout(
    store: tuple[Store, str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    s, job_id, path = store
    s.wait_out_locks(job_id, patience_s=10.0)
    th = _hold(path, 4 * TIMEOUT_S)  # four busy timeouts: before, the first failed the job
    caplog.set_level(logging.WARNING, logger="spotwise.store")
    started = time.monotonic()
    s.update_job(job_id, cost_usd=1.25)
    s.add_event(job_id, "notice", 1.0, instance_id="i-1")
    waited = time.monotonic() - started
    th.join()
    assert s.get_job(job_id).cost_usd == 1.25
    assert [e.kind for e in s.events(job_id)] == ["notice"]  # written once, not twice
    assert 3 * TIMEOUT_S <= waited < 10.0, waited
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned, "no warning said the write waited"
    assert all(
        m.startswith(f"{job_id}: database error while updating job 'j-s23h': database is locked")
        and "another process holds the database's lock; waited" in m
        and "waiting again (the job fails after 10 s)" in m
        for m in warned
    ), warned


def test_past_its_patience_the_error_names_the_job_and_resume(
    store: tuple[Store, str, Path],
) -> None:
    s, job_id, path = store
    s.wait_out_locks(job_id, patience_s=3 * TIMEOUT_S)
    th = _hold(path, 10 * TIMEOUT_S)
    started = time.monotonic()
    with pytest.raises(DatabaseLocked) as err:
        s.update_job(job_id, cost_usd=2.0)
    waited = time.monotonic() - started
    th.join()
    assert 3 * TIMEOUT_S <= waited < 6 * TIMEOUT_S, waited
    assert err.value.job_id == job_id
    assert str(err.value).startswith(
        f"job {job_id}: database error while updating job 'j-s23h': database is locked ("
    )
    assert str(err.value).endswith("s for another process's lock")
    assert err.value.hint is not None
    assert err.value.hint.startswith(
        f"once the database is free, `spotwise resume {job_id}` continues the job"
    )
    assert err.value.exit_code == 5


def test_a_commands_store_and_the_heartbeat_still_fail_on_one_busy_timeout(
    store: tuple[Store, str, Path],
) -> None:
    s, job_id, path = store
    th = _hold(path, 6 * TIMEOUT_S)
    started = time.monotonic()
    with pytest.raises(StoreError, match="database is locked"):
        s.update_job(job_id, cost_usd=3.0)  # not opted in: a CLI command's store
    assert time.monotonic() - started < 2.5 * TIMEOUT_S
    s.wait_out_locks(job_id, patience_s=10.0)
    started = time.monotonic()
    with pytest.raises(StoreError, match="heartbeat"):
        s.heartbeat(job_id, 123.0)  # Heartbeat skips a failed one: it never waits longer
    assert time.monotonic() - started < 2.5 * TIMEOUT_S
    th.join()


def test_a_patient_method_calling_another_waits_once_not_twice(
    store: tuple[Store, str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """``update_job`` (patient) in a patient caller: the outer call's patience is the only one."""
    s, job_id, path = store
    s.wait_out_locks(job_id, patience_s=3 * TIMEOUT_S)
    s.wait_out_locks(job_id, patience_s=3 * TIMEOUT_S)  # twice: not wrapped twice
    th = _hold(path, 12 * TIMEOUT_S)
    started = time.monotonic()
    with pytest.raises(DatabaseLocked):
        s.update_job(job_id, cost_usd=4.0)
    assert time.monotonic() - started < 7 * TIMEOUT_S
    th.join()


def test_the_owner_checked_trial_writes_wait_out_a_lock_too(
    store: tuple[Store, str, Path],
) -> None:
    """s24 helper C's trial writes checked on the job's owner are the store's methods, so a
    running job's store waits out a lock on them as on the others (they began as plain
    functions over the store's session scope: one busy timeout failed the job)."""
    s, job_id, path = store
    owner = {"pid": 4242, "host": "here", "pid_start": None}
    s.update_job(job_id, **owner)
    trial = s.add_trial(job_id, 0, {})
    s.wait_out_locks(job_id, patience_s=10.0)
    th = _hold(path, 4 * TIMEOUT_S)
    assert s.update_trial_if_owner(job_id, owner, trial.id, {"state": "running", "step": 3})
    assert s.add_observation_if_owner(job_id, owner, trial.id, 3, 0.5, 1.0)
    th.join()
    assert (s.get_trial(trial.id).state.value, s.get_trial(trial.id).step) == ("running", 3)
