"""A bill dated before its write commits is in one chained `report` window (review-as AS1).

The orchestrator dates a life's end (``ended_at=time.time()``), then its write may wait up to
the 30 s busy timeout for the database's lock; `cancel` reads ``now`` once and bills every
record it closes at it. A report whose window ended "now" run in that gap saw the record
still held; the next window, chained on that report's ``until`` as the README says, started
after the bill's date: neither counted it. And the report read the closed records and the
held ones in two statements: a record closed between them was in neither list.

Now a window ending "now" ends :data:`~spotwise.units.SETTLE_S` (60 s, twice the lock
timeouts) before it, so a bill dated before its commit is written before any window ending
after its date is read; the report reads both lists in one statement (one snapshot); an
explicit end less than a minute ago is read once a minute has passed since it (the daily
`--since yesterday --until today` at 00:00 keeps its whole day); `--until now` is a look at
once, said not to be final."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import cli_env_isolated, main_in_process, record_life

from spotwise import costs, units
from spotwise.store import Store
from spotwise.units import whole_ms

SETTLE_S = 60.0  # units.SETTLE_S (test_a_window_ending_now_ends_a_minute_before_it)

T = 1_795_600_000.0  # 2026-11-25 09:46:40 UTC, window A's now
MIDNIGHT = 1_795_564_800.0  # 2026-11-25 00:00:00 UTC
PRICE = 0.95


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cli_env_isolated(monkeypatch, tmp_path)


def _store(tmp_path: Path, started: float = T - 3600.0) -> str:
    """A running AWS job with one life held since ``started``."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        spec = json.dumps({"providers": [{"name": "aws", "regions": ["us-east-1"]}]})
        s.create_job("j-aws", spec, "job.yaml", "spot-greedy", "maximize", job_id="j-aws")
        s.update_job("j-aws", state="running")
        record_life(
            s, "j-aws", 0, "l-0", requested_at=started, state="running", launched_at=started,
            provider_instance_id="i-0",
        )  # fmt: skip
    return db


def _close(s: Store, ended_at: float, billed_at: float | None = None) -> None:
    """The life's close as a writer dates it (``billed_at``: a cancel's ``now``)."""
    bill: dict[str, Any] = {} if billed_at is None else {"billed_at": billed_at}
    s.update_instance(
        "l-0", state="terminated", ended_at=ended_at, end_reason="stopped", cost_usd=PRICE,
        on_demand_cost_usd=3.06, market_seconds=3600.0, **bill,
    )  # fmt: skip


def _usd(out: dict[str, Any]) -> float:
    return float(out["totals"]["cost_usd"])


# --- the finding: a bill dated before window A ran, written after ---------------------------


@pytest.mark.parametrize(
    ("ended_at", "billed_at"),
    [
        (T - 1.0, None),  # the orchestrator: dated, then a second waiting for the lock
        (T - 29.0, None),  # ... the busy timeout's 30 s, nearly
        (T - 3600.0, T - 20.0),  # a cancel: its end in the past, billed at its `now`
    ],
)
def test_a_bill_written_after_a_report_ran_is_in_the_next_chained_window(
    tmp_path: Path, ended_at: float, billed_at: float | None
) -> None:
    """The reviewer's repro, its clock given: window A runs at T while the close, dated before
    T, waits for the lock; B is chained on A's `until`. Was: A $0 (held), B $0: lost."""
    db = _store(tmp_path)
    a = costs.report(since="all", db=db, now=T)
    assert [h["launch_id"] for h in a["held"]] == ["l-0"] and _usd(a) == 0.0
    # held lives are measured to the report's now, not to its window's end
    assert a["held"][0]["held_hours"] == pytest.approx(1.0)
    with Store.open_existing(db) as s:
        _close(s, ended_at, billed_at)
    later = T + 2 * SETTLE_S
    b = costs.report(since=repr(a["until"]), db=db, now=later)
    every = costs.report(since="all", db=db, now=later)
    assert _usd(every) == PRICE
    assert (_usd(a), _usd(b)) == (0.0, PRICE)  # was (0.0, 0.0)
    assert b["totals"]["lives"] == 1 and b["since"] == a["until"] == whole_ms(T - SETTLE_S)


