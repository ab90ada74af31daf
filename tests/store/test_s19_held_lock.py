"""A read-only command on a rollback-journal (non-WAL) SQLite database whose write lock another
process holds waits one busy timeout at most, and says it was reading (review-ah F2).

Before: `report --check` waited two busy timeouts (66 s): the schema check's own connection
waited one, then the engine's connection waited another to switch the file to WAL mode, and
the error said "while migrating the schema" though nothing needed migrating. While the other
process only held its write lock (not yet committing: readers may read), the read still
failed after a whole timeout, on the WAL switch it did not need.

The lock is held by a second sqlite3 connection; the busy timeout is cut to 0.6 s here
(``SQLITE_BUSY_TIMEOUT_S``, 30 s in use).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from shared_helpers import cli_env_isolated, main_in_process, rollback_journal_db

from spotwise.errors import StoreError
from spotwise.store import Store

TIMEOUT_S = 0.6


_cli = main_in_process  # tests/shared_helpers.py


@pytest.fixture(autouse=True)
def _short_busy_timeout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("spotwise.store.db.SQLITE_BUSY_TIMEOUT_S", TIMEOUT_S)
    cli_env_isolated(monkeypatch, tmp_path)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A spotwise database with one job, in rollback-journal mode."""
    return rollback_journal_db(tmp_path / "spotwise.db")


def _mode(path: Path) -> str:
    con = sqlite3.connect(path)
    try:
        return str(con.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        con.close()


@pytest.fixture
def exclusive(db: Path) -> Iterator[sqlite3.Connection]:
    """Another process's exclusive lock (as while it commits): no reader may read."""
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    yield con
    con.execute("ROLLBACK")
    con.close()


@pytest.fixture
def writing(db: Path) -> Iterator[sqlite3.Connection]:
    """Another process writing, its transaction not committed yet (a RESERVED lock)."""
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    con.execute("UPDATE job SET name = 'renamed'")
    yield con
    con.execute("ROLLBACK")
    con.close()


@pytest.mark.usefixtures("exclusive")
def test_report_check_under_a_held_lock_waits_one_timeout_and_says_reading(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    started = time.monotonic()
    with pytest.raises(StoreError):
        Store.open_existing(f"sqlite:///{db}")  # what report, status and trials open
    waited = time.monotonic() - started
    assert TIMEOUT_S <= waited < 1.5 * TIMEOUT_S, waited  # before: two timeouts
    code, out, err = _cli(monkeypatch, capsys, "report", "--check", "--db", f"sqlite:///{db}")
    assert (code, out) == (5, ""), err
    assert err == [
        f"error: database error while reading the schema: database is locked ({db})",
        "hint: another spotwise process is writing to the database; retry in a moment",
    ]


@pytest.mark.usefixtures("exclusive")
def test_opening_for_tune_under_a_held_lock_waits_one_timeout_too(db: Path) -> None:
    started = time.monotonic()
    with pytest.raises(StoreError) as err:
        Store.open(f"sqlite:///{db}")
    waited = time.monotonic() - started
    assert str(err.value) == (
        f"database error while reading the schema: database is locked (sqlite:///{db})"
    )
    assert waited < 1.5 * TIMEOUT_S, waited


@pytest.mark.usefixtures("writing")
def test_a_read_while_another_process_writes_reads_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], db: Path
) -> None:
    """Readers may read a rollback-journal database while a writer has not begun to commit;
    the read waited for the WAL switch it did not need, a whole timeout, and failed."""
    started = time.monotonic()
    with Store.open_existing(f"sqlite:///{db}") as s:
        assert [(j.id, j.name) for j in s.list_jobs()] == [("j-1", "n")]  # the committed name
    assert time.monotonic() - started < 0.5 * TIMEOUT_S
    code, out, err = _cli(monkeypatch, capsys, "status", "--json", "--db", f"sqlite:///{db}")
    assert (code, err) == (0, []) and '"j-1"' in out
    assert _mode(db) == "delete"  # not switched while another process writes


def test_a_later_connection_switches_it_to_wal(db: Path) -> None:
    with Store.open_existing(f"sqlite:///{db}") as s:
        assert [j.id for j in s.list_jobs()] == ["j-1"]
    assert _mode(db) == "wal"
