"""review-al F1: a trial's life is its whole session, not only its process group. GNU
``timeout`` (without ``--foreground``) calls ``setpgid(0, 0)``: under ``[bash, -c, "timeout 60
python train.py; echo after"]`` the trainer is in a group of its own inside the trial's
session. A ``killpg`` on the trial's group never reached it (it did not even get the notice's
SIGTERM: ``timeout`` passes on only what it receives), the group read empty as soon as the
shell died, so the life ended while the trainer ran on: the trial was relaunched beside it
and nothing signalled it again. The local provider, the cloud agent, the agent without an
artifacts folder (``run_trial``, F1c) and ``spotwise cancel``'s reconcile after a crash must
all wait for and reach the whole session. Real bash, real ``timeout``, real processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from orphan_parent import parent_script
from test_local import LEAD, REVOKE_AT, SPEEDUP, T0, TICKS, ZONE_A, ZONE_B, FakeWall, state_of
from test_local import wait_for as _wait_for
from test_trial_agent import FlakyBlobs, _config

from spotwise.providers import gcp_agent, trial_agent
from spotwise.providers.base import InstanceState, LaunchRequest, Market, our_tags
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.local_records import process_start, read_records, reconcile_job
from spotwise.providers.replay import MarketClock, ReplayMarket
from spotwise.providers.trial_agent import TrialAgent
from spotwise.traces import TraceSet

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None
    or shutil.which("timeout") is None
    or not sys.platform.startswith("linux"),
    reason="bash, GNU timeout and /proc (a process's group and session)",
)
SAVE_S = 0.3  # the obeying trainer's save after its first SIGTERM
FLOOR = 1.5  # the local notice's floor, wall seconds: the revocation (kill) comes this long after
GRACE = 0.5  # kill graces

# argv[1]: its pid file (written once the handler is set); argv[2]: "obey" (save SAVE_S from
# the first SIGTERM, write a checkpoint event and "<pidfile>.saved", exit 0) or "ignore" (only
# SIGKILL ends it). Every SIGTERM adds a line to "<pidfile>.term".
TRAINER = """
import json, os, signal, sys, time
pidfile, mode = sys.argv[1], sys.argv[2]
got = []
def on_term(signum, frame):
    got.append(time.time())
    with open(pidfile + ".term", "a") as fh:
        fh.write("TERM\\n")
signal.signal(signal.SIGTERM, on_term)
open(pidfile + ".tmp", "w").write(str(os.getpid()))
os.replace(pidfile + ".tmp", pidfile)
while not (got and mode == "obey"):
    time.sleep(0.01)
time.sleep(SAVE_S)
events = os.environ.get("SPOTWISE_EVENTS_FILE")
if events:
    with open(events, "a") as fh:
        fh.write(json.dumps({"type": "checkpoint", "step": 6, "time": time.time()}) + "\\n")
open(pidfile + ".saved", "w").write(repr(time.time()))
sys.exit(0)
""".replace("SAVE_S", repr(SAVE_S))
# the wrapper: `timeout` moves the trainer into a process group of its own, then the shell goes on
WRAPPER = 'timeout 60 "$0" -c "$1" "$2" "$3"; echo after'


def wait_for(predicate: Callable[[], Any], what: str) -> Any:
    return _wait_for(predicate, what, timeout=15.0)


def alive(pid: int) -> bool:
    return process_start(pid) is not None  # a zombie has ended


def stat(pid: int) -> list[str]:
    """Fields 3.. of /proc/<pid>/stat: state, ppid, pgrp, session, ..."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2 :].split()


