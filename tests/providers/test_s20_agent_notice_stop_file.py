"""An interruption notice on a cloud instance reaches the trial as SIGTERM *and* as its stop
file, created by the agent at the notice. A handler the script (or its framework) set over the
SDK's can take SIGTERM away (review-ak F5); the stop file it cannot, and before this the file
came only through the orchestrator's round trip (its poll, the artifacts folder, the agent's
poll: seconds of a 30 s notice, never when the orchestrator is down). Real processes; the
power-off is replaced by a recorder."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_trial_agent import FlakyBlobs, _config

from spotwise.providers import trial_agent
from spotwise.providers.trial_agent import TrialAgent

# SIGTERM ignored (a handler that took it away); the stop file is the only way to stop it:
# exit 0 once it appears, after writing "ready" (its handler set) to argv[1]
TRAINER = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").write("ready")
stop = os.environ["SPOTWISE_STOP_FILE"]
while not os.path.exists(stop):
    time.sleep(0.02)
sys.exit(0)
"""


@pytest.mark.parametrize(("kind", "rebalance", "stops"), [
    ("interruption", "ignore", True),
    ("rebalance", "stop", True),
    ("rebalance", "ignore", False),
])  # fmt: skip
def test_a_notice_creates_the_trials_stop_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, rebalance: str, stops: bool
) -> None:
    monkeypatch.setattr(trial_agent.subprocess, "run", lambda *a, **kw: None)
    ready = tmp_path / "ready"
    cfg = _config(
        tmp_path,
        [sys.executable, "-c", TRAINER, str(ready)],
        poll_s=0.02,
        kill_grace_s=5.0,
        rebalance=rebalance,
    )
    noticed: list[float] = []

    def watch() -> list[dict[str, Any]]:
        if noticed or not ready.exists():
            return []
        noticed.append(time.monotonic())
        return [{"kind": kind, "received_at": 1.0, "deadline": 31.0}]

    agent = TrialAgent(cfg, FlakyBlobs(tmp_path / "art", {}), watch)
    agent.start()
    try:
        deadline = time.monotonic() + 3.0  # well inside the 5 s kill grace
        while time.monotonic() < deadline and agent.step():
            time.sleep(0.02)
        assert noticed, "the trial never got ready"
        assert agent.stop_file.exists() is stops
        if stops:  # it saw the notice by its stop file and ended well, not killed at the grace
            assert agent.status["exit_code"] == 0
            assert agent.status["state"] == "exited"
        else:  # a rebalance the spec does not stop on: the trial runs on
            assert agent.proc is not None and agent.proc.poll() is None
    finally:
        if agent.group is not None:
            agent.group.kill()
