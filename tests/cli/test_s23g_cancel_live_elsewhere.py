"""`spotwise cancel` of a job whose orchestrator runs on another machine sharing the database
(review-ax AX1, AX5).

`cancel --force` of a live orchestrator (its row names another host, its heartbeat 2 s old)
said "orchestrator was not running", marked the job cancelled and killed its instances; the
orchestrator never learnt it and ran the whole job. Now `--force` is refused while the
heartbeat is fresh (under ``STALE_HEARTBEAT_S``), and a plain cancel writes the request to the
job's row (``cancelled``, no ``ended_at``) and waits for the orchestrator's end. The
dead-orchestrator path writes its cancel only over the state it read."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from test_cancel import _cloud_job

from spotwise import jobs
from spotwise.errors import ConfigError
from spotwise.liveness import STALE_HEARTBEAT_S  # 391 s: the lock patience and a margin
from spotwise.store import Store


def _live_elsewhere(tmp_path: Path, beat_age_s: float) -> tuple[str, str]:
    """A running cloud job recorded on build-box-2, pid 4242, heartbeat ``beat_age_s`` old."""
    db, job = _cloud_job(tmp_path, "build-box-2", [])
    with Store.open(db) as s:
        s.update_job(job, pid=4242, heartbeat_at=time.time() - beat_age_s)
    return db, job


def _no_release(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from spotwise.planner import reconcile as backend

    released: list[str] = []
    monkeypatch.setattr(
        backend,
        "reconcile_records",
        lambda spec, job_id, held, spare=None, **_: released.append(job_id) or backend.Reconciled(),
    )
    return released


def test_force_is_refused_while_the_heartbeat_is_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It marked the job cancelled and released its instances under a live orchestrator."""
    released = _no_release(monkeypatch)
    db, job = _live_elsewhere(tmp_path, 2.0)
    with pytest.raises(ConfigError) as e:
        jobs.cancel(job, db=db, force=True)
    assert e.value.message.startswith(
        f"job {job}'s heartbeat is 2 s old: it is alive on build-box-2: run `spotwise cancel "
        f"{job}`, which asks it to stop"
    )
    assert e.value.hint == (
        "--force is for a lost machine: it is refused until the heartbeat is 391 s old (longer "
        "than a write may wait out a database lock)"
    )
    assert released == []
    with Store.open_existing(db) as s:
        row = s.get_job(job)
    assert (row.state.value, row.ended_at, row.error) == ("running", None, None)


def test_force_goes_on_once_the_heartbeat_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    released = _no_release(monkeypatch)
    db, job = _live_elsewhere(tmp_path, STALE_HEARTBEAT_S + 5)
    out = jobs.cancel(job, db=db, force=True)
    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    assert released == [job]


def test_a_plain_cancel_asks_the_other_machine_through_the_database(tmp_path: Path) -> None:
    """It was refused ("run it there"); now the request is written, and the cancel waits for
    the orchestrator's end (played here: it writes its ``ended_at`` once it sees the state)."""
    db, job = _live_elsewhere(tmp_path, 2.0)
    seen: list[tuple[str, float | None]] = []

    def orchestrator() -> None:
        with Store.open_existing(db) as s:
            for _ in range(200):
                row = s.get_job(job)
                if row.state.value == "cancelled":
                    seen.append((row.state.value, row.ended_at))
                    s.update_job(job, ended_at=time.time())
                    return
                time.sleep(0.02)

    player = threading.Thread(target=orchestrator)
    player.start()
    out = jobs.cancel(job, db=db, wait_s=5)
    player.join()
    assert seen == [("cancelled", None)]  # the request: no end yet
    assert out == {
        "job_id": job,
        "state": "cancelled",
        "cancelled": True,
        "message": "asked the orchestrator on build-box-2 (pid 4242) through the database: it "
        "checkpointed and stopped every trial",
    }


def test_a_request_not_answered_in_time_says_it_is_still_stopping(tmp_path: Path) -> None:
    db, job = _live_elsewhere(tmp_path, 2.0)
    out = jobs.cancel(job, db=db, wait_s=0.3)
    assert out["stopping"] is True and out["cancelled"] is False
    assert out["message"].startswith(
        "asked the orchestrator on build-box-2 (pid 4242) to stop; it is still stopping after "
        "0.3 s (its heartbeat is "
    )
    again = jobs.cancel(job, db=db, wait_s=0.2)  # asked: it waits again, releases nothing
    assert again["stopping"] is True
    with Store.open_existing(db) as s:
        row = s.get_job(job)
    assert (row.state.value, row.ended_at) == ("cancelled", None)


def test_a_cancel_that_read_a_job_before_its_end_does_not_write_over_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AX5: the dead-orchestrator path read the job, then wrote `cancelled` over the
    `succeeded` its orchestrator wrote in between. Its write is now over the state it read:
    it reads the job again and finds it finished."""
    _no_release(monkeypatch)
    db, job = _cloud_job(tmp_path, None, [])  # pid 0: taken for gone
    real = Store.list_trials

    def end_meanwhile(self: Store, job_id: str) -> list:  # the orchestrator ends meanwhile
        with Store.open_existing(db) as other:
            if other.get_job(job_id).state.value == "running":
                other.update_job(job_id, state="succeeded", ended_at=time.time())
        return real(self, job_id)

    monkeypatch.setattr(Store, "list_trials", end_meanwhile)
    out = jobs.cancel(job, db=db)
    assert (out["state"], out["cancelled"]) == ("succeeded", False)
    with Store.open_existing(db) as s:
        row = s.get_job(job)
    assert (row.state.value, row.error) == ("succeeded", None)
