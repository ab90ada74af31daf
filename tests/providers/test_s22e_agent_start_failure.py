"""Any failure before the trial runs is the trial's end, reported, and the machine powers off
(review-at AT4): a spec ``env`` name with '=' (or a NUL in a name or value) made Popen raise
ValueError, which the agent did not catch: no status was uploaded, no power-off, and the
instance billed until the job's budget, deadline or a cancel. Nothing is powered off for
real: ``subprocess.run`` is replaced by a recorder."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from spotwise.providers import trial_agent
from spotwise.providers.file_blobs import FileBlobs
from spotwise.providers.trial_agent import TrialAgent, TrialConfig


@pytest.fixture
def shutdowns(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []
    monkeypatch.setattr(trial_agent.subprocess, "run", lambda argv, **_: calls.append(argv))
    return calls


def _agent(tmp_path: Path, env: dict[str, str], **kw: Any) -> tuple[TrialAgent, FileBlobs]:
    kw.setdefault("poll_s", 0.0)
    kw.setdefault("shutdown_after_s", 0.0)
    argv = ["python", "-c", "pass"]
    cfg = TrialConfig("j", "t", 1, "l", argv, env, state_dir=str(tmp_path / "instance"), **kw)
    blobs = FileBlobs(tmp_path / "art")
    return TrialAgent(cfg, blobs, lambda: []), blobs


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"A=B": "x"}, "ValueError: illegal environment variable name"),
        ({"K": "a\x00b"}, "ValueError: embedded null byte"),
        ({"K\x00": "x"}, "ValueError: embedded null byte"),
    ],
)
def test_an_env_the_os_refuses_is_reported_as_exit_127_and_powers_off(
    tmp_path: Path, shutdowns: list[list[str]], env: dict[str, str], said: str
) -> None:
    agent, _ = _agent(tmp_path, env)
    assert agent.run() == 127
    doc = json.loads((tmp_path / "art" / "agent-1.json").read_bytes())
    assert (doc["state"], doc["exit_code"]) == ("exited", 127)
    assert doc["error"] == f"cannot start {sys.executable!r}: {said}"
    assert shutdowns == [["shutdown", "-h", "now"]]  # after shutdown_after_s (0 here)


def test_a_state_folder_that_cannot_be_made_is_reported_too(
    tmp_path: Path, shutdowns: list[list[str]]
) -> None:
    (tmp_path / "instance").write_text("a file where the state folder goes")
    agent, _ = _agent(tmp_path, {})
    assert agent.run() == 127
    doc = json.loads((tmp_path / "art" / "agent-1.json").read_bytes())
    assert doc["exit_code"] == 127 and "cannot start" in doc["error"]
    assert shutdowns == [["shutdown", "-h", "now"]]


def test_it_is_not_powered_off_when_told_never(tmp_path: Path, shutdowns: list[list[str]]) -> None:
    agent, blobs = _agent(tmp_path, {"A=B": "x"}, shutdown_after_s=-1.0)
    assert agent.run() == 127
    assert blobs.exists("agent-1.json") and shutdowns == []
