"""A file that is there, not empty, and not a SQLite database (its header damaged, or another
program's file) is a database failure on every command: exit 5, saying what it is; not "no
spotwise database ... run tune first" with exit 3 (review-ah F1).

Before: the read-only commands (report, status, trials) exited 3 and told the user to run
`tune` first, which would fail on the same file (exit 5, "file is not a database"). The two
causes cannot be told apart and neither is a missing database. A missing file, an empty one
and a SQLite database without spotwise's tables are still "no database" (exit 3).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from shared_helpers import cli_env_isolated, main_in_process, rollback_journal_db

from spotwise.errors import NotFoundError, StoreError
from spotwise.store import Store
from spotwise.store.db import check_existing_sqlite

READ_ONLY = [["report", "--check"], ["status"], ["trials"]]


_cli = main_in_process  # tests/shared_helpers.py


@pytest.fixture(autouse=True)
def _no_env_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cli_env_isolated(monkeypatch, tmp_path)


def _damaged(folder: Path) -> Path:
    """A spotwise database (folded into its one file, rollback journal) whose 16-byte header
    ("SQLite format 3") was overwritten."""
    path = rollback_journal_db(folder / "spotwise.db")
    data = bytearray(path.read_bytes())
    data[:16] = b"\x00" * 16
    path.write_bytes(bytes(data))
    return path


def _text(folder: Path) -> Path:
    path = folder / "notes.db"
    path.write_text("a shopping list, not a database\n" * 40)
    return path


def _two_bytes(folder: Path) -> Path:
    path = folder / "x.db"
    path.write_bytes(b"x\n")  # 1 byte is an empty database to SQLite (and to tune): exit 3
    return path


def _message(path: Path) -> str:
    return (
        f"error: {path} is not a SQLite database (damaged, or another program's file); point "
        "--db/SPOTWISE_DB at spotwise's database"
    )


@pytest.mark.parametrize("make", [_damaged, _text, _two_bytes], ids=["damaged", "text", "2-bytes"])
@pytest.mark.parametrize("command", READ_ONLY, ids=lambda c: c[0])
def test_a_read_on_a_file_that_is_not_sqlite_exits_5_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    make: object,
    command: list[str],
) -> None:
    path: Path = make(tmp_path)  # type: ignore[operator]
    before = path.read_bytes()
    code, out, err = _cli(monkeypatch, capsys, *command, "--db", f"sqlite:///{path}")
    assert (code, out) == (5, ""), err
    assert err[0] == _message(path)
    assert "run `spotwise tune" not in "\n".join(err)
    assert len(err) == 2 and err[1].startswith("hint: if it was spotwise's, restore it from a ")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no -wal, no -journal


def test_tune_and_prices_open_it_with_the_same_words(tmp_path: Path) -> None:
    """`tune` and `prices` (``Store.open``) said "database error while migrating the schema:
    file is not a database"; exit 5 already."""
    path = _damaged(tmp_path)
    with pytest.raises(StoreError) as err:
        Store.open(f"sqlite:///{path}")
    assert err.value.exit_code == 5
    assert f"error: {err.value}" == _message(path)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: None, ""),
        (lambda p: p.write_bytes(b""), " (the file is empty)"),
        # `echo > spotwise.db`: SQLite reads 1 byte as an empty database, and `tune` makes it one
        # (review-ai F1: it said "not a SQLite database, restore it from a copy", exit 5)
        (lambda p: p.write_bytes(b"\n"), " (the file has no spotwise tables)"),
        (lambda p: sqlite3.connect(p).execute("CREATE TABLE t (x)").connection.commit(),
         " (the file has no spotwise tables)"),
    ],
    ids=["missing", "empty", "1-byte", "other-sqlite"],
)  # fmt: skip
def test_no_database_is_still_exit_3(tmp_path: Path, make: object, why: str) -> None:
    path = tmp_path / "spotwise.db"
    make(path)  # type: ignore[operator]
    with pytest.raises(NotFoundError) as err:
        check_existing_sqlite(path, wait_s=0.1)  # what Store.open_existing runs first
    assert err.value.exit_code == 3
    assert str(err.value) == f"no spotwise database at {path}{why}; run `spotwise tune SPEC` first"
