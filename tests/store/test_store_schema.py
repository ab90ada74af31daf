"""The migrations build exactly the tables the models describe, on every backend."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel

from spotwise.errors import ConfigError
from spotwise.store import Store
from spotwise.store.db import head_revision
from spotwise.store.models import ALL_TABLES

TABLES = {"job", "trial", "instance", "observation", "event", "price_cache"}


def test_models_are_the_expected_tables() -> None:
    assert {m.__tablename__ for m in ALL_TABLES} == TABLES  # type: ignore[attr-defined]


def test_migrations_create_every_table_with_the_models_columns(store: Store) -> None:
    insp = sa.inspect(store.engine)
    assert set(insp.get_table_names()) == TABLES | {"alembic_version"}
    for model in ALL_TABLES:
        table = model.__table__  # type: ignore[attr-defined]
        db_cols = {c["name"]: c for c in insp.get_columns(table.name)}
        assert list(db_cols) == [c.name for c in table.columns], table.name
        for column in table.columns:
            assert db_cols[column.name]["nullable"] == column.nullable, (table.name, column.name)
        db_indexes = {  # PostgreSQL also lists the index behind a unique constraint
            ix["name"]: ix["column_names"]
            for ix in insp.get_indexes(table.name)
            if not ix.get("duplicates_constraint")
        }
        model_indexes = {ix.name: [c.name for c in ix.columns] for ix in table.indexes}
        assert db_indexes == model_indexes, table.name
        db_fks = {(tuple(fk["constrained_columns"]), fk["referred_table"])
                  for fk in insp.get_foreign_keys(table.name)}  # fmt: skip
        model_fks = {((fk.parent.name,), fk.column.table.name) for fk in table.foreign_keys}
        assert db_fks == model_fks, table.name
    uniques = sa.inspect(store.engine).get_unique_constraints("trial")
    assert [u["column_names"] for u in uniques] == [["job_id", "number"]]


def test_autogenerate_finds_no_drift(store: Store) -> None:
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(ctx, SQLModel.metadata)
    ours = [d for d in diff if _table_of(d) in TABLES]
    assert ours == []


def _table_of(diff: object) -> str | None:
    item = diff[0] if isinstance(diff, list) else diff
    for part in item if isinstance(item, tuple) else ():
        name = getattr(part, "name", None)
        table = getattr(part, "table", None)
        if isinstance(part, sa.Table):
            return str(name)
        if table is not None:
            return str(table.name)
        if isinstance(part, str) and part in TABLES:
            return part
    return None


def test_at_head_and_reopening_is_idempotent(fresh_url: str) -> None:
    for _ in range(3):
        with Store.open(fresh_url) as s, s.engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
            assert rows == [(head_revision(),)]


def test_sqlite_is_in_wal_mode_with_foreign_keys(sqlite_store: Store) -> None:
    with sqlite_store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_open_refuses_a_missing_parent_folder_and_creates_nothing(tmp_path: Path) -> None:
    """A typo in --db used to create a folder tree and a fresh, empty database there (the user
    then saw "no jobs"); the database file itself is still created in an existing folder."""
    db = tmp_path / "a" / "b" / "spotwise.db"
    with pytest.raises(ConfigError, match=r"^--db: the folder .*/a/b does not exist$") as info:
        Store.open(f"sqlite:///{db}")
    assert info.value.hint == "create it first, or fix the path in --db / SPOTWISE_DB"
    assert not (tmp_path / "a").exists()
    with Store.open(f"sqlite:///{tmp_path / 'spotwise.db'}"):
        pass
    assert (tmp_path / "spotwise.db").exists()


def test_in_memory_sqlite_keeps_its_tables() -> None:
    with Store.open("sqlite://") as s:
        job = s.create_job("n", "{}", "spec.yaml", "spot", "maximize")
        assert s.get_job(job.id).name == "n"


CHILD = """
import sys
from spotwise.store import Store
print("ready", flush=True)
sys.stdin.readline()
Store.open(sys.argv[1]).close()
print("opened", flush=True)
"""


def start_together(url: str, n: int, code: str = CHILD) -> list[tuple[int, str]]:
    """Run ``n`` processes that import first, then all open ``url`` at the same moment."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(n)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    return [(p.wait(timeout=120), p.communicate()[0]) for p in procs]


def test_processes_opening_a_fresh_database_at_once_all_succeed(fresh_url: str) -> None:
    results = start_together(fresh_url, 2)
    assert [rc for rc, _ in results] == [0, 0], results
    with Store.open(fresh_url) as s, s.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
        assert rows == [(head_revision(),)]
        assert set(sa.inspect(conn).get_table_names()) >= TABLES


def test_downgrade_and_upgrade_again(fresh_url: str) -> None:
    from alembic import command

    from spotwise.store.db import alembic_config, migrate

    with Store.open(fresh_url) as s:
        with s.engine.connect() as conn:
            command.downgrade(alembic_config(conn), "base")
            conn.commit()
        assert set(sa.inspect(s.engine).get_table_names()) <= {"alembic_version"}
        migrate(s.engine)
        assert set(sa.inspect(s.engine).get_table_names()) == TABLES | {"alembic_version"}
