"""Revision 0006 marks a change in how rows are written, so older spotwise writers refuse the
database (review-bc BC2); a database newer than this spotwise is refused at once, exit 5,
writing nothing (BC3).

Before: the newest revision was 0005, which every spotwise since c2ce2ca shares, so a
teammate's older install wrote next to the newer one with its old rules (its cancel added a
trial's bill on top of the records' sum). A database at a revision this spotwise does not know
was refused only after taking the write lock (``BEGIN IMMEDIATE``): opened read-only
(``?mode=ro``) it said "attempt to write a readonly database" instead of "upgrade spotwise".
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from shared_helpers import cli_env_isolated, main_in_process
from sqlmodel import SQLModel
from test_store_schema import start_together

from spotwise.errors import StoreError
from spotwise.store import Store
from spotwise.store.db import alembic_config, head_revision, migrate

OLDER = ["0001", "0002", "0003", "0004", "0005"]


def _revision(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return [r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]


def _downgrade(url: str, to: str) -> None:
    """A spotwise database at ``url`` with job ``j-1``, taken back to revision ``to``."""
    with Store.open(url) as s:
        s.create_job("n", "{}", "spec.yaml", "spotwise", "minimize", job_id="j-1")
        with s.engine.connect() as conn:
            command.downgrade(alembic_config(conn), to)
            conn.commit()


def _columns(engine: sa.Engine) -> dict[str, list[str]]:
    insp = sa.inspect(engine)
    return {t: sorted(c["name"] for c in insp.get_columns(t)) for t in insp.get_table_names()}


def test_head_is_0006_a_revision_that_changes_no_table(tmp_path: Path) -> None:
    assert head_revision() == "0006"
    url = f"sqlite:///{tmp_path / 'spotwise.db'}"
    _downgrade(url, "0005")
    engine = sa.create_engine(url)
    try:
        before = _columns(engine)
        migrate(engine)
        assert _revision(engine) == ["0006"]
        assert _columns(engine) == before  # the tables, columns (and rows, below) are 0005's
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT id, name FROM job").all() == [("j-1", "n")]
    finally:
        engine.dispose()


@pytest.mark.parametrize("older", OLDER)
def test_every_older_revision_upgrades_to_head_keeping_its_rows(fresh_url: str, older: str) -> None:
    _downgrade(fresh_url, older)
    with Store.open(fresh_url) as s:
        assert _revision(s.engine) == ["0006"]
        assert s.get_job("j-1").name == "n"
        with s.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), SQLModel.metadata) == []


def test_downgrade_to_0005_and_upgrade_again(fresh_url: str) -> None:
    _downgrade(fresh_url, "0005")
    engine = sa.create_engine(fresh_url)
    try:
        assert _revision(engine) == ["0005"]
        migrate(engine)
        assert _revision(engine) == ["0006"]
    finally:
        engine.dispose()


def test_processes_opening_a_0005_database_at_once_all_upgrade_it(fresh_url: str) -> None:
    _downgrade(fresh_url, "0005")
    results = start_together(fresh_url, 2)
    assert [rc for rc, _ in results] == [0, 0], results
    with Store.open(fresh_url) as s:
        assert _revision(s.engine) == ["0006"]
        assert s.get_job("j-1").name == "n"


# --- a database newer than this spotwise ---------------------------------------------------


def _newer(path: Path) -> Path:
    """A spotwise database (WAL mode, as spotwise makes it) with job ``j-1``, whose revision
    (``0099``) a newer spotwise wrote."""
    with Store.open(f"sqlite:///{path}") as s:
        s.create_job("n", "{}", "spec.yaml", "spotwise", "minimize", job_id="j-1")
    con = sqlite3.connect(path)
    con.execute("UPDATE alembic_version SET version_num = '0099'")
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return path


@pytest.mark.parametrize("query", ["", "?mode=ro&uri=true"])
@pytest.mark.parametrize("args", [["status"], ["report", "--check"], ["trials", "j-1"]])
def test_a_newer_database_is_refused_exit_5_naming_the_upgrade_writing_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    query: str,
) -> None:
    cli_env_isolated(monkeypatch, tmp_path)
    path = _newer(tmp_path / "spotwise.db")
    before = path.read_bytes()
    url = f"sqlite:///file:{path}{query}" if query else f"sqlite:///{path}"
    code, out, err = main_in_process(monkeypatch, capsys, *args, "--db", url)
    assert code == 5
    assert err[0].startswith(
        "error: database schema revision '0099' is unknown to this spotwise (newest is "
        "'0006'): a newer spotwise upgraded the database at "
    )
    assert err[1].startswith("hint: upgrade spotwise here")
    assert len(err) == 2 and out == ""
    assert path.read_bytes() == before


def test_a_newer_database_is_refused_before_any_write_lock(tmp_path: Path) -> None:
    """Another process holding the write lock does not delay the refusal (it was waited for
    past the 30 s busy timeout, then reported as a lock)."""
    path = _newer(tmp_path / "spotwise.db")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    started = time.monotonic()
    try:
        with pytest.raises(StoreError, match="unknown to this spotwise") as refused:
            Store.open(f"sqlite:///{path}")
        assert refused.value.exit_code == 5
        assert time.monotonic() - started < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_newer_database_is_refused_on_every_backend(fresh_url: str) -> None:
    with Store.open(fresh_url) as s:
        s.create_job("n", "{}", "spec.yaml", "spotwise", "minimize", job_id="j-1")
        with s.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0099'")
    for opening in (Store.open, Store.open_existing):
        with pytest.raises(StoreError, match=r"revision '0099' is unknown to this spotwise"):
            opening(fresh_url)
    engine = sa.create_engine(fresh_url)
    try:
        assert _revision(engine) == ["0099"]
    finally:
        engine.dispose()