class Trainer:
    """The trainer started under WRAPPER, found by its pid file: its pid and its parent's
    (``timeout``), both checked to be in the wrapper's session but not in its group."""

    def __init__(self, tmp_path: Path) -> None:
        self.pidfile = tmp_path / f"trainer-{uuid.uuid4().hex[:8]}"
        self.pid = 0
        self.timeout = 0

    def argv(self, mode: str) -> list[str]:
        return ["bash", "-c", WRAPPER, sys.executable, TRAINER, str(self.pidfile), mode]

    def ready(self) -> bool:
        if not self.pid and self.pidfile.exists():
            self.pid = int(self.pidfile.read_text())
            self.timeout = int(stat(self.pid)[1])
        return bool(self.pid)

    def check_apart(self, leader: int) -> None:
        """The trainer and ``timeout`` are in the leader's session, in a group of their own."""
        assert Path(f"/proc/{self.timeout}/comm").read_text().strip() == "timeout"
        for pid in (self.pid, self.timeout):
            _, _, pgrp, session = stat(pid)[:4]
            assert (int(session), int(pgrp)) == (leader, self.timeout), pid

    def terms(self) -> int:
        term = Path(f"{self.pidfile}.term")
        return len(term.read_text().splitlines()) if term.exists() else 0

    def saved_at(self) -> float | None:
        saved = Path(f"{self.pidfile}.saved")
        return float(saved.read_text()) if saved.exists() and saved.read_text() else None

    def left(self) -> list[int]:
        return [p for p in (self.pid, self.timeout) if p and alive(p)]

    def clean_up(self) -> None:
        """SIGKILL what a failed test left (checked by command line: never a stranger)."""
        for pid in self.left():
            with_trainer = TRAINER.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
            if with_trainer:
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def trainers(tmp_path: Path) -> Iterator[Callable[[], Trainer]]:
    made: list[Trainer] = []

    def make() -> Trainer:
        made.append(Trainer(tmp_path))
        return made[-1]

    yield make
    for t in made:
        t.clean_up()


# ---- the local provider ------------------------------------------------------------------------
@pytest.fixture
def market() -> ReplayMarket:
    available = np.ones((2, TICKS), dtype=bool)
    available[0, 5:] = False  # zone A's spot is revoked at REVOKE_AT
    price = np.vstack([np.full(TICKS, 1.0), np.full(TICKS, 2.0)])
    traces = TraceSet(
        [ZONE_A, ZONE_B], T0 + 10.0 * np.arange(TICKS), available, price,
        instance_type="p3.2xlarge", on_demand_price=5.0, gap_seconds=10.0,
    )  # fmt: skip
    return ReplayMarket(traces)


@pytest.fixture
def wall() -> FakeWall:
    return FakeWall()


@pytest.fixture
def prov(market: ReplayMarket, wall: FakeWall, tmp_path: Path) -> Iterator[LocalProvisioner]:
    p = LocalProvisioner(
        market, MarketClock(T0, SPEEDUP, wall=wall), notice_lead_s=LEAD,
        notice_floor_wall_s=FLOOR, kill_grace_s=GRACE, records_dir=tmp_path / "records",
    )  # fmt: skip
    yield p
    p.shutdown()


def launch_spot(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path, trainer: Trainer, mode: str
) -> tuple[str, int]:
    """The wrapper on zone A's spot (revoked at REVOKE_AT); (instance id, leader pid)."""
    (o,) = market.offers(at=T0, zones=[ZONE_A], market=Market.SPOT)
    token = uuid.uuid4().hex[:12]
    env = {"SPOTWISE_EVENTS_FILE": str(tmp_path / f"events-{token}.jsonl")}
    tags = our_tags("job-timeout", "trial-1", token)
    req = LaunchRequest(o, tuple(trainer.argv(mode)), env, tags, token, "")
    inst = prov.launch(req)
    wait_for(trainer.ready, "the trainer")
    popen = prov._procs[inst.instance_id].popen
    assert popen is not None
    trainer.check_apart(popen.pid)
    return inst.instance_id, popen.pid


