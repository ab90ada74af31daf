"""`spotwise report`'s held hours of a dead replay job's lives stop where `spotwise cancel`
bills them: when its orchestrator was last known alive (:func:`spotwise.last_alive.last_alive`:
its heartbeat, its last recorded report, its own instance records), not its heartbeat alone.

A job whose last heartbeat was 30 wall s after its first launch, which then launched another
life (+35) and read a report (+38) before it died: `cancel` bills its first life 38 wall s
(11400 market s at 300x), where `report` showed 30 (9000) held until then."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_s18_heartbeat import SPEEDUP, _alive, _dead_local_job

from spotwise import costs, jobs
from spotwise.store import Store


@pytest.mark.parametrize(
    ("report_at", "until"),
    [(38.0, 38.0), (None, 35.0)],  # the last report; else the last launch (its request)
)
def test_report_holds_a_dead_replays_lives_up_to_where_cancel_bills_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, report_at: float | None, until: float
) -> None:
    now = time.time()
    t0 = now - 60.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job_id, trials = _dead_local_job(db, [t0, t0 + 35.0], heartbeat_at=t0 + 30.0)
    with Store.open(db) as s:
        s.update_instance("l-1", requested_at=t0 + 35.0)  # written before its launch
        if report_at is not None:
            s.add_observation(trials[1], 1, 0.5, wall_time=t0 + report_at, market_time=1e9)
    out = costs.report(since="all", db=db, now=now)
    held = {h["launch_id"]: h for h in out["held"]}
    assert held["l-0"]["leftover"] and held["l-0"]["simulated"]
    # was 30 wall s (its heartbeat): 2.5 market h
    assert held["l-0"]["held_hours"] == pytest.approx(until * SPEEDUP / 3600.0)
    assert held["l-1"]["held_hours"] == pytest.approx((until - 35.0) * SPEEDUP / 3600.0)

    _alive(monkeypatch)  # every trial process died with the orchestrator
    jobs.cancel(job_id, db=db)
    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job_id)}
    for launch in ("l-0", "l-1"):  # what report held is what cancel billed
        assert rows[launch].market_seconds == pytest.approx(held[launch]["held_hours"] * 3600.0)
