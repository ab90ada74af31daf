"""`spotwise cancel` of a dead local job whose trial ran under a wrapper (review-az AZ7).

With ``command: ["sh", "-c", "python train.py; ..."]`` the recorded first process is the shell:
``PR_SET_PDEATHSIG`` kills only it when the orchestrator dies, and the trainer it started runs
on until the cancel. The cancel took the trainer for a helper that outlived a dead trainer:
it billed the life up to the orchestrator's last heartbeat (30 wall s = 9000 market s, $2.25)
and said "its helper processes outlived it", where the trial ran until the cancel killed it
(40 wall s = 12000 market s, $3.00). The SDK now says which process writes the trial's events
(``events-0.jsonl.writer``), and a life whose writer still runs is billed up to now. A trainer
that died under its wrapper, leaving helpers, is billed up to the heartbeat as before; a
writer note that names another process (a pid now held by a helper, or a process outside the
trial) is not believed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
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
    survey_job,
    write_record,
)
from spotwise.store import Store

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads sessions in /proc"
)

SPEEDUP, PRICE = 300.0, 0.9  # the replay's market s per wall s; $/h of each life
REPO = str(Path(__file__).resolve().parents[2])  # the spotwise the trainer imports
TRAINER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from spotwise import sdk
    helper = subprocess.Popen(["sleep", "30"])  # a helper (as a DataLoader worker)
    sdk.report(1, 0.5)
    print("ready", os.getpid(), helper.pid, flush=True)
    deadline = time.monotonic() + 30
    while sys.argv[1] == "run-on" and not sdk.should_stop() and time.monotonic() < deadline:
        time.sleep(0.01)  # the trainer works on, until it is asked to stop (SIGTERM)
    """
)


@pytest.fixture(autouse=True)
def _quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise import release_reference

    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(release_reference, "_replay_on_demand", lambda spec, job: 3.06)


def _dead_local_job(db: str, t0: float) -> tuple[str, str]:
    """A local replay job under pid 0 (no orchestrator), last heartbeat 30 s after ``t0``,
    with one running trial and its open record ``l-0`` (instance ``local-0``) launched at
    ``t0``."""
    with Store.open(db) as s:
        j = s.create_job("j", local_replay_spec(SPEEDUP), "job.yaml", "spot-greedy", "maximize")
        s.update_job(j.id, state="running", pid=0, heartbeat_at=t0 + 30.0)
        t = s.add_trial(j.id, 0, {"lr": 0.01})
        s.update_trial(t.id, state="running")
        record_launch(
            s,
            j.id,
            t.id,
            price_per_hour=PRICE,
            provider="local",
            id="l-0",
            state="running",
            requested_at=t0,
            launched_at=t0,
            provider_instance_id="local-0",
        )
    return j.id, t.id


def _record(job: str, trial: str, leader: subprocess.Popen[bytes]) -> None:
    """The local provider's process record of launch ``l-0``, first process ``leader``."""
    start = process_start(leader.pid)
    assert start is not None
    rec = ProcRecord(
        instance_id="local-0",
        job_id=job,
        pid=leader.pid,
        pgid=leader.pid,
        start=start,
        tags=our_tags(job, trial, "l-0"),
        argv=["sh", "-c", "python train.py; sleep 30"],
        launcher_pid=os.getpid(),
        created_at=time.time(),
    )
    write_record(records_root(), rec)


def _live(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _session(sid: int) -> list[int]:
    """The live processes of session ``sid``."""
    out = []
    for p in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError):
            fields = p.joinpath("stat").read_text().rsplit(")", 1)[1].split()
            if p.name.isdigit() and fields[3] == str(sid) and fields[0] not in ("Z", "X"):
                out.append(int(p.name))
    return out


