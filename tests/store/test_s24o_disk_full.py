"""A database whose disk fills says so, names the database and the fix (review-bf BF3).

Before: "database error while claiming job 'J': database or disk is full (sqlite:///...)",
the job's last line, named neither the fix nor the next step. Now SQLite's SQLITE_FULL and
PostgreSQL's full disk ("could not extend file", "No space left on device", SQLSTATE 53100)
are their own case next to the locked and read-only ones: one line naming the database
(redacted), free space, then `spotwise cancel J` and `spotwise resume J` where a job is known.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from spotwise.errors import StoreError
from spotwise.store import Store
from spotwise.store.db import store_error

FULL = "database or disk is full"


def _fix(job: str) -> str:
    return (
        f"free space on that disk, then `spotwise cancel {job}` (bills what the run could not "
        f"write) and, to continue the job, `spotwise resume {job}`"
    )


def test_a_real_sqlite_full_database_names_the_file_the_job_and_the_fix(tmp_path: Path) -> None:
    """SQLite's own SQLITE_FULL: the file may not grow a page more (``max_page_count``)."""
    store = Store.open(f"sqlite:///{tmp_path / 's.db'}")
    job = store.create_job("m", "{}", "spec.yaml", "spotwise", "minimize")
    event.listen(store.engine, "connect", lambda con, _: con.execute("PRAGMA max_page_count=1"))
    store.engine.dispose()  # the next connection may not grow the file
    with pytest.raises(StoreError) as full:
        store.update_job(job.id, error="x" * 200_000)
    assert isinstance(full.value.__cause__, OperationalError)
    assert full.value.exit_code == 5 and full.value.hint is None
    assert full.value.message == (
        f"the database at sqlite:///{tmp_path / 's.db'} cannot be written while updating job "
        f"{job.id!r}: its disk is full ({FULL}); {_fix(job.id)}"
    )
    store.engine.dispose()
    store.close()


def _sqlite_full() -> OperationalError:
    return OperationalError("UPDATE job SET ...", {}, sqlite3.OperationalError(FULL))


def test_the_job_s_end_write_names_cancel_and_resume(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 's.db'}")
    e = store_error(_sqlite_full(), engine, "claiming job 'j-8909db760e2882b1'")
    assert e.exit_code == 5 and "\n" not in e.message
    assert e.message == (
        f"the database at sqlite:///{tmp_path / 's.db'} cannot be written while claiming job "
        f"'j-8909db760e2882b1': its disk is full ({FULL}); {_fix('j-8909db760e2882b1')}"
    )


def test_with_no_job_known_it_says_free_space_and_run_again(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 's.db'}")
    e = store_error(_sqlite_full(), engine, "updating instance 'ee1023cd4fa6459f'")
    assert e.message == (
        f"the database at sqlite:///{tmp_path / 's.db'} cannot be written while updating "
        f"instance 'ee1023cd4fa6459f': its disk is full ({FULL}); free space on that disk, "
        "then run the command again"
    )
    assert "cancel" not in store_error(_sqlite_full()).message  # no engine, no action
    assert store_error(_sqlite_full()).message.startswith("the database at --db cannot be")


class _PgError(Exception):
    def __init__(self, text: str, **code: Any) -> None:
        super().__init__(text)
        self.__dict__.update(code)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('could not extend file "base/16384/16402": No space left on device', {}),
        ("could not write to file: No space left on device", {}),
        ("disk full", {"sqlstate": "53100"}),  # psycopg
        ("disk full", {"pgcode": "53100"}),  # psycopg2
    ],
)
def test_postgresql_s_full_disk_is_the_same_case_and_hides_the_password(
    text: str, code: dict[str, str]
) -> None:
    engine = sa.create_engine("postgresql+psycopg://spot:s3cret@db.example:5432/spotwise")
    exc = OperationalError("INSERT ...", {}, _PgError(text, **code))
    e = store_error(exc, engine, "adding trial 3 to job 'j-1'")
    assert "s3cret" not in e.message and "spot:***@db.example:5432/spotwise" in e.message
    assert e.message.endswith(f"while adding trial 3 to job 'j-1': its disk is full ({text}); "
                              + _fix("j-1"))  # fmt: skip


def test_other_errors_keep_their_own_line(tmp_path: Path) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 's.db'}")
    bad = OperationalError("SELECT", {}, sqlite3.OperationalError("no such table: job"))
    assert store_error(bad, engine, "reading jobs").message == (
        f"database error while reading jobs: no such table: job (sqlite:///{tmp_path / 's.db'})"
    )