def test_the_reviewers_repro_with_a_real_lock_and_clock(tmp_path: Path) -> None:
    """As review-as ran it: another connection holds the write lock; the orchestrator's close,
    dated, waits on it; window A runs in the gap. B runs a minute after the write."""
    db = _store(tmp_path, started=time.time() - 3600.0)
    first = costs.report(since="all", db=db)
    holder = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a tune's heartbeat, a cancel: writing
    closer = Store.open_existing(db)
    dated: list[float] = []

    def close_life() -> None:  # as planner/ledger.py closes a life: dated, then written
        dated.append(time.time())
        _close(closer, dated[0])

    thread = threading.Thread(target=close_life)
    try:
        thread.start()
        time.sleep(0.3)
        a = costs.report(since=repr(first["until"]), db=db)
        assert [h["launch_id"] for h in a["held"]] == ["l-0"]  # not written yet: held
    finally:
        holder.execute("ROLLBACK")
        thread.join(timeout=60)
        holder.close()
        closer.close()
    later = time.time() + SETTLE_S
    b = costs.report(since=repr(a["until"]), db=db, now=later)
    every = costs.report(since="all", db=db, now=later)
    assert a["until"] < dated[0]  # was after it: B, starting there, did not hold it
    assert (_usd(a), _usd(b), _usd(every)) == (0.0, PRICE, PRICE)  # was (0.0, 0.0, 0.95)


# --- the variant: the closed and the held records in one read --------------------------------


def test_a_record_closed_while_the_report_reads_is_held_or_billed_never_neither(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close lands right after the report's first read of the instance table (staged:
    each read the report may make closes it after the first). Was: the closed records read
    before it (l-0 open: not in), the held ones after (l-0 closed: not in): in neither list,
    and dated before A's end, in no later window either."""
    db = _store(tmp_path)
    closed: list[str] = []

    def then_close(name: str) -> None:
        original = getattr(Store, name, None)
        if original is None:  # the code before: no one read
            return

        def read(self: Store, *args: Any, **kwargs: Any) -> Any:
            got = original(self, *args, **kwargs)
            if not closed:
                closed.append(name)
                _close(self, T - 1.0)  # dated before A's now, written as A reads
            return got

        monkeypatch.setattr(Store, name, read)

    for name in ("report_rows", "list_billed", "list_instances"):
        then_close(name)
    a = costs.report(since="all", db=db, now=T)
    monkeypatch.undo()
    assert closed  # the close did land during A's reads
    assert [h["launch_id"] for h in a["held"]] == ["l-0"]  # was []: in neither list
    later = T + 2 * SETTLE_S
    b = costs.report(since=repr(a["until"]), db=db, now=later)
    assert _usd(a) + _usd(b) == _usd(costs.report(since="all", db=db, now=later)) == PRICE


def test_the_report_reads_the_instance_table_in_one_statement(tmp_path: Path) -> None:
    """One SELECT, one snapshot (pysqlite starts no transaction for a read; PostgreSQL's
    READ COMMITTED takes a snapshot per statement): two statements in one session would not
    do. Was two."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    db = _store(tmp_path)
    with Store.open_existing(db) as s:
        record_life(
            s, "j-aws", 1, "l-1", requested_at=T - 7200.0, launched_at=T - 7200.0,
            state="terminated", ended_at=T - 600.0, cost_usd=1.0, market_seconds=6600.0,
        )  # fmt: skip
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "FROM instance" in statement:
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        out = costs.report(since="24h", db=db, now=T)
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    assert len(seen) == 1, seen
    assert (_usd(out), [h["launch_id"] for h in out["held"]]) == (1.0, ["l-0"])


# --- the window's end ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("until", "end", "ready"),
    [
        (None, whole_ms(T - SETTLE_S), whole_ms(T - SETTLE_S) + SETTLE_S),  # now, held back
        ("30s", whole_ms(T - SETTLE_S), whole_ms(T - SETTLE_S) + SETTLE_S),  # less than that
        ("2030-01-01", whole_ms(T - SETTLE_S), whole_ms(T - SETTLE_S) + SETTLE_S),  # to come
        ("2h", T - 7200.0, T - 7200.0 + SETTLE_S),  # long settled
        ("now", T, T),  # a look: at once, not final
        ("  NOW ", T, T),
        (repr(T - 10.0), T - 10.0, T + 50.0),  # a time given, 10 s ago: kept, read at +60 s
        ("today", MIDNIGHT, MIDNIGHT + SETTLE_S),
    ],
)
def test_a_window_ending_now_ends_a_minute_before_it(
    until: str | None, end: float, ready: float
) -> None:
    assert units.SETTLE_S == SETTLE_S  # twice the lock timeouts
    got = units.report_window("1h", until, T)
    assert (got.start, got.end, got.ready_at) == (end - 3600.0, end, ready)


def test_the_daily_cron_at_midnight_keeps_its_whole_day_and_waits_for_its_last_bills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--since yesterday --until today` run at 00:00:10: its window ends at midnight (held
    back, the next day's, starting at midnight, would leave 50 s in no line), read at 00:01,
    when a bill dated 23:59:59.5 and waiting on the lock has been written (it lands during
    the wait, staged). Was read at once: the life held, and in no day's line."""
    db = _store(tmp_path, started=MIDNIGHT - 3600.0)
    waited: list[float] = []

    def wait(seconds: float) -> None:
        waited.append(seconds)
        with Store.open_existing(db) as s:
            _close(s, MIDNIGHT - 0.5)

    monkeypatch.setattr(costs, "_wait", wait, raising=False)
    day = costs.report(since="yesterday", until="today", db=db, now=MIDNIGHT + 10.0)
    assert (day["since"], day["until"]) == (MIDNIGHT - 86400.0, MIDNIGHT)
    assert waited == [pytest.approx(50.0)]
    assert (_usd(day), day["held"], day["settled"]) == (PRICE, [], True)  # was $0, held
    assert day["now"] == MIDNIGHT + SETTLE_S
    # the next day's line starts where this one ended, and does not count it again
    after = costs.report(since="yesterday", until="today", db=db, now=MIDNIGHT + 86400.0 + 90)
    assert (after["since"], _usd(after)) == (MIDNIGHT, 0.0)


