"""A cancel request its orchestrator never answered (review-az AZ1), and the heartbeat's
staleness against the store's lock patience (review-az AZ6).

AZ1: a plain `spotwise cancel` of a job on another machine whose heartbeat is fresh writes
the request (``cancelled``, no ``ended_at``). When that machine has just died, nobody answers,
and every later cancel, ``--force`` too, took the finished-job branch: the job stayed
``cancelled`` with no ``ended_at`` and no best trial for ever, its trials ``running`` (a
finished one was queued again by `spotwise resume`, paid twice), and a local replay's open
life was billed up to now (x300) rather than to the orchestrator's last heartbeat. Now such a
job, its heartbeat stale, is closed as a dead orchestrator's: with ``--force`` for one on
another machine (a plain cancel says it has not answered and names ``--force``), at once for
one on this machine whose process is gone.

AZ6: the heartbeat was stale after 90 s, but a running job's store write waits out another
process's lock for up to 300 s (``LOCK_PATIENCE_S``), writing no heartbeat meanwhile: a live
orchestrator looked lost and ``--force`` was let through. The staleness is now derived from
the store's constants: patience + one busy timeout + the pause + a 60 s margin."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from shared_helpers import local_replay_spec, record_launch
from test_cancel import _cloud_job

from spotwise import jobs, release
from spotwise.errors import ConfigError
from spotwise.store import Store

LOST_S = 1000.0  # a heartbeat this old is stale under any threshold (90 s before, 391 s now)


def _no_release(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The cloud asked nothing; each open record settled as terminated."""
    from spotwise.planner import reconcile as backend

    released: list[str] = []

    def settle(spec: object, job_id: str, held: list, spare: object = None, **_: object) -> object:
        released.append(job_id)
        return backend.Reconciled(
            terminated=[f"i-{h.launch_id}" for h in held],
            records=[backend.Settled(h, backend.TERMINATED, f"i-{h.launch_id}") for h in held],
        )

    monkeypatch.setattr(backend, "reconcile_records", settle)
    return released


def _asked_then_lost(tmp_path: Path) -> tuple[str, str, str]:
    """The reviewer's case: a cloud job on build-box-2 (pid 4242), a running trial that
    reported its last step (3 of 3, 0.9), one open record; a plain cancel asked it to stop
    (no answer in 0.3 s); then its machine was lost (heartbeat ``LOST_S`` old)."""
    db, job = _cloud_job(
        tmp_path,
        "build-box-2",
        [{"id": "l-run", "state": "running", "launched_at": time.time() - 600}],
    )
    with Store.open(db) as s:
        s.update_job(job, pid=4242, heartbeat_at=time.time() - 2)
        (t,) = s.list_trials(job)
        s.update_trial(t.id, state="running")
        s.add_observation(t.id, 3, 0.9, time.time())
    first = jobs.cancel(job, db=db, wait_s=0.3)
    assert first["stopping"] is True  # the request, not answered
    with Store.open(db) as s:
        s.update_job(job, heartbeat_at=time.time() - LOST_S)
    return db, job, t.id


def test_a_request_never_answered_is_closed_by_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    released = _no_release(monkeypatch)
    db, job, trial = _asked_then_lost(tmp_path)
    # a plain cancel: refused, nothing written (was: the records released, the job left open)
    with pytest.raises(ConfigError) as e:
        jobs.cancel(job, db=db)
    assert e.value.message.startswith(
        f"job {job} was asked to stop and its orchestrator on build-box-2 (pid 4242) has not "
        f"ended it: its heartbeat is {LOST_S:.0f} s old (alive under "
    )
    assert e.value.hint == (
        f"if that machine is lost, `spotwise cancel --force {job}` releases the job's instances "
        "from here and closes the job"
    )
    assert released == []
    out = jobs.cancel(job, db=db, force=True)
    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    assert out["terminated_instances"] == ["i-l-run"]
    assert released == [job]
    with Store.open_existing(db) as s:
        row = s.get_job(job)
        t = s.get_trial(trial)
        rec = s.get_instance("l-run")
    assert row.state.value == "cancelled" and row.ended_at is not None  # was: None for ever
    assert row.error == "cancelled after its orchestrator had exited"
    assert (row.best_trial_id, row.best_metric) == (trial, 0.9)  # was: None
    assert (t.state.value, t.final_metric, t.step) == ("completed", 0.9, 3)  # was: running
    assert rec.state == "terminated"
    # a resume runs the finished trial no more (was: queued again from step 0, paid twice)
    from spotwise.planner.resume import plan_resume

    with Store.open_existing(db) as s:
        plan = plan_resume(s, s.get_job(job))
    assert plan.requeued == []
    assert [(r.trial_id, r.state, r.final_metric) for r in plan.trials] == [
        (trial, "completed", 0.9)
    ]
    again = jobs.cancel(job, db=db, force=True)  # and it stays closed
    assert again["cancelled"] is False and again["state"] == "cancelled"


