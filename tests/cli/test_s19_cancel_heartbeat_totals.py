"""The running totals' save carries the orchestrator's heartbeat: `spotwise cancel` bills a dead
local job's lives up to it, so at most the save's period (2 wall s) of their run goes unbilled,
not the heartbeat's own (5 wall s: 1500 market s at the replay's 300x), with no write added.

The orchestrator wrote its totals to the job row every 2 wall s and, in a write of its own, the
heartbeat every 5: a job killed 4.9 wall s after a heartbeat had its lives billed 4.9 wall s
short although a totals save 1 s before the kill had written the same row."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_s18_heartbeat import DIED, SPEEDUP, _alive, _dead_local_job

from spotwise import jobs
from spotwise.planner.ledger import Ledger
from spotwise.store import Store
from spotwise.store.heartbeat import Heartbeat

ORCH_TESTS = str(Path(__file__).resolve().parents[1] / "orchestrator")
if ORCH_TESTS not in sys.path:
    sys.path.insert(0, ORCH_TESTS)
from test_running_totals import ScriptedMarket, run_scripted  # noqa: E402 (the path above)


class _JobRow:
    """A store that records each write of the job row: ``update_job``'s columns, and the
    heartbeat's own writes."""

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.beats: list[float] = []

    def update_job(self, job_id: str, **fields: Any) -> None:
        self.updates.append(fields)

    def heartbeat(self, job_id: str, at: float) -> None:
        self.beats.append(at)


def _ledger(store: _JobRow, beat: Heartbeat | None) -> Ledger:
    led = Ledger.__new__(Ledger)
    led.job_id, led.store, led.heartbeat = "j-1", store, beat  # type: ignore[assignment]
    led.spent_usd, led.on_demand_usd = 1.25, 2.5
    led.lives, led.unconfirmed = {}, {}
    led.revocations = led.migrations = led.early_stopped = 0
    return led


def test_the_totals_save_carries_the_heartbeat_in_its_own_write() -> None:
    clock = [100.0]
    store = _JobRow()
    beat = Heartbeat(store, "j-1", clock=lambda: clock[0], wall=lambda: 5000.0 + clock[0])  # type: ignore[arg-type]
    assert beat.beat() is True and store.beats == [5100.0]  # the run's start
    led = _ledger(store, beat)
    for at in (102.0, 104.0, 106.0, 108.0):  # every 2 wall s
        clock[0] = at
        led._save_totals(0.0)
        assert beat.beat() is False  # the loop's call: carried, nothing more written
    assert [u["heartbeat_at"] for u in store.updates] == [5102.0, 5104.0, 5106.0, 5108.0]
    assert store.updates[0]["cost_usd"] == 1.25  # the totals, in the same write
    assert store.beats == [5100.0]  # no write of its own: one write every 2 s, as before
    clock[0] = 113.0  # no save for 5 s (a slow pass): its own write again
    assert beat.beat() is True and store.beats == [5100.0, 5113.0]


def test_a_ledger_without_a_heartbeat_saves_its_totals_alone() -> None:
    store = _JobRow()
    _ledger(store, None)._save_totals(0.0)
    assert "heartbeat_at" not in store.updates[0] and store.beats == []


@pytest.mark.timeout(120)
def test_the_orchestrator_carries_its_heartbeat_in_each_totals_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose heartbeat's own period is long (1 h): its one write of its own is at its
    start; each totals save (every pass here) carries a later one, and the job's row keeps
    the last: what a cancel after a kill -9 bills its lives up to."""
    from spotwise.planner import orchestrator

    monkeypatch.setattr(orchestrator, "HEARTBEAT_EVERY_WALL_S", 3600.0)
    own: list[float] = []
    carried: list[float] = []
    beat, update, owned = Store.heartbeat, Store.update_job, Store.update_job_if_owner

    def spy_beat(self: Store, job_id: str, at: float) -> None:
        own.append(at)
        beat(self, job_id, at)

    def spy_update(self: Store, job_id: str, **fields: Any) -> Any:
        if "heartbeat_at" in fields:
            assert "cost_usd" in fields  # carried by the totals' write, not one of its own
            carried.append(fields["heartbeat_at"])
        return update(self, job_id, **fields)

    def spy_owned(self: Store, job_id: str, owner: Any, fields: dict[str, Any]) -> bool:
        if "heartbeat_at" in fields:  # a running job's totals are written owner-checked
            assert "cost_usd" in fields
            carried.append(fields["heartbeat_at"])
        return owned(self, job_id, owner, fields)

    monkeypatch.setattr(Store, "heartbeat", spy_beat)
    monkeypatch.setattr(Store, "update_job", spy_update)
    monkeypatch.setattr(Store, "update_job_if_owner", spy_owned)
    before = time.time()
    summary, db = run_scripted(tmp_path, monkeypatch, ScriptedMarket(steps=2))
    assert summary["state"] == "succeeded"
    assert len(own) == 1 and before <= own[0]
    assert len(carried) >= 5 and carried == sorted(carried) and own[0] <= carried[0]
    with Store.open_existing(db) as s:
        job = s.get_job(summary["job_id"])
    assert job.heartbeat_at == carried[-1] <= (job.ended_at or 0.0)


def test_cancel_bills_a_dead_life_up_to_the_last_totals_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestrator's start beat at +0 and its last totals save at +4.9 wall s (the kill at
    +5): the life ran 4.9 wall s (1470 market s), where the heartbeat alone said 0 s."""
    now = time.time()
    t0 = now - 20.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, _ = _dead_local_job(db, [t0], heartbeat_at=t0)
    with Store.open(db) as s:  # the save, as the ledger writes it
        led = _ledger(s, Heartbeat(s, job, wall=lambda: t0 + 4.9))  # type: ignore[arg-type]
        led.job_id = job
        led._save_totals(0.0)
    _alive(monkeypatch)
    monkeypatch.setattr("spotwise.release.wall_now", lambda: now)
    out = jobs.cancel(job, db=db)
    assert out["billed_to"] == "the orchestrator's last heartbeat" + DIED
    with Store.open_existing(db) as s:
        (row,) = s.list_instances(job)
    assert row.market_seconds == pytest.approx(4.9 * SPEEDUP)
    assert row.ended_at == pytest.approx(t0 + 4.9)
