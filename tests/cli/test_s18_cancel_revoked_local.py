"""Cancel of a dead local job bills a life the replayed market had taken as taken (review-ag F2).

The orchestrator was killed after a trial left its life on a notice (the `revoked` event written)
but before the market took the life and the orchestrator closed its record. The cancel billed
that record as a plain running life up to the heartbeat ($0.458 in the reviewer's job); the
orchestrator would have billed it by the replayed AWS rule as one the market took: free in its
first hour. The `revoked` event names the life it left (``launch``), and cancel bills it so.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_s18_heartbeat import PRICE, SPEEDUP, _alive, _dead_local_job

from spotwise import jobs
from spotwise.store import Store


def test_a_life_the_market_took_before_the_orchestrator_died_is_billed_as_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t0 = time.time() - 40.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    # two lives; the first left on a notice 4.5 wall s (1350 market s: inside the first hour)
    # after its launch, its record still open; the heartbeat 30 wall s after the launches
    job, trials = _dead_local_job(db, [t0, t0 + 5.0], heartbeat_at=t0 + 30.0)
    with Store.open(db) as s:
        s.add_event(job, "revoked", 1_000_000.0, trial_id=trials[0], launch="l-0")
    _alive(monkeypatch)  # both died with the orchestrator
    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
        # 30 wall s = 9000 market s > an hour: a taken life past its first hour is billed whole
        assert rows["l-0"].cost_usd == pytest.approx(30.0 * SPEEDUP * PRICE / 3600.0)
        assert rows["l-1"].cost_usd == pytest.approx(25.0 * SPEEDUP * PRICE / 3600.0)


def test_a_taken_life_in_its_first_hour_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t0 = time.time() - 40.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials = _dead_local_job(db, [t0, t0 + 5.0], heartbeat_at=t0 + 10.0)  # 3000 market s
    with Store.open(db) as s:
        s.add_event(job, "revoked", 1_000_000.0, trial_id=trials[0], launch="l-0")
    _alive(monkeypatch)
    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
        assert rows["l-0"].cost_usd == 0.0  # was 3000 s at $0.90/h: $0.75
        assert rows["l-0"].market_seconds == pytest.approx(10.0 * SPEEDUP)
        assert rows["l-1"].cost_usd == pytest.approx(5.0 * SPEEDUP * PRICE / 3600.0)  # not taken
        assert s.get_job(job).cost_usd == pytest.approx(rows["l-1"].cost_usd)


def test_the_revoked_event_names_the_life_the_market_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestrator's `revoked` event carries the launch id of the life its trial left (its
    trial had already left it, so the event's own instance id was empty): what cancel reads."""
    from test_running_totals import ScriptedMarket, run_scripted

    summary, db = run_scripted(tmp_path, monkeypatch, ScriptedMarket(6, revoke_after={0: 360.0}))
    with Store.open_existing(db) as s:
        first = min(s.list_instances(summary["job_id"]), key=lambda r: r.requested_at)
        (lost,) = s.events(summary["job_id"], kind="revoked")
    assert first.end_reason == "revoked"
    assert lost.detail["launch"] == first.id


def test_cancel_counts_the_revocations_and_migrations_the_last_save_missed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review-ag F3: after kill -9 and cancel, `status` said "revocations 0 · migrations 0"
    where the events held a revocation and the trial a migration (the orchestrator's last
    periodic save was before them): cancel counts them from the trials and `revoked` events."""
    t0 = time.time() - 40.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials = _dead_local_job(db, [t0, t0 + 5.0], heartbeat_at=t0 + 10.0)
    with Store.open(db) as s:
        s.add_event(job, "revoked", 1_000_000.0, trial_id=trials[0], launch="l-0")
        s.update_trial(trials[1], migrations=1, revocations=1)  # written at its relaunch
    _alive(monkeypatch)
    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        j = s.get_job(job)
    assert (j.revocations, j.migrations) == (1, 1)


def test_a_second_cancel_after_one_stopped_midway_bills_to_the_heartbeat_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review-ah F5: a first cancel of a dead local job that stopped after marking the job
    cancelled (Ctrl-C, a locked database) left its records open; the second took the "already
    cancelled" path and billed the lives up to now (10x the replayed bill), not up to the
    heartbeat as the first would have."""
    t0 = time.time() - 600.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, _ = _dead_local_job(db, [t0, t0 + 1.0], heartbeat_at=t0 + 60.0)
    with Store.open(db) as s:
        s.update_job(job, state="cancelled", ended_at=time.time())  # where the first stopped
    _alive(monkeypatch)
    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        rows = sorted(s.list_instances(job), key=lambda r: r.id)
    assert [r.market_seconds for r in rows] == [
        pytest.approx(60.0 * SPEEDUP),
        pytest.approx(59.0 * SPEEDUP),
    ]  # was ~600 wall s each: 180000 market s
    assert [r.ended_at for r in rows] == [pytest.approx(t0 + 60.0)] * 2
