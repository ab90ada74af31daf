"""On PostgreSQL a lock held past the timeout fails the command with a database error (exit 5),
as SQLite's busy timeout does (review-ah F11: only connect_timeout was set, and `report --check`
under a held lock waited with no end: no exit code ever reached the cron's alarm)."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from spotwise.errors import StoreError
from spotwise.store import Store, db


def test_the_connection_asks_for_a_lock_timeout_unless_the_url_sets_options() -> None:
    assert db.pg_connect_args({}) == {
        "connect_timeout": db.PG_CONNECT_TIMEOUT_S,
        "options": f"-c lock_timeout={db.PG_LOCK_TIMEOUT_S * 1000}",
    }
    assert db.pg_connect_args({"options": "-c search_path=x", "connect_timeout": "3"}) == {}


@pytest.mark.parametrize("backend", ["postgresql"])
def test_a_held_lock_ends_a_read_with_exit_5(
    fresh_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    Store.open(fresh_url).close()  # spotwise's schema
    monkeypatch.setattr(db, "PG_LOCK_TIMEOUT_S", 1.0)
    holder = sa.create_engine(fresh_url)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with holder.begin() as conn:
            conn.exec_driver_sql("LOCK TABLE job IN ACCESS EXCLUSIVE MODE")
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(30)
        with pytest.raises(StoreError) as err, Store.open_existing(fresh_url) as store:
            store.list_jobs()
        assert err.value.exit_code == 5
    finally:
        release.set()
        thread.join()
        holder.dispose()