def test_a_request_to_a_local_orchestrator_that_died_is_closed_by_a_plain_cancel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On this machine, its process gone (pid 0): the dead-orchestrator close at once, its
    replayed life billed up to the last heartbeat (30 wall s: 9000 market s at 300x, $2.25),
    not up to now (1000 wall s: $75)."""
    from spotwise import release_reference

    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(release_reference, "_replay_on_demand", lambda spec, job: 3.06)
    now = time.time()
    t0 = now - LOST_S
    monkeypatch.setattr(release, "wall_now", lambda: now)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        j = s.create_job("j", local_replay_spec(300.0), "job.yaml", "spot-greedy", "maximize")
        # the request, written while it was alive; then it died (no `ended_at`, beat stale)
        s.update_job(j.id, state="cancelled", pid=0, heartbeat_at=t0 + 30.0)
        t = s.add_trial(j.id, 0, {"lr": 0.01})
        s.update_trial(t.id, state="running")
        record_launch(
            s,
            j.id,
            t.id,
            price_per_hour=0.9,
            provider="local",
            id="l-0",
            state="running",
            requested_at=t0,
            launched_at=t0,
            provider_instance_id="local-0",
        )
    out = jobs.cancel(j.id, db=db)
    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    with Store.open_existing(db) as s:
        row = s.get_job(j.id)
        rec = s.get_instance("l-0")
        trial = s.get_trial(t.id)
    assert row.ended_at is not None and trial.state.value == "cancelled"
    assert rec.market_seconds == pytest.approx(9000.0, abs=1e-6)
    assert rec.cost_usd == pytest.approx(2.25, abs=1e-9)
    assert row.cost_usd == pytest.approx(2.25, abs=1e-9)


def test_a_request_still_fresh_waits_again_and_releases_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard: while the heartbeat is fresh, a second cancel, `--force` too, waits for the
    orchestrator's end and writes nothing."""
    released = _no_release(monkeypatch)
    db, job = _cloud_job(tmp_path, "build-box-2", [])
    with Store.open(db) as s:
        s.update_job(job, pid=4242, state="cancelled", heartbeat_at=time.time() - 2)
    for force in (False, True):
        out = jobs.cancel(job, db=db, wait_s=0.2, force=force)
        assert out["stopping"] is True
    assert released == []
    with Store.open_existing(db) as s:
        row = s.get_job(job)
    assert (row.state.value, row.ended_at, row.error) == ("cancelled", None, None)


def test_the_heartbeat_outlasts_a_write_that_waits_out_a_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AZ6: derived from the store's constants, not a number of its own."""
    import spotwise.liveness as liveness
    from spotwise.store import db as store_db
    from spotwise.store import records

    longest = records.LOCK_PATIENCE_S + store_db.SQLITE_BUSY_TIMEOUT_S  # the last try's wait
    assert longest < liveness.STALE_HEARTBEAT_S  # was 330 > 90
    assert liveness.STALE_HEARTBEAT_S == 391.0  # 300 + 30 + 1 + 60
    monkeypatch.setattr(records, "LOCK_PATIENCE_S", 600.0)
    assert liveness.STALE_HEARTBEAT_S == 691.0


def test_a_live_orchestrator_waiting_out_a_lock_is_not_taken_for_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AZ6: 200 s without a heartbeat (a write waiting out another process's lock): `--force`
    is refused (it released the live job's instances), and a plain cancel asks it through the
    database (it was refused: "none asks it from here")."""
    released = _no_release(monkeypatch)
    db, job = _cloud_job(tmp_path, "build-box-2", [])
    with Store.open(db) as s:
        s.update_job(job, pid=4242, heartbeat_at=time.time() - 200)
    with pytest.raises(ConfigError) as e:
        jobs.cancel(job, db=db, force=True)
    assert e.value.message.startswith(f"job {job}'s heartbeat is 200 s old: it is alive on ")
    assert released == []
    out = jobs.cancel(job, db=db, wait_s=0.2)
    assert out["stopping"] is True
    with Store.open_existing(db) as s:
        row = s.get_job(job)
    assert (row.state.value, row.ended_at) == ("cancelled", None)  # the request
