"""`spotwise resume` of a job whose cancel was never finished (s24 helper A; s23 helper K's
note on planner/resume.py).

A cancel of a job running on another machine writes the request to its row: ``cancelled``, no
``ended_at``. When that machine dies just after (or its orchestrator crashes mid-drain), nobody
writes the job's end. While its heartbeat was fresh a resume was refused; once it was stale,
`spotwise resume` took the half-closed job: its trials still ``running`` in the store, a trial
that had finished (its last step reported) was queued again from its checkpoint and paid for
twice. Now such a job is refused in one line naming the cancel that closes it (`spotwise
cancel JOB` where its orchestrator ran on this machine and is gone, `spotwise cancel --force
JOB` where it ran elsewhere), with nothing written; once that cancel has closed it, the resume
runs the unfinished trial only.

Only a cancel's request writes a finished state without ``ended_at`` (every end, the
orchestrator's and the dead-orchestrator close, writes it): a ``failed`` or ``succeeded`` job
without one, which no cancel would close, is resumed as before (exempted explicitly).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from test_cancel import _cloud_job
from test_s23k_request_then_lost import LOST_S, _no_release

from spotwise import jobs, liveness
from spotwise.errors import ConfigError
from spotwise.planner import orchestrator
from spotwise.providers import local_records
from spotwise.store import Store


class _Ran(Exception):
    """The resumed run, replaced: nothing is launched."""


def _resume(db: str, job_id: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`spotwise resume JOB` (what the command calls), its run replaced: the plans it got."""
    ran: list[Any] = []

    def resume_job(plan: Any, store: Any, opts: Any) -> dict[str, Any]:
        ran.append(plan)
        raise _Ran(plan.job_id)

    monkeypatch.setattr(orchestrator, "resume_job", resume_job)
    with contextlib.suppress(_Ran):
        jobs.resume(job_id, db=db)
    return ran


def _two_trials(
    tmp_path: Path, host: str, pid: int, billed: bool = True, **row: Any
) -> tuple[str, str, str, str]:
    """An AWS job (3 steps, 8 trials planned) on ``host`` (pid ``pid``, ``row``: more
    columns), its heartbeat fresh, two trials running, each with a record: ``done`` reported
    its last step (3 of 3, 0.9: it finished, its orchestrator had not seen the exit yet),
    ``cut`` reached step 1 (its checkpoint). ``billed``: each record closed and billed (the
    drain's last bill was written, its end was not), else open."""
    now = time.time()
    life: dict[str, Any] = {"state": "running", "launched_at": now - 600}
    if billed:
        life |= {"state": "terminated", "end_reason": "stopped", "ended_at": now - 5}
        life |= {"market_seconds": 595.0, "cost_usd": 0.15}
    db, job = _cloud_job(tmp_path, host, [{"id": "l-done", **life}, {"id": "l-cut", **life}])
    with Store.open(db) as s:
        s.update_job(job, pid=pid, heartbeat_at=now - 2, **row)
        done, cut = (t.id for t in sorted(s.list_trials(job), key=lambda t: t.number))
        s.update_trial(done, state="running", step=3, checkpoint_step=3)
        s.update_trial(cut, state="running", step=1, checkpoint_step=1)
        s.add_observation(done, 3, 0.9, now)
        s.add_observation(cut, 1, 0.2, now)
    return db, job, done, cut


def _lost(db: str, job: str) -> None:
    """Its orchestrator never answered: its heartbeat is now stale."""
    with Store.open(db) as s:
        s.update_job(job, heartbeat_at=time.time() - LOST_S)


def _untouched(db: str, job: str, pid: int, host: str, done: str, cut: str, held: int) -> None:
    """The refused resume wrote nothing: still the half-closed job its request left."""
    with Store.open_existing(db) as s:
        row = s.get_job(job)
        assert (row.state.value, row.ended_at, row.pid, row.host) == ("cancelled", None, pid, host)
        assert [s.get_trial(t).state.value for t in (done, cut)] == ["running", "running"]
        assert s.events(job, kind="resumed") == []
        assert len(s.list_instances(job, active_only=True)) == held


def _resumed_once(ran: list[Any], job: str, done: str, cut: str) -> None:
    """The resume after the cancel: the unfinished trial queued again from its checkpoint,
    the finished one kept as it ended (was: queued again, its work paid twice)."""
    (plan,) = ran
    assert plan.job_id == job
    assert [(t.trial_id, t.step) for t in plan.requeued] == [(cut, 1)]
    by_id = {t.trial_id: t for t in plan.trials}
    assert (by_id[done].state, by_id[done].step) == ("completed", 3)
    assert plan.ended == [({"lr": 0.1}, 0.9)]  # the search is told its final
    assert plan.from_state.value == "cancelled" and plan.ended_at is not None