def _cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], now: float, *args: str
) -> tuple[int, str, list[str]]:
    with pytest.MonkeyPatch.context() as clock:
        clock.setattr(time, "time", lambda: now)
        return main_in_process(monkeypatch, capsys, "report", *args)


def test_the_text_and_json_say_where_the_window_ends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = _store(tmp_path)
    args = ("--since", "1h", "--db", db)
    monkeypatch.setenv("COLUMNS", "200")
    code, text, err = _cli(monkeypatch, capsys, T, *args)
    assert code == 0, err
    assert "bills written from 2026-11-25 08:45:40 to 2026-11-25 09:45:40 UTC\n" in text
    assert (
        "the window ends 60 s before now: the bills of the last minute are counted in the next "
        "window, which starts where this one ends" in text
    )
    code, out, err = _cli(monkeypatch, capsys, T, *args, "--json")
    got = json.loads(out)
    assert (got["until"], got["now"], got["settled"]) == (T - SETTLE_S, T, True)
    # `--until now`: at once, said not final
    code, text, err = _cli(monkeypatch, capsys, T, *args, "--until", "now")
    assert "to 2026-11-25 09:46:40 UTC\n" in text
    assert "the window ends now (--until now): a bill still being written may be missing" in text
    code, out, err = _cli(monkeypatch, capsys, T, *args, "--until", "now", "--json")
    assert (json.loads(out)["until"], json.loads(out)["settled"]) == (T, False)
    # a window that ended long ago: no note
    code, text, err = _cli(monkeypatch, capsys, T, "--since", "2h", "--until", "1h", "--db", db)
    assert "the window ends" not in text and code == 0


def test_a_report_right_after_a_job_says_what_the_last_minute_billed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The default window ends a minute back: run just after a job (the README's main job
    takes 30 s), it held none of the job's bills and printed only "nothing billed in this
    window". The bills written since its end are said (text and `after_until` in --json), and
    where they are counted."""
    db = _store(tmp_path)
    with Store.open_existing(db) as s:
        _close(s, T - 10.0)  # closed 10 s before the report: after the window's end
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = _cli(monkeypatch, capsys, T, "--since", "all", "--db", db, "--json")
    got = json.loads(out)
    assert code == 0, err
    assert got["totals"]["cost_usd"] == 0.0  # not in this window: in the next one
    assert got["after_until"] == {"cost_usd": pytest.approx(PRICE), "simulated_usd": 0.0}
    code, text, err = _cli(monkeypatch, capsys, T, "--since", "all", "--db", db)
    assert "the bills of the last minute ($0.9500 billed since) are counted in the next" in text
    assert "(`--until now` shows them now, not final)" in text
    # with --until now they are in the window, and nothing is after it
    code, out, err = _cli(
        monkeypatch, capsys, T, "--since", "all", "--until", "now", "--db", db, "--json"
    )
    got = json.loads(out)
    assert got["totals"]["cost_usd"] == pytest.approx(PRICE)
    assert got["after_until"] == {"cost_usd": 0.0, "simulated_usd": 0.0}
