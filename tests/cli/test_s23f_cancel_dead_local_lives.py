"""`spotwise cancel` of a local job whose orchestrator died bills each life up to when it ended.

* review-aw F1: the trainer (the life's recorded first process) died with the orchestrator
  (``PR_SET_PDEATHSIG``), only a helper it started (DataLoader workers) lived on; the cancel
  found the helper, killed it (right) and billed the life up to now: at the replay's 300x a
  cancel typed an hour later billed 300 market hours. Its life ended with its trainer: up to
  when the orchestrator was last known alive, as a life found gone; one whose trainer itself
  still runs is billed up to now (it ran).
* review-aw F3: a life killed between the provider's launch (its process started, its process
  record left) and its record's ``running`` update was closed at $0: AWS, whose rule the replay
  plays, bills such an instance its 60 s minimum. A launch never made (no process record) is
  still billed nothing.
* review-ax AX2 (4): an open record whose life the market took (its ``revoked`` event, 1302
  market s after its ``launch`` event: free in AWS's first hour) was billed from its start to
  the orchestrator's last record, 11928 market s ($2.98 here): it ends at the event's time.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shared_helpers import local_replay_spec, record_launch

from spotwise import jobs, release
from spotwise.providers.base import our_tags
from spotwise.providers.local_records import (
    MARKER_ENV,
    ProcRecord,
    process_start,
    records_root,
    write_record,
)
from spotwise.store import Store

SPEEDUP, PRICE = 300.0, 0.9  # the replay's market s per wall s; $/h of each life
DIED = ", as their trial processes died with the orchestrator"


@pytest.fixture(autouse=True)
def _quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local provider's records under ``tmp_path``; the replayed market's on-demand price
    given, not read from its trace (seconds under load: not what these tests are about)."""
    from spotwise import release_reference

    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(release_reference, "_replay_on_demand", lambda spec, job: 3.06)


def _dead_local_job(db: str, *, heartbeat_at: float | None, **life: object) -> tuple[str, str]:
    """A local replay job recorded as running under pid 0 (no orchestrator) with one running
    trial and its open record ``l-0`` (``life``: its columns); returns the job and trial ids."""
    with Store.open(db) as s:
        j = s.create_job("j", local_replay_spec(SPEEDUP), "job.yaml", "spot-greedy", "maximize")
        s.update_job(j.id, state="running", pid=0, heartbeat_at=heartbeat_at)
        t = s.add_trial(j.id, 0, {"lr": 0.01})
        s.update_trial(t.id, state="running")
        record_launch(s, j.id, t.id, price_per_hour=PRICE, provider="local", id="l-0", **life)
    return j.id, t.id


def _record(job: str, trial: str, pid: int, start: str) -> None:
    """The local provider's process record of launch ``l-0`` (instance ``local-0``)."""
    rec = ProcRecord(
        instance_id="local-0",
        job_id=job,
        pid=pid,
        pgid=pid,
        start=start,
        tags=our_tags(job, trial, "l-0"),
        argv=["python", "train.py"],
        launcher_pid=os.getpid(),
        created_at=time.time(),
    )
    write_record(records_root(), rec)


