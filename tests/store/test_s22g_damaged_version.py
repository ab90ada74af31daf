"""A spotwise database whose ``alembic_version`` holds no revision, or several, is a damaged
database (review-as AS4): exit 5, saying so, on every command.

Before: with the rows deleted, `report --check` exited 3 "no spotwise database … run tune
first" over a file holding jobs (and `tune` there failed on CREATE TABLE, after 2 s of
retries); with a second row it said "revision None is unknown". Another program's ``job``
table is still "no spotwise database" (exit 3), and a new database is still created."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from shared_helpers import cli_env_isolated, main_in_process

from spotwise.errors import NotFoundError, StoreError
from spotwise.store import Store
from spotwise.store.db import current_revision, head_revision


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cli_env_isolated(monkeypatch, tmp_path)


def _damaged(path: Path, sql: str) -> str:
    """A spotwise database with a job, then ``sql`` run on it by hand."""
    url = f"sqlite:///{path}"
    with Store.open(url) as s:
        s.create_job("n", "{}", "spec.yaml", "spotwise", "minimize", job_id="j-1")
    con = sqlite3.connect(path)
    con.execute(sql)
    con.commit()
    con.close()
    return url


def _rows(path: Path) -> tuple[list[str], list[str]]:
    con = sqlite3.connect(path)
    try:
        versions = sorted(r[0] for r in con.execute("SELECT version_num FROM alembic_version"))
        return versions, [r[0] for r in con.execute("SELECT id FROM job")]
    finally:
        con.close()


CASES = [
    ("DELETE FROM alembic_version", "its alembic_version table holds no revision", []),
    (
        "INSERT INTO alembic_version VALUES ('0004')",
        "its alembic_version table holds 2 revisions ('0004', '0006'), not one",
        ["0004", "0006"],
    ),
]


@pytest.mark.parametrize(("sql", "says", "versions"), CASES)
@pytest.mark.parametrize("command", [["report", "--check", "--json"], ["status", "--json"]])
def test_a_read_of_a_damaged_version_table_exits_5_saying_so(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    sql: str,
    says: str,
    versions: list[str],
    command: list[str],
) -> None:
    path = tmp_path / "spotwise.db"
    url = _damaged(path, sql)
    code, out, err = main_in_process(monkeypatch, capsys, *command, "--db", url)
    assert (code, out) == (5, ""), err
    assert err[0] == f"error: damaged spotwise database at {url}: {says}; it was edited or damaged"
    assert len(err) == 2 and err[1].startswith("hint: restore it from a copy")
    assert "None" not in err[0] and "tune" not in err[0]
    assert _rows(path) == (versions, ["j-1"])  # nothing stamped, created or dropped


@pytest.mark.parametrize(("sql", "says", "versions"), CASES)
def test_tune_refuses_it_at_once_and_changes_nothing(
    tmp_path: Path, sql: str, says: str, versions: list[str]
) -> None:
    """`tune`'s open (``Store.open``): an empty table was migrated from no revision (CREATE
    TABLE job: already exists, retried for 2 s); two rows said "revision None"."""
    path = tmp_path / "spotwise.db"
    url = _damaged(path, sql)
    started = time.monotonic()
    with pytest.raises(StoreError) as err:
        Store.open(url)
    assert time.monotonic() - started < 1.5  # no retries
    assert str(err.value) == f"damaged spotwise database at {url}: {says}; it was edited or damaged"
    assert err.value.exit_code == 5
    assert _rows(path) == (versions, ["j-1"])


def test_another_programs_job_table_with_an_empty_version_table_is_still_no_database(
    tmp_path: Path,
) -> None:
    """An alembic_version with no row beside a ``job`` table that is not spotwise's (other
    columns): "no spotwise database" (exit 3), as before; left as it was."""
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
    con.execute("CREATE TABLE job (id INTEGER PRIMARY KEY, title TEXT)")
    con.commit()
    con.close()
    with pytest.raises(NotFoundError) as err:
        Store.open_existing(f"sqlite:///{path}")
    assert err.value.exit_code == 3
    assert "(its alembic_version records no revision)" in str(err.value)


def test_an_empty_version_table_alone_is_a_new_database_tune_creates(tmp_path: Path) -> None:
    path = tmp_path / "spotwise.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
    con.commit()
    con.close()
    with Store.open(f"sqlite:///{path}") as s, s.engine.connect() as conn:
        assert current_revision(conn) == head_revision()
        assert sa.inspect(conn).has_table("job")
