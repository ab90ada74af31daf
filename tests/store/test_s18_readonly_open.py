"""The read-only commands (report, status, trials; ``Store.open_existing``) never run on a wrong
database, and their exit codes are ones a cron can trust (review-af F12, F5, F11).

Before: an in-memory SQLite URL (``sqlite:///$UNSET``) was an empty database and `report
--check` said "nothing held" (exit 0); on PostgreSQL a database without spotwise's tables (the
server's default ``postgres``) got them created and read as empty; a database failure (a newer
schema, a corrupt file) exited 1, `report --check`'s "an instance is held"; and a read-only
command made ``~/.local/share/spotwise/`` before saying "no database"."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from shared_helpers import cli_env_isolated, main_in_process

from spotwise.errors import NotFoundError, StoreError
from spotwise.store import Store
from spotwise.store.db import head_revision, make_engine, migrate, sqlite_path

_cli = main_in_process  # tests/shared_helpers.py


@pytest.fixture(autouse=True)
def _no_env_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cli_env_isolated(monkeypatch, tmp_path)


def _spotwise_db(path: Path) -> str:
    url = f"sqlite:///{path}"
    with Store.open(url) as s:
        s.create_job("n", "{}", "spec.yaml", "spotwise", "minimize", job_id="j-1")
    return url


def _tables(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        return sorted(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


# --- F12: an in-memory SQLite URL is no database ----------------------------------------------

IN_MEMORY = ["sqlite://", "sqlite:///", "sqlite:///:memory:", "sqlite:///file::memory:?uri=true"]


@pytest.mark.parametrize("url", IN_MEMORY)
def test_an_in_memory_url_is_no_database(url: str) -> None:
    with pytest.raises(NotFoundError) as err:
        Store.open_existing(url)
    assert err.value.exit_code == 3
    assert str(err.value).startswith(f"no spotwise database: --db/SPOTWISE_DB is '{url}', an ")
    assert "in-memory SQLite database" in str(err.value) and "unset variable" in str(err.value)
    assert err.value.hint is not None and "sqlite:////path/to/spotwise.db" in err.value.hint


@pytest.mark.parametrize("command", [["report", "--check", "--json"], ["status", "--json"]])
def test_report_check_with_an_unset_variable_in_the_url_exits_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """`SPOTWISE_DB="sqlite:///$DBPATH"` with DBPATH unset: exit 0, "nothing held", before."""
    monkeypatch.setenv("SPOTWISE_DB", "sqlite:///")
    code, out, err = _cli(monkeypatch, capsys, *command)
    assert (code, out) == (3, ""), err
    assert err[0].startswith("error: no spotwise database: --db/SPOTWISE_DB is 'sqlite:///'")
    assert len(err) == 2 and err[1].startswith("hint: set --db/SPOTWISE_DB to sqlite:////")


def test_a_file_uri_is_checked_at_its_path(tmp_path: Path) -> None:
    """``sqlite:///file:PATH?mode=ro&uri=true`` skipped the "no database" check."""
    missing = tmp_path / "none.db"
    with pytest.raises(NotFoundError, match=rf"^no spotwise database at {missing}; run"):
        Store.open_existing(f"sqlite:///file:{missing}?mode=ro&uri=true")
    text = tmp_path / "notes.db"
    text.write_text("not a database\n" * 100)
    with pytest.raises(StoreError, match=r" is not a SQLite database \(damaged, or another "):
        Store.open_existing(f"sqlite:///file://{text}?mode=ro&uri=true")
    assert text.read_text() == "not a database\n" * 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]
    url = _spotwise_db(tmp_path / "spotwise.db")
    with Store.open_existing(f"sqlite:///file:{tmp_path / 'spotwise.db'}?mode=ro&uri=true") as s:
        assert [j.id for j in s.list_jobs()] == ["j-1"]
    assert url.endswith("spotwise.db")


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///file:x.db?mode=ro&uri=true", "x.db"),
        ("sqlite:///file:/a/b%20c.db?uri=true", "/a/b c.db"),
        ("sqlite:///file:///a/x.db?uri=true", "/a/x.db"),
        ("sqlite:///file://localhost/a/x.db?uri=true", "/a/x.db"),
        ("sqlite:///file:x.db?mode=memory&uri=true", None),
        ("sqlite:///file:?uri=true", None),
        ("sqlite:///file:x.db", "file:x.db"),  # without uri=true: a file named so, as SQLite
        ("sqlite:////a/x.db", "/a/x.db"),
        ("postgresql+psycopg://u@h/db", None),
    ],
)
def test_sqlite_path_is_the_file_sqlite_opens(url: str, path: str | None) -> None:
    assert sqlite_path(url) == (None if path is None else Path(path))


# --- F12 addendum: a database without spotwise's schema is no database, on every backend ------


def _unrelated(path: Path, *tables: str) -> None:
    con = sqlite3.connect(path)
    for t in tables:
        con.execute(f"CREATE TABLE {t} (id INTEGER PRIMARY KEY, body TEXT)")
    con.commit()
    con.close()


def test_a_sqlite_file_with_another_programs_job_table_is_left_alone(tmp_path: Path) -> None:
    """Before: migrated from an empty revision ('table job already exists', retried for 2 s,
    then exit 1)."""
    db = tmp_path / "other.db"
    _unrelated(db, "job", "notes")
    before = db.read_bytes()
    with pytest.raises(NotFoundError) as err:
        Store.open_existing(f"sqlite:///{db}")
    assert str(err.value) == (
        f"no spotwise database at {db} (it has no alembic_version table: not a spotwise "
        "schema); run `spotwise tune SPEC` first"
    )
    assert db.read_bytes() == before


