"""``Store.open_existing`` (every read-only command: status, trials, cancel, report) takes a SQLite
file without spotwise's schema for what it is, no database: NotFoundError (exit 3), the file
left as it was. Before, an empty file (``touch empty.db``) got the schema created in it and
``report --check`` said "nothing held" with exit 0 — a wrong ``--db`` read as all clear."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from spotwise.errors import NotFoundError
from spotwise.store import Store
from spotwise.store.db import check_existing_sqlite

REPO = Path(__file__).resolve().parents[2]


def _other_sqlite(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE notes (body TEXT)")
    con.commit()
    con.close()


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda p: p.write_bytes(b""), "the file is empty"),
        (_other_sqlite, "the file has no spotwise tables"),
    ],
    ids=["empty", "other-sqlite"],  # a file not SQLite: exit 5 (tests/store/test_s19_*)
)
def test_a_file_without_the_spotwise_schema_is_no_database_and_is_left_alone(
    tmp_path: Path, make: object, why: str
) -> None:
    db = tmp_path / "empty.db"
    make(db)  # type: ignore[operator]
    before = db.read_bytes()
    with pytest.raises(NotFoundError) as info:
        Store.open_existing(f"sqlite:///{db}")
    assert str(info.value) == (
        f"no spotwise database at {db} ({why}); run `spotwise tune SPEC` first"
    )
    assert info.value.hint == "or point --db/SPOTWISE_DB at an existing database"
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_check_existing_sqlite_names_each_case(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match=r"^no spotwise database at \S+missing\.db; run"):
        check_existing_sqlite(tmp_path / "missing.db")
    (tmp_path / "empty.db").touch()
    with pytest.raises(NotFoundError, match=r"\(the file is empty\)"):
        check_existing_sqlite(tmp_path / "empty.db")
    assert not (tmp_path / "missing.db").exists()


def test_a_spotwise_database_still_opens_and_leaves_no_side_files(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with Store.open(url) as s:
        job = s.create_job("n", "{}", "spec.yaml", "spotwise", "minimize")
    check_existing_sqlite(tmp_path / "spotwise.db")  # no error
    with Store.open_existing(url) as s:
        assert s.get_job(job.id).name == "n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spotwise.db"]


def test_report_check_on_an_empty_file_exits_3_and_leaves_it_empty(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    env = {**os.environ, "SPOTWISE_HOME": str(tmp_path)}
    env.pop("SPOTWISE_DB", None)
    res = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "report", "--check", "--db", f"sqlite:///{db}"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 3, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert lines[0] == (
        f"error: no spotwise database at {db} (the file is empty); run `spotwise tune SPEC` first"
    )
    assert len(lines) <= 2
    assert db.stat().st_size == 0


def test_a_database_being_created_is_waited_for_not_refused(tmp_path: Path) -> None:
    """A first `tune` creates the file, then its tables, tens of ms apart: `status` or
    `report --check` opening it in between used to get "no database" (exit 3 from cron)."""
    import threading
    import time

    path = tmp_path / "spotwise.db"
    path.touch()  # the creator has made the file, not its tables yet
    url = f"sqlite:///{path}"

    def create() -> None:
        time.sleep(0.3)
        Store.open(url).close()

    creator = threading.Thread(target=create)
    creator.start()
    try:
        with Store.open_existing(url) as store:
            assert store.list_jobs() == []
    finally:
        creator.join()
    empty = tmp_path / "still-empty.db"  # one that stays empty is refused after the wait
    empty.touch()
    t0 = time.monotonic()
    with pytest.raises(NotFoundError, match="the file is empty"):
        check_existing_sqlite(empty, wait_s=0.2)
    assert 0.2 <= time.monotonic() - t0 < 2.0
    assert empty.stat().st_size == 0
