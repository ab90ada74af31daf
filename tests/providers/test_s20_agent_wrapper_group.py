"""review-ak F2 on a cloud instance: the trial agent took the wrapper shell's exit (it dies at
the notice's SIGTERM) for the trial's, uploaded the events and said "exited" while the trainer
it started was still writing its notice checkpoint, and never signalled the group again. The
trial is its whole process group: the exit is reported once the group is empty (or killed at
the kill deadline), with the shell's code. Real bash, real processes; ``subprocess.run`` (the
power-off) is replaced by a recorder."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_trial_agent import FlakyBlobs, _config

from spotwise.providers import trial_agent
from spotwise.providers.local_records import process_start
from spotwise.providers.trial_agent import TrialAgent

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or not sys.platform.startswith("linux"),
    reason="a bash wrapper and /proc (zombies told from live processes)",
)
SAVE_S = 0.6  # the trainer's save after a SIGTERM, when it obeys
# argv[1]: a pid file written once the handler is set; argv[2]: "obey" (save SAVE_S, write the
# checkpoint event, exit 0) or "ignore" (only SIGKILL ends it)
TRAINER = """
import json, os, signal, sys, time
pidfile, mode = sys.argv[1], sys.argv[2]
def on_term(signum, frame):
    if mode == "ignore":
        return
    time.sleep(SAVE_S)
    with open(os.environ["SPOTWISE_EVENTS_FILE"], "a") as fh:
        fh.write(json.dumps({"type": "checkpoint", "step": 6, "time": time.time()}) + "\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(pidfile + ".tmp", "w").write(str(os.getpid()))
os.replace(pidfile + ".tmp", pidfile)
while True:
    time.sleep(0.02)
""".replace("SAVE_S", repr(SAVE_S))
WRAPPER = '"$0" -c "$1" "$2" "$3"; echo wrapper end'


@pytest.fixture(autouse=True)
def no_power_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setattr(trial_agent.subprocess, "run", lambda *a, **kw: None)
    yield
    kill_if_alive(tmp_path / "trainer.pid")  # a failed test leaves no trainer running


def alive(pid: int) -> bool:
    return process_start(pid) is not None  # a zombie has ended


def kill_if_alive(pidfile: Path) -> None:
    """SIGKILL the trainer named in ``pidfile`` if it still runs (its command line says so)."""
    try:
        pid = int(pidfile.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if alive(pid) and TRAINER.encode() in cmdline:
        os.kill(pid, signal.SIGKILL)


class Run:
    """An agent running the wrapper; the notice comes once the trainer is ready."""

    def __init__(self, tmp_path: Path, mode: str, kill_grace_s: float) -> None:
        self.pidfile = tmp_path / "trainer.pid"
        argv = ["bash", "-c", WRAPPER, sys.executable, TRAINER, str(self.pidfile), mode]
        cfg = _config(tmp_path, argv, poll_s=0.02, kill_grace_s=kill_grace_s)
        self.blobs = FlakyBlobs(tmp_path / "art", {})
        self.noticed_at: float | None = None
        self.trainer = 0
        self.agent = TrialAgent(cfg, self.blobs, self.watch)

    def watch(self) -> list[dict[str, Any]]:
        if self.noticed_at is not None or not self.pidfile.exists():
            return []
        self.trainer = int(self.pidfile.read_text())
        self.noticed_at = time.time()
        return [{"kind": "interruption", "received_at": 1.0, "deadline": 31.0}]

    def exited(self) -> list[dict[str, Any]]:
        return [d for d, ok in self.blobs.statuses() if ok and d["state"] == "exited"]


def test_the_exit_waits_for_the_trainer_s_notice_checkpoint(tmp_path: Path) -> None:
    run = Run(tmp_path, "obey", kill_grace_s=30.0)
    assert run.agent.run() == -signal.SIGTERM  # the shell's code, as the first process's
    assert run.noticed_at is not None and not alive(run.trainer)
    (doc,) = run.exited()
    events = (tmp_path / "art" / "events-0.jsonl").read_text().splitlines()
    # HEAD: the shell's exit was reported at once, before the save; its event never uploaded
    assert [json.loads(e)["type"] for e in events] == ["checkpoint"]
    assert doc["exit_code"] == -signal.SIGTERM
    assert doc["ended_at"] >= json.loads(events[0])["time"] >= run.noticed_at + SAVE_S


def test_a_trainer_that_ignores_the_notice_is_killed_at_the_kill_deadline(tmp_path: Path) -> None:
    run = Run(tmp_path, "ignore", kill_grace_s=0.5)
    assert run.agent.run() == -signal.SIGTERM
    assert run.noticed_at is not None
    assert not alive(run.trainer)  # HEAD: it ran on, never signalled after the shell died
    (doc,) = run.exited()
    assert doc["ended_at"] >= run.noticed_at + 0.5  # not before the kill deadline


def test_the_machine_going_down_stops_the_whole_group(tmp_path: Path) -> None:
    """The agent's own SIGTERM: the trial's group is stopped within the grace, the trainer
    under the wrapper included (HEAD: the shell's exit ended the wait; the trainer ran on)."""
    run = Run(tmp_path, "ignore", kill_grace_s=0.5)

    def watch() -> list[dict[str, Any]]:
        if run.pidfile.exists() and run.noticed_at is None:
            run.trainer = int(run.pidfile.read_text())
            run.noticed_at = time.time()
            run.agent.on_sigterm(signal.SIGTERM, None)  # as the instance's shutdown sends it
        return []

    run.agent.watch = watch
    assert run.agent.run() == 143
    assert run.noticed_at is not None and not alive(run.trainer)
    (doc,) = run.exited()
    assert doc["exit_code"] == -signal.SIGTERM