@pytest.mark.parametrize("billed", [True, False], ids=["records-billed", "records-open"])
def test_a_request_never_answered_elsewhere_is_refused_until_cancel_force_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, billed: bool
) -> None:
    """Billed: the machine died after its drain's last bill, before its end's write (a resume
    was accepted). Open: it died before (a resume was refused for the records, naming a plain
    cancel, which is refused for a job on another machine)."""
    released = _no_release(monkeypatch)
    db, job, done, cut = _two_trials(tmp_path, "build-box-2", 4242, billed)
    first = jobs.cancel(job, db=db, wait_s=0.2)  # the request, through the database
    assert first["stopping"] is True
    _lost(db, job)
    with pytest.raises(ConfigError) as e:  # before: resumed, `done` queued again from step 3
        _resume(db, job, monkeypatch)
    assert e.value.exit_code == 2 and e.value.hint is None  # one line: `error: ...`
    assert str(e.value) == (
        f"job {job} is cancelled but its orchestrator never closed it on build-box-2 (pid "
        f"4242, heartbeat {LOST_S:.0f} s old): if that machine is lost, run `spotwise cancel "
        f"--force {job}` first (it closes the job), then `spotwise resume {job}`"
    )
    _untouched(db, job, 4242, "build-box-2", done, cut, held=0 if billed else 2)
    assert released == []
    out = jobs.cancel(job, db=db, force=True)  # the fix the message names
    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    assert sorted(out["terminated_instances"]) == ([] if billed else ["i-l-cut", "i-l-done"])
    _resumed_once(_resume(db, job, monkeypatch), job, done, cut)


def test_a_request_to_an_orchestrator_here_that_is_gone_is_refused_until_cancel_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its orchestrator ran on this machine (no process holds its pid now): a plain cancel."""
    _no_release(monkeypatch)
    here = socket.gethostname()
    db, job, done, cut = _two_trials(tmp_path, here, 0, state="cancelled")  # the request
    _lost(db, job)
    with pytest.raises(ConfigError) as e:
        _resume(db, job, monkeypatch)
    assert str(e.value) == (
        f"job {job} is cancelled but its orchestrator never closed it (it exited): run "
        f"`spotwise cancel {job}` first (it closes the job), then `spotwise resume {job}`"
    )
    _untouched(db, job, 0, here, done, cut, held=0)
    out = jobs.cancel(job, db=db)
    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    _resumed_once(_resume(db, job, monkeypatch), job, done, cut)


def test_a_hidden_orchestrator_is_refused_until_cancel_force_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live process of another user holds its pid (``/proc`` mounted ``hidepid=1``: its
    ``/proc/PID`` unreadable, ``kill(pid, 0)`` refused): `--force` if it is not the
    orchestrator."""
    _no_release(monkeypatch)
    here = socket.gethostname()
    token = "pid:[4026531836]|b0b0-1:12345"
    db, job, done, cut = _two_trials(tmp_path, here, 4242, state="cancelled", pid_start=token)
    _lost(db, job)
    (tmp_path / "proc").mkdir()
    monkeypatch.setattr(local_records, "_PROC", tmp_path / "proc")

    def refuse(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(liveness.os, "kill", refuse)
    with Store.open_existing(db) as s:
        assert liveness.orchestrator_state(s.get_job(job)) == "hidden"
    with pytest.raises(ConfigError) as e:
        _resume(db, job, monkeypatch)
    assert str(e.value) == (
        f"job {job}'s orchestrator (pid 4242) may still run: a live process holds its pid, and "
        "this user cannot read when it started (another user's process, /proc mounted "
        f"hidepid): if it is not the orchestrator, run `spotwise cancel --force {job}` first, "
        f"then `spotwise resume {job}`"
    )
    _untouched(db, job, 4242, here, done, cut, held=0)
    with pytest.raises(ConfigError):  # a plain cancel: it may be the orchestrator
        jobs.cancel(job, db=db)
    out = jobs.cancel(job, db=db, force=True)
    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    _resumed_once(_resume(db, job, monkeypatch), job, done, cut)


def test_a_live_orchestrator_here_with_a_stale_heartbeat_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Alive on this machine (this process, its start recorded), silent: a resume is refused,
    and `spotwise cancel` waits for its end rather than closing the job (nothing signalled)."""
    from spotwise.providers.local_records import process_start

    released = _no_release(monkeypatch)
    pid, here = os.getpid(), socket.gethostname()
    db, job, done, cut = _two_trials(
        tmp_path, here, pid, state="cancelled", pid_start=process_start(pid)
    )
    _lost(db, job)
    with pytest.raises(ConfigError) as e:
        _resume(db, job, monkeypatch)
    assert str(e.value) == (
        f"job {job} is cancelled but its orchestrator never closed it and still runs here "
        f"(pid {pid}, heartbeat {LOST_S:.0f} s old): wait until `spotwise status {job}` shows "
        f"it ended (`spotwise cancel {job}` waits for it), then `spotwise resume {job}`"
    )
    assert jobs.cancel(job, db=db, wait_s=0.2)["stopping"] is True
    assert released == []
    _untouched(db, job, pid, here, done, cut, held=0)


@pytest.mark.parametrize("state", ["failed", "succeeded"])
def test_a_finished_job_no_cancel_would_close_is_resumed_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    """The exemption: no path writes ``failed`` or ``succeeded`` without ``ended_at``, and a
    cancel would not close such a job (it is finished): refusing it would strand it."""
    db, job = _cloud_job(tmp_path, "build-box-2", [])
    with Store.open(db) as s:
        s.update_job(job, state=state, pid=4242, heartbeat_at=time.time() - LOST_S)
    (plan,) = _resume(db, job, monkeypatch)
    assert (plan.job_id, plan.from_state.value, plan.ended_at) == (job, state, None)
