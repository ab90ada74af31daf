"""A cancel dates each bill when it writes it, not when its billing loop began (s22 report_I,
item 3: the cancel side of review-as AS1).

`spotwise report` ends its default window :data:`~spotwise.units.SETTLE_S` (60 s) back, so a
bill dated before its write commits is written before any window ending after its date is
read. `spotwise cancel` read ``now`` once, then billed its records one by one (on-demand
references, up to 8 compare-and-set writes each waiting up to 30 s for the lock) and dated every
bill with that ``now``: a record written more than a minute after it was dated before the end
of a report read meanwhile, which saw it still held, and before the start of the next window
chained on that report: counted in neither. The finished job's sweep
(:func:`~spotwise.release_sweep.sweep_finished`) dated its parts the same way.

Now each bill is dated by the cancel's clock read once its write holds the record's lock
(:meth:`~spotwise.store.bills.BillWrites.rebill_instance_if_unchanged`'s ``clock``); ``now``
stays what the lives are billed up to. Here each write waits 45 s (the clock moves on while
it waits), and window A is read between the first write and the second."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from test_s18_heartbeat import SPEEDUP, _alive, _dead_local_job, _usd
from test_s19_cancel_race_sweep import PRICE, _finished, _listing

from spotwise import costs, release
from spotwise.release import _release
from spotwise.release_sweep import sweep_finished
from spotwise.store import Store
from spotwise.store.bills import extra_bills
from spotwise.units import SETTLE_S, whole_ms

WAIT_S = 45.0  # each write's wait for the database's lock: two of them pass SETTLE_S
HOUR = 3600.0


class _Clock:
    """The cancel's wall clock (``release.wall_now``), moved on by hand."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


class _SlowWrites:
    """The cancel's store: each bill write first waits :data:`WAIT_S` for the lock (the clock
    moves on); window A is read, ``A_AFTER_S`` after the cancel's start, while the second
    write waits (the first one is written, the second not yet)."""

    A_AFTER_S = 70.0

    def __init__(self, store: Store, db: str, clock: _Clock) -> None:
        self.store, self.db, self.clock, self.writes = store, db, clock, 0
        self.start = clock.at
        self.a: dict[str, Any] = {}

    def rebill_instance_if_unchanged(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        if self.writes == 2:  # a cron's report, run while the second write waits
            self.a = costs.report(since="all", db=self.db, now=self.start + self.A_AFTER_S)
        self.clock.at += WAIT_S
        return self.store.rebill_instance_if_unchanged(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def _money(out: dict[str, Any]) -> float:
    """What a report counted, real clouds' and the replay's together."""
    return float(out["totals"]["cost_usd"]) + float(out["replay"]["totals"]["cost_usd"])


def _windows(db: str, a: dict[str, Any], start: float) -> tuple[float, float, float]:
    """Window A's dollars, the next window's (chained on A's ``until``, read well after the
    cancel), and all time's."""
    later = start + 5 * SETTLE_S
    b = costs.report(since=repr(a["until"]), db=db, now=later)
    every = costs.report(since="all", db=db, now=later)
    assert b["since"] == a["until"] == whole_ms(start + _SlowWrites.A_AFTER_S - SETTLE_S)
    return _money(a), _money(b), _money(every)


def test_a_cancel_whose_loop_outlasts_the_settle_margin_bills_each_life_in_one_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead local job's two lives, each billed to its last heartbeat 30 s after its launch
    (9000 market s, $2.25). The cancel starts at C; its writes land at C+45 and C+90; window
    A is read at C+70 (it ends at C+10) and sees l-1 still held. Was: both bills dated C, l-0
    in A, l-1 in no window ($2.25 of $4.50 lost); now dated C+45 and C+90: both in the next."""
    start = float(int(time.time()))
    clock = _Clock(start)
    monkeypatch.setattr(release, "wall_now", clock)
    _alive(monkeypatch)  # both trial processes died with the orchestrator
    db = f"sqlite:///{tmp_path / 'state.db'}"
    t0 = start - 60.0
    job_id, _ = _dead_local_job(db, [t0, t0], heartbeat_at=t0 + 30.0)
    life = _usd(30.0 * SPEEDUP)
    with Store.open(db) as s:
        slow = _SlowWrites(s, db, clock)
        out = _release(slow, s.get_job(job_id), orchestrator_died=True)
        rows = {r.id: r for r in s.list_instances(job_id)}
    assert out["closed_records"] == 2 and slow.writes == 2
    assert [h["launch_id"] for h in slow.a["held"]] == ["l-1"]  # not written yet when A read
    a_usd, b_usd, all_usd = _windows(db, slow.a, start)
    assert all_usd == pytest.approx(2 * life)
    assert (a_usd, b_usd) == (0.0, pytest.approx(2 * life))  # was ($2.25, $0): l-1 lost
    # billed up to when they died, dated when written
    assert [rows[k].ended_at for k in ("l-0", "l-1")] == [t0 + 30.0, t0 + 30.0]
    assert [rows[k].billed_at for k in ("l-0", "l-1")] == [start + WAIT_S, start + 2 * WAIT_S]


def test_a_finished_jobs_sweep_dates_each_instances_part_when_it_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a finished cloud job's sweep: l-lost's and l-lost2's instances outlived
    their records, each up an hour ($0.90 each). Was: both parts dated C, l-lost's in A,
    l-lost2's in no window; now each part is dated at its write, both in the next window."""
    db, job_id, _ = _finished(tmp_path)
    start = float(int(time.time()))
    clock = _Clock(start)
    monkeypatch.setattr(release, "wall_now", clock)
    _listing(monkeypatch, job_id, start - HOUR)["launches"].extend(["l-lost", "l-lost2"])
    with Store.open(db) as s:
        slow = _SlowWrites(s, db, clock)
        out = sweep_finished(slow, s.get_job(job_id), "succeeded")
        rows = {r.id: r for r in s.list_instances(job_id)}
    assert [f["billed_usd"] for f in out["found_instances"]] == [pytest.approx(PRICE)] * 2
    assert slow.writes == 2
    a_usd, b_usd, all_usd = _windows(db, slow.a, start)
    assert all_usd == pytest.approx(3 * PRICE)  # l-ok's hour, and the two found now
    # A: l-ok's hour (billed long ago); was ($1.80, $0): l-lost2's part in no window
    assert (a_usd, b_usd) == (pytest.approx(PRICE), pytest.approx(2 * PRICE))
    dates = [[p["at"] for p in extra_bills(rows[k])] for k in ("l-lost", "l-lost2")]
    assert dates == [[start + WAIT_S], [start + 2 * WAIT_S]]  # each part when it was written
