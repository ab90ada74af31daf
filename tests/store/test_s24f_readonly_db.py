"""A database that cannot be written (a read-only file or folder, a ``?mode=ro`` or
``immutable=1`` URI) says what is wrong and the fix; one at this spotwise's schema is read by
the read-only commands (review-bc BC4).

Before: every command failed with "database error while reading the schema: attempt to write
a readonly database", exit 5, no hint: the connection's switch to WAL mode was a write, so even
`status` on an up-to-date database in rollback-journal mode failed; an older schema (which
needs one write to upgrade) said the same while migrating; a write said it with no cause.
(As root a chmod does not stop writes: these use the URIs, as the review did.)
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command
from shared_helpers import cli_env_isolated, main_in_process, rollback_journal_db

from spotwise.errors import StoreError
from spotwise.store import Store
from spotwise.store.db import alembic_config

URIS = ["?mode=ro&uri=true", "?immutable=1&uri=true"]


@pytest.fixture(autouse=True)
def _no_env_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cli_env_isolated(monkeypatch, tmp_path)


def _url(path: Path, query: str) -> str:
    return f"sqlite:///file:{path}{query}"


@pytest.mark.parametrize("query", URIS)
@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["status"], "j-1  "),
        (["report", "--check"], "nothing held now"),
        (["trials", "j-1"], "trials of j-1"),
    ],
)
def test_an_up_to_date_rollback_journal_database_is_read_read_only(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    shown: str,
    query: str,
) -> None:
    path = rollback_journal_db(tmp_path / "spotwise.db")
    before = path.read_bytes()
    code, out, err = main_in_process(monkeypatch, capsys, *args, "--db", _url(path, query))
    assert code == 0, err
    assert shown in out
    assert path.read_bytes() == before
    with sqlite3.connect(path) as con:  # still in its own mode: the read did not switch it
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_the_store_lists_the_job_of_a_read_only_database(tmp_path: Path) -> None:
    path = rollback_journal_db(tmp_path / "spotwise.db")
    with Store.open_existing(_url(path, URIS[0])) as s:
        assert [j.id for j in s.list_jobs()] == ["j-1"]


def test_a_write_to_a_read_only_database_says_why_and_the_fix(tmp_path: Path) -> None:
    path = rollback_journal_db(tmp_path / "spotwise.db")
    with Store.open(_url(path, URIS[0])) as s, pytest.raises(StoreError) as refused:
        s.create_job("m", "{}", "spec.yaml", "spotwise", "minimize", job_id="j-2")
    assert refused.value.exit_code == 5
    assert refused.value.message.startswith(f"the database at {s.url} cannot be written")
    assert "(attempt to write a readonly database): the file or its folder is read-only" in (
        refused.value.message
    )
    assert refused.value.hint is not None
    assert refused.value.hint.startswith("make the file and its folder writable")


@pytest.mark.parametrize("query", URIS)
def test_an_older_schema_that_cannot_be_written_names_the_one_upgrade_it_needs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    query: str,
) -> None:
    path = rollback_journal_db(tmp_path / "spotwise.db")
    with Store.open(f"sqlite:///{path}") as s, s.engine.connect() as conn:
        command.downgrade(alembic_config(conn), "0004")
        conn.commit()
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA journal_mode = DELETE")
    before = path.read_bytes()
    code, out, err = main_in_process(monkeypatch, capsys, "status", "--db", _url(path, query))
    assert code == 5 and out == ""
    assert err == [
        f"error: the database at sqlite:///file%3A{path}{query} cannot be written, and its "
        "schema (revision '0004', from an older spotwise) must be upgraded to '0006' once "
        "before this spotwise can read it",
        "hint: run any spotwise command on it once where the file and its folder can be "
        "written (not through a mode=ro or immutable=1 URL), or point --db at a writable copy",
    ]
    assert path.read_bytes() == before