def _stat(p: Path) -> list[str] | None:
    """Fields 3.. of a ``/proc/<pid>/stat`` (state first), None once it has gone."""
    try:
        return p.joinpath("stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _session(sid: int) -> list[int]:
    """The live (not zombie) processes of session ``sid``."""
    return [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and (f := _stat(p)) is not None and f[3] == str(sid) and f[0] != "Z"
    ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads sessions in /proc")
@pytest.mark.parametrize("trainer_alive", [False, True])
def test_a_life_whose_trainer_died_is_not_billed_for_the_helpers_that_outlived_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trainer_alive: bool
) -> None:
    now = time.time()
    t0 = now - 40.0  # launched 40 wall s before the cancel, last alive 30 s after the launch
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trial = _dead_local_job(
        db,
        heartbeat_at=t0 + 30.0,
        state="running",
        requested_at=t0,
        launched_at=t0,
        provider_instance_id="local-0",
    )
    env = {**os.environ, MARKER_ENV: "local-0"}
    # the trial's session: its first process starts a helper in its group; then it exits (it
    # died with the orchestrator) or runs on (off Linux nothing kills it)
    argv = ["sleep", "30"] if trainer_alive else ["sh", "-c", "sleep 30 & read line"]
    leader = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, start_new_session=True)
    try:
        start = process_start(leader.pid)
        assert start is not None
        _record(job, trial, leader.pid, start)
        if not trainer_alive:
            deadline = time.monotonic() + 5.0
            while len(_session(leader.pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)  # until the helper has started
            assert leader.stdin is not None
            leader.stdin.close()  # the trainer exits; its helper lives on
            leader.wait(timeout=5.0)
        assert len(_session(leader.pid)) == 1  # the helper, or the trainer itself
        monkeypatch.setattr(release, "wall_now", lambda: now)
        out = jobs.cancel(job, db=db)
        assert _session(leader.pid) == []  # killed either way: nothing is left running
        with Store.open_existing(db) as s:
            row = s.get_instance("l-0")
            job_usd = s.get_job(job).cost_usd
    finally:
        with contextlib.suppress(ProcessLookupError):  # what this test started, if left
            os.killpg(leader.pid, signal.SIGKILL)
        if leader.poll() is None:
            leader.wait(timeout=5.0)
    assert out["terminated_instances"] == ["local-0"]
    if trainer_alive:  # it ran until the cancel killed it: 40 wall s = 12000 market s
        assert out["billed_to"] == "now"
        assert row.market_seconds == pytest.approx(12000.0, abs=1e-6)
        assert row.cost_usd == pytest.approx(3.0, abs=1e-9)
        assert row.ended_at == pytest.approx(now)
    else:  # up to the orchestrator's last heartbeat: 30 wall s = 9000 market s (was $3.00)
        assert row.cost_usd == pytest.approx(2.25, abs=1e-9)
        assert row.market_seconds == pytest.approx(9000.0, abs=1e-6)
        assert row.ended_at == pytest.approx(t0 + 30.0)
        assert out["billed_to"] == (
            "the orchestrator's last heartbeat" + DIED + "; local-0: its trial process had died "
            "with the orchestrator, its helper processes outlived it: killed"
        )
        assert out["message"].endswith(
            "1 tagged instance(s) terminated, 1 instance record(s) closed and billed up to "
            + out["billed_to"]
        )
    assert job_usd == pytest.approx(row.cost_usd, abs=1e-12)


@pytest.mark.parametrize(
    ("started", "beat", "usd", "market_s"),
    [
        (True, -1.0, 60 * PRICE / 3600, 0.0),  # killed at once: the 60 s minimum (was $0)
        (True, 0.5, 150 * PRICE / 3600, 150.0),  # 0.5 wall s after its request (was $0)
        (False, 0.5, 0.0, 0.0),  # never launched (no process record): nothing to bill
    ],
)
def test_a_life_started_before_its_record_said_running_is_billed_by_the_rule(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    started: bool,
    beat: float,
    usd: float,
    market_s: float,
) -> None:
    t0 = time.time() - 20.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trial = _dead_local_job(db, heartbeat_at=t0 + beat, requested_at=t0)  # `requested`
    if started:  # the provider's launch started it; its process died with the orchestrator
        gone = subprocess.Popen(["true"])
        gone.wait()
        _record(job, trial, gone.pid, "pid:[1]|boot:1")  # no process has that start
    out = jobs.cancel(job, db=db)
    assert out["terminated_instances"] == []
    with Store.open_existing(db) as s:
        row = s.get_instance("l-0")
        assert (row.state, row.end_reason) == ("terminated", "reconciled")
        assert row.cost_usd == pytest.approx(usd, abs=1e-12)
        assert row.market_seconds == pytest.approx(market_s, abs=1e-6)
        assert row.launched_at == (t0 if started else None)  # billed from its request
        assert s.get_job(job).cost_usd == pytest.approx(usd, abs=1e-12)
        assert s.get_trial(trial).cost_usd == pytest.approx(usd, abs=1e-12)
    assert not (records_root() / job).exists()  # the process record was reconciled


LAUNCH_MARKET = 1677794941.40  # the reviewer's life: its `launch` event's market time


@pytest.mark.parametrize(
    ("taken_after", "usd"),
    [
        (1301.72, 0.0),  # the reviewer's: in its first hour, free (was 11928 s: $2.982)
        (4999.5, 5000.0 * PRICE / 3600),  # past the first hour: 5000 s, per second ($1.25)
    ],
)
def test_a_life_the_market_took_ends_at_its_revoked_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, taken_after: float, usd: float
) -> None:
    t0 = time.time() - 60.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    # the orchestrator ran on 11928 market s (39.76 wall s) after the launch
    job, trial = _dead_local_job(
        db,
        heartbeat_at=t0 + 11928.0 / SPEEDUP,
        state="running",
        requested_at=t0,
        launched_at=t0,
        provider_instance_id="local-0",
    )
    with Store.open(db) as s:
        s.add_event(job, "launch", LAUNCH_MARKET, trial_id=trial, instance_id="l-0")
        taken = LAUNCH_MARKET + taken_after
        s.add_event(job, "revoked", taken, trial_id=trial, launch="l-0")
    out = jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        row = s.get_instance("l-0")
        assert row.cost_usd == pytest.approx(usd, abs=1e-6)
        assert row.market_seconds == pytest.approx(taken_after, abs=1e-3)
        assert row.ended_at == pytest.approx(t0 + taken_after / SPEEDUP, abs=1e-6)
        assert s.get_job(job).cost_usd == pytest.approx(usd, abs=1e-6)
        assert s.get_trial(trial).cost_usd == pytest.approx(usd, abs=1e-6)
    assert out["billed_to"] == "when the replayed market took l-0 (its `revoked` event)"