def _wrapped(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[bytes], int, int, Path]:
    """``sh -c "python train.py MODE; sleep 30"`` in a session of its own, as the local
    provider starts a trial (the marker and the SDK's events file in its environment), once
    its trainer has reported; returns it, the trainer's and its helper's pids, and the events
    file."""
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    events = tmp_path / "trial" / "events-0.jsonl"
    env = {
        **os.environ,
        MARKER_ENV: "local-0",
        "SPOTWISE_EVENTS_FILE": str(events),
        "PYTHONPATH": REPO,
    }
    wrapper = subprocess.Popen(
        ["sh", "-c", f"'{sys.executable}' '{script}' {mode}; sleep 30"],
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert wrapper.stdout is not None
    words = wrapper.stdout.readline().split()
    assert words[:1] == [b"ready"], words
    return wrapper, int(words[1]), int(words[2]), events


def _orchestrator_dies(wrapper: subprocess.Popen[bytes]) -> None:
    """What ``PR_SET_PDEATHSIG`` does when the orchestrator dies: SIGKILL the first process."""
    wrapper.kill()
    wrapper.wait(timeout=5.0)


def _cleanup(wrapper: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # what this test started, if left
        os.killpg(wrapper.pid, signal.SIGKILL)
    if wrapper.poll() is None:
        wrapper.wait(timeout=5.0)


@pytest.mark.parametrize("trainer_runs_on", [True, False])
def test_a_wrapper_whose_trainer_ran_on_is_billed_up_to_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trainer_runs_on: bool
) -> None:
    now = time.time()
    t0 = now - 40.0  # launched 40 wall s before the cancel, last heartbeat 30 s after it
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trial = _dead_local_job(db, t0)
    wrapper, trainer, helper, _ = _wrapped(tmp_path, "run-on" if trainer_runs_on else "exit")
    try:
        _record(job, trial, wrapper)
        deadline = time.monotonic() + 5.0
        while not trainer_runs_on and _live(trainer) and time.monotonic() < deadline:
            time.sleep(0.01)  # the trainer exits (its helper lives on)
        assert _live(trainer) == trainer_runs_on
        _orchestrator_dies(wrapper)
        assert _live(helper)
        monkeypatch.setattr(release, "wall_now", lambda: now)
        out = jobs.cancel(job, db=db)
        assert _session(wrapper.pid) == []  # killed either way: nothing is left running
        with Store.open_existing(db) as s:
            row = s.get_instance("l-0")
            job_usd = s.get_job(job).cost_usd
    finally:
        _cleanup(wrapper)
    assert out["terminated_instances"] == ["local-0"]
    if trainer_runs_on:  # it ran until the cancel: 40 wall s = 12000 market s (was 9000: $2.25)
        assert (row.market_seconds, out["billed_to"]) == (
            pytest.approx(12000.0, abs=1e-6),
            "now (local-0: its first process had died with the orchestrator, but the trainer "
            "it started (the process writing its events) ran on until this cancel killed it)",
        )  # was: "... its helper processes outlived it: killed"
        assert row.cost_usd == pytest.approx(3.0, abs=1e-9)
        assert row.ended_at == pytest.approx(now)
    else:  # its trainer died under the wrapper: up to the heartbeat, its helpers killed
        assert row.market_seconds == pytest.approx(9000.0, abs=1e-6)
        assert row.cost_usd == pytest.approx(2.25, abs=1e-9)
        assert row.ended_at == pytest.approx(t0 + 30.0)
        assert out["billed_to"] == (
            "the orchestrator's last heartbeat, as their trial processes died with the "
            "orchestrator; local-0: its trial process had died with the orchestrator, its "
            "helper processes outlived it: killed"
        )
    assert out["message"].endswith(
        "1 tagged instance(s) terminated, 1 instance record(s) closed and billed up to "
        + out["billed_to"]
    )
    assert job_usd == pytest.approx(row.cost_usd, abs=1e-12)


@pytest.mark.parametrize("named", ["helper, another start", "a process outside the trial"])
def test_a_writer_note_naming_another_process_is_not_believed(tmp_path: Path, named: str) -> None:
    from spotwise.sdk_io import read_writer  # new: here, so the tests above run on old code

    job, trial = "j-note", "t-note"
    wrapper, trainer, helper, events = _wrapped(tmp_path, "exit")
    try:
        _record(job, trial, wrapper)
        assert read_writer(str(events)) == (trainer, read_writer(str(events))[1])  # type: ignore[index]
        deadline = time.monotonic() + 5.0
        while _live(trainer) and time.monotonic() < deadline:
            time.sleep(0.01)
        _orchestrator_dies(wrapper)
        note = Path(f"{events}.writer")
        assert [s.trainer_alive for s in survey_job(job)] == [False]  # the trainer died
        if named == "helper, another start":  # the pid reused by a helper: its start differs
            note.write_text(json.dumps({"pid": helper, "start": "1"}))
        else:  # this test's own process, with its true start: not of the trial's session
            mine = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
            note.write_text(json.dumps({"pid": os.getpid(), "start": mine}))
        assert [(s.leader_alive, s.trainer_alive) for s in survey_job(job)] == [(False, False)]
        stat = Path(f"/proc/{helper}/stat").read_text().rsplit(")", 1)[1].split()
        note.write_text(json.dumps({"pid": helper, "start": stat[19]}))  # it, as it is
        assert [s.trainer_alive for s in survey_job(job)] == [True]
    finally:
        _cleanup(wrapper)


def test_the_sdk_says_which_process_writes_the_events(tmp_path: Path) -> None:
    from spotwise.sdk_io import read_writer

    events = tmp_path / "events-0.jsonl"
    env = {**os.environ, "SPOTWISE_EVENTS_FILE": str(events), "PYTHONPATH": REPO}
    code = (
        "import os; from spotwise import sdk; sdk.report(1, 0.5); sdk.report(2, 0.25); "
        "print(os.getpid(), open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    pid, start = done.stdout.split()
    assert read_writer(str(events)) == (int(pid), start)
    assert [json.loads(line)["step"] for line in events.read_text().splitlines()] == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events-0.jsonl", "events-0.jsonl.writer"]