@pytest.mark.parametrize(
    ("tables", "why"),
    [
        ((), "it has no spotwise tables"),
        (("notes",), "it has no spotwise tables"),
        (("job",), "it has no alembic_version table: not a spotwise schema"),
        (("alembic_version",), "it has no job table: not a spotwise schema"),
        (("alembic_version", "job"), "its alembic_version records no revision"),
    ],
)
def test_the_schema_check_every_backend_runs_creates_nothing(
    tmp_path: Path, tables: tuple[str, ...], why: str
) -> None:
    """The check PostgreSQL (any non-SQLite URL) goes through, forced here on SQLite files:
    ``migrate(existing=True)`` past the SQLite-only file check."""
    db = tmp_path / "x.db"
    _unrelated(db, *tables)
    url = f"sqlite:///{db}"
    engine = make_engine(url)
    try:
        with pytest.raises(NotFoundError) as err:
            migrate(engine, existing=True)
    finally:
        engine.dispose()
    assert (
        str(err.value) == f"no spotwise database at {url} ({why}); run `spotwise tune SPEC` first"
    )
    assert err.value.exit_code == 3
    assert _tables(url) == sorted(tables)


def test_an_older_spotwise_schema_is_upgraded_by_a_read(tmp_path: Path) -> None:
    """The decision README states: a read-only command upgrades an older spotwise schema (its
    code reads the newest columns); it never creates one."""
    from alembic import command

    from spotwise.store.db import alembic_config, current_revision

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), "0003")
        conn.commit()
    with Store.open_existing(url) as s:
        assert s.list_jobs() == []
        with s.engine.connect() as conn:
            assert current_revision(conn) == head_revision() != "0003"
    engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_postgres_database_without_spotwise_tables_is_no_database(fresh_url: str) -> None:
    """review-af F12 addendum, on a throwaway PostgreSQL (skipped without one): a read created
    every spotwise table in a database that was not spotwise's and said "nothing held"."""
    with pytest.raises(NotFoundError) as err:
        Store.open_existing(fresh_url)
    assert err.value.exit_code == 3
    assert "(it has no spotwise tables)" in str(err.value)
    assert _tables(fresh_url) == []
    engine = sa.create_engine(fresh_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE notes (body TEXT)")
    engine.dispose()
    with pytest.raises(NotFoundError, match=r"\(it has no spotwise tables\)"):
        Store.open_existing(fresh_url)
    assert _tables(fresh_url) == ["notes"]
    Store.open(fresh_url).close()
    with Store.open_existing(fresh_url) as s:
        assert s.list_jobs() == []


# --- F5: a database failure is not "an instance is held" --------------------------------------


def test_report_check_on_a_newer_schema_exits_5_not_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = _spotwise_db(tmp_path / "spotwise.db")
    con = sqlite3.connect(tmp_path / "spotwise.db")
    con.execute("UPDATE alembic_version SET version_num = 'ffff0000'")
    con.commit()
    con.close()
    code, out, err = _cli(monkeypatch, capsys, "report", "--check", "--json", "--db", url)
    assert (code, out) == (5, ""), err
    assert err[0].startswith(
        "error: database schema revision 'ffff0000' is unknown to this spotwise (newest is "
    )
    assert StoreError("x").exit_code == 5


def test_report_check_on_a_corrupt_file_exits_5(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "spotwise.db"
    _spotwise_db(path)
    con = sqlite3.connect(path)  # fold the WAL in, so the file alone holds the database
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("PRAGMA journal_mode = DELETE")
    con.close()
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # page 1 (the schema) past the header
    path.write_bytes(bytes(data))
    code, out, err = _cli(monkeypatch, capsys, "report", "--check", "--db", f"sqlite:///{path}")
    assert (code, out) == (5, ""), err
    assert err[0].startswith("error: database error while reading the schema: database disk ")


def test_a_folder_for_db_is_an_unusable_db_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = _cli(monkeypatch, capsys, "report", "--check", "--db", f"sqlite:///{tmp_path}")
    assert (code, out) == (2, ""), err
    assert err == [
        f"error: --db: {tmp_path} is a folder, not a SQLite database file",
        "hint: name the database file in it: sqlite:////path/to/folder/spotwise.db",
    ]


def test_a_good_database_still_reports_nothing_held(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = _spotwise_db(tmp_path / "spotwise.db")
    code, out, err = _cli(monkeypatch, capsys, "report", "--check", "--json", "--db", url)
    assert (code, err) == (0, [])
    assert json.loads(out)["held"] == []


# --- F11: no folder made on a read ------------------------------------------------------------


@pytest.mark.parametrize("command", [["report", "--check"], ["status"], ["trials"]])
def test_a_read_without_a_database_makes_no_folder(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: list[str],
) -> None:
    code, out, err = _cli(monkeypatch, capsys, *command)
    folder = tmp_path / "xdg" / "spotwise"
    assert (code, out) == (3, ""), err
    assert err[0] == f"error: no spotwise database at {folder / 'spotwise.db'}; run `spotwise " + (
        "tune SPEC` first"
    )
    assert not (tmp_path / "xdg").exists()
