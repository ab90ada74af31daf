"""A database failure in the drain logs one line per failed step, no traceback (review-bf BF3).

Before: each failed drain step logged with ``exc_info``, so a full disk printed 24 tracebacks
(each a chain of six) to the user's terminal around lines that already said what failed. A
:class:`StoreError` (expected, explained) now logs its one line; anything else (a bug) keeps
its traceback.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError
from test_s20g_drain_steps import Book, _book

from spotwise.errors import StoreError
from spotwise.store.db import store_error


def _full(book: Book, action: str) -> StoreError:
    exc = OperationalError("UPDATE", {}, sqlite3.OperationalError("database or disk is full"))
    return store_error(exc, book.store.engine, action)


def _fail_writes(book: Book, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """Every bill's and every trial's write raises ``error`` (the disk filled)."""

    def refuse(*a: Any, **kw: Any) -> Any:
        raise error

    for name in ("rebill_instance_if_unchanged", "update_instance", "update_trial"):
        monkeypatch.setattr(book.store, name, refuse)


def _drain_logs(book: Book, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    with caplog.at_level(logging.WARNING, logger="spotwise.planner"):
        book._drain(book.backend)  # type: ignore[arg-type]
    return [r for r in caplog.records if r.name == "spotwise.planner" and r.levelno >= 40]


def test_a_full_disk_in_the_drain_logs_one_line_per_step_and_no_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    book = _book(tmp_path)
    t0, t1 = book.live(0), book.live(1)
    full = _full(book, "updating instance 'l-0'")
    _fail_writes(book, monkeypatch, full)

    errors = _drain_logs(book, caplog)

    said, kind = [r.getMessage() for r in errors], type(full).__name__
    assert book.prov.terminated == [["i-0", "i-1"]]  # the drain still terminated both
    assert any(f"the drain: terminating the running instances failed: {kind}" in m for m in said)
    for t in (t0, t1):
        assert any(f"closing trial {t.trial_id} failed: {kind}" in m for m in said)
    assert [r.exc_info for r in errors] == [None] * len(errors)  # one line each
    assert "Traceback" not in caplog.text
    assert len(errors) >= 4 and all("its disk is full" in m for m in said if "failed:" in m)
    book.store.close()


def test_a_bug_in_the_drain_still_logs_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    book = _book(tmp_path)
    t = book.live(0)
    bug = KeyError("phase")
    _fail_writes(book, monkeypatch, bug)

    errors = _drain_logs(book, caplog)

    closing = [
        r for r in errors if f"closing trial {t.trial_id} failed: KeyError" in r.getMessage()
    ]
    assert len(closing) == 1 and closing[0].exc_info is not None
    assert closing[0].exc_info[1] is bug
    raised = [r for r in errors if "KeyError" in r.getMessage()]
    assert len(raised) >= 2 and all(r.exc_info is not None for r in raised)
    assert "Traceback" in caplog.text
    book.store.close()