def test_local_a_notice_reaches_the_trainer_under_timeout_and_the_life_waits_for_its_save(
    prov: LocalProvisioner,
    market: ReplayMarket,
    wall: FakeWall,
    tmp_path: Path,
    trainers: Callable[[], Trainer],
) -> None:
    trainer = trainers()
    iid, leader = launch_spot(prov, market, tmp_path, trainer, "obey")
    wall.at_market(REVOKE_AT - LEAD)
    noticed = time.monotonic()
    assert [n.instance_id for n in prov.notices()] == [iid]
    # the notice's SIGTERM reaches the trainer in timeout's group (HEAD: never; only the
    # shell's group was signalled): ours, and timeout's relay of the one it got
    wait_for(trainer.terms, "the trainer's SIGTERM")
    wait_for(lambda: not alive(leader), "the shell to die of the SIGTERM")
    running: list[bool] = []

    def end() -> int | None:
        """The life's exit code once it ended, which must not come before the trainer's save
        (HEAD: exit -15 as soon as the shell died, the trainer still saving)."""
        state = state_of(prov, iid)
        if state.exit_code is None:
            running.append(state.state is InstanceState.RUNNING)
            return None
        assert trainer.saved_at() is not None, "the life ended before the trainer's save"
        return int(state.exit_code)

    assert wait_for(end, "the life to end") == -signal.SIGTERM  # the shell's code
    assert running and all(running)  # the shell was gone, the life went on while it saved
    assert time.monotonic() - noticed >= SAVE_S
    assert state_of(prov, iid).state is InstanceState.RUNNING  # before the revocation
    assert trainer.left() == []  # nothing of the session is left
    assert read_records(tmp_path / "records", "job-timeout") == []


def test_local_at_the_revocation_nothing_of_the_session_is_left(
    prov: LocalProvisioner,
    market: ReplayMarket,
    wall: FakeWall,
    tmp_path: Path,
    trainers: Callable[[], Trainer],
) -> None:
    prov.notice_floor_wall_s = GRACE  # a short notice: the kill deadline
    trainer = trainers()
    iid, _ = launch_spot(prov, market, tmp_path, trainer, "ignore")
    wall.at_market(REVOKE_AT - LEAD)
    noticed = time.monotonic()
    assert [n.instance_id for n in prov.notices()] == [iid]
    wait_for(trainer.terms, "the trainer's SIGTERM")
    wait_for(lambda: state_of(prov, iid).state is InstanceState.REVOKED, "the revocation")
    assert time.monotonic() - noticed >= GRACE
    assert state_of(prov, iid).exit_code == -signal.SIGTERM
    assert trainer.left() == []  # HEAD: timeout and the trainer ran on past the revocation
    assert read_records(tmp_path / "records", "job-timeout") == []


# ---- the cloud agent -----------------------------------------------------------------------------
@pytest.fixture
def no_power_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trial_agent.subprocess, "run", lambda *a, **kw: None)


class AgentRun:
    """An agent running the wrapper; the notice comes once the trainer is ready."""

    def __init__(self, tmp_path: Path, trainer: Trainer, mode: str, kill_grace_s: float) -> None:
        self.trainer = trainer
        cfg = _config(tmp_path, trainer.argv(mode), poll_s=0.02, kill_grace_s=kill_grace_s)
        self.blobs = FlakyBlobs(tmp_path / "art", {})
        self.noticed_at: float | None = None
        self.agent = TrialAgent(cfg, self.blobs, self.watch)

    def watch(self) -> list[dict[str, Any]]:
        if self.noticed_at is not None or not self.trainer.ready():
            return []
        assert self.agent.proc is not None
        self.trainer.check_apart(self.agent.proc.pid)
        self.noticed_at = time.time()
        return [{"kind": "interruption", "received_at": 1.0, "deadline": 31.0}]

    def exited(self) -> dict[str, Any]:
        (doc,) = [d for d, ok in self.blobs.statuses() if ok and d["state"] == "exited"]
        return doc


@pytest.mark.usefixtures("no_power_off")
def test_agent_the_exit_waits_for_the_save_of_a_trainer_under_timeout(
    tmp_path: Path, trainers: Callable[[], Trainer]
) -> None:
    run = AgentRun(tmp_path, trainers(), "obey", kill_grace_s=30.0)
    assert run.agent.run() == -signal.SIGTERM  # the shell's code
    assert run.noticed_at is not None and run.trainer.terms() >= 1  # HEAD: no SIGTERM reached it
    events = (tmp_path / "art" / "events-0.jsonl").read_text().splitlines()
    # HEAD: the shell's exit was reported at once, before the save; its event never uploaded
    assert [json.loads(e)["type"] for e in events] == ["checkpoint"]
    doc = run.exited()
    assert doc["exit_code"] == -signal.SIGTERM
    assert doc["ended_at"] >= json.loads(events[0])["time"] >= run.noticed_at + SAVE_S
    assert run.trainer.left() == []


@pytest.mark.usefixtures("no_power_off")
def test_agent_nothing_of_the_session_is_left_after_the_kill_deadline(
    tmp_path: Path, trainers: Callable[[], Trainer]
) -> None:
    run = AgentRun(tmp_path, trainers(), "ignore", kill_grace_s=GRACE)
    assert run.agent.run() == -signal.SIGTERM
    assert run.noticed_at is not None and run.trainer.terms() >= 1
    assert run.trainer.left() == []  # HEAD: timeout and the trainer ran on
    assert run.exited()["ended_at"] >= run.noticed_at + GRACE  # not before the kill deadline


# ---- the agent without an artifacts folder (review-al F1c) -------------------------------------
def test_run_trial_waits_for_the_session_and_reaches_the_trainer_under_timeout(
    tmp_path: Path, trainers: Callable[[], Trainer]
) -> None:
    trainer = trainers()
    noticed: list[float] = []

    def watch() -> tuple[float, float] | None:
        if noticed or not trainer.ready():
            return None
        noticed.append(time.time())
        return noticed[0], noticed[0] + 30.0

    code = gcp_agent.run_trial(
        trainer.argv("obey"), {}, watch=watch, on_notice=lambda a, b: None, poll_s=0.02
    )
    returned = time.time()
    saved = trainer.saved_at()
    assert code == -signal.SIGTERM and noticed and trainer.terms() >= 1
    # HEAD: it returned at the shell's death, the trainer never signalled and still running
    assert saved is not None and returned >= saved >= noticed[0] + SAVE_S
    assert trainer.left() == []


# ---- spotwise cancel after the orchestrator died -------------------------------------------------
# an orchestrator stand-in (as in test_local_orphans): launches argv (JSON) on a one-zone market,
# prints its instance id, waits to be killed
PARENT = parent_script("job-timeout")


def test_cancel_after_a_crash_kills_the_trainer_under_timeout(
    tmp_path: Path, trainers: Callable[[], Trainer]
) -> None:
    trainer = trainers()
    records = tmp_path / "records"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    argv = [sys.executable, "-c", PARENT, str(records), json.dumps(trainer.argv("ignore"))]
    parent = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert parent.stdout is not None
        iid = json.loads(parent.stdout.readline())["instance_id"]
        wait_for(trainer.ready, "the trainer")
        ((_, rec),) = read_records(records, "job-timeout")
        trainer.check_apart(rec.pid)
    finally:
        parent.kill()  # the orchestrator dies (SIGKILL): the shell with it (PR_SET_PDEATHSIG)
        parent.wait()
    wait_for(lambda: not alive(rec.pid), "the shell to die with its orchestrator")
    assert len(trainer.left()) == 2  # timeout and the trainer: PR_SET_PDEATHSIG is not inherited

    assert reconcile_job("job-timeout", records, grace_s=GRACE) == [iid]  # HEAD: []
    wait_for(lambda: trainer.left() == [], "the session to be killed")  # HEAD: they ran on
    assert read_records(records, "job-timeout") == []
