"""The cloud-neutral trial agent's end of a trial: the exit is written only after the last
events, an end that cannot be uploaded is retried for FINAL_TRIES polls and then given up,
and the machine is powered off even when the trial could not start (never for real here:
``subprocess.run`` is replaced by a recorder)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from spotwise.errors import ProviderError
from spotwise.providers import trial_agent
from spotwise.providers.file_blobs import FileBlobs
from spotwise.providers.trial_agent import FINAL_TRIES, TrialAgent, TrialConfig

EVENT = '{"type": "report", "step": 1, "metric": 0.5}'
WRITES_AN_EVENT = (
    "import os, sys; "
    f"open(os.environ['SPOTWISE_EVENTS_FILE'], 'a').write({EVENT!r} + '\\n'); "
    "sys.exit(int(sys.argv[1]))"
)


class FlakyBlobs(FileBlobs):
    """A folder whose puts of some names fail a number of times (-1: always); every attempt
    is recorded as ``(name, data, ok)``."""

    def __init__(self, root: Path, fail: dict[str, int]) -> None:
        super().__init__(root)
        self.fail = dict(fail)
        self.puts: list[tuple[str, bytes, bool]] = []

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        left = self.fail.get(name, 0)
        if left:
            self.fail[name] = left - 1 if left > 0 else left
            self.puts.append((name, data, False))
            raise ProviderError(f"put {name}: 403 Forbidden")
        super().put(name, data, content_type)
        self.puts.append((name, data, True))

    def statuses(self) -> list[tuple[dict[str, Any], bool]]:
        return [(json.loads(d), ok) for n, d, ok in self.puts if n.startswith("agent-")]


@pytest.fixture
def shutdowns(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """What the agent asked ``subprocess.run`` to do (nothing is run)."""
    calls: list[list[str]] = []

    def record(argv: list[str], **kw: Any) -> None:
        calls.append(list(argv))

    monkeypatch.setattr(trial_agent.subprocess, "run", record)
    return calls


def _config(tmp_path: Path, argv: list[str], **kw: Any) -> TrialConfig:
    kw.setdefault("poll_s", 0.0)
    kw.setdefault("shutdown_after_s", 0.0)
    kw.setdefault("sync_s", 1e9)  # no events upload while the trial runs: only the final one
    return TrialConfig("j", "t", 0, "l", argv, {}, state_dir=str(tmp_path / "instance"), **kw)


def test_the_exit_is_written_only_after_the_last_events(
    tmp_path: Path, shutdowns: list[list[str]]
) -> None:
    """The final events upload fails once and a notice comes on the retry poll: the status
    the notice uploads must not say the trial exited (the controller would take the trial's
    end without its last events, and might relaunch a trial that finished)."""
    blobs = FlakyBlobs(tmp_path / "art", {"events-0.jsonl": 1})
    notice = {"kind": "interruption", "received_at": 1.0, "deadline": 31.0}
    given: list[dict[str, Any]] = []

    def watch() -> list[dict[str, Any]]:
        if any(not ok for *_, ok in blobs.puts) and not given:
            given.append(notice)
            return [notice]
        return []

    cfg = _config(tmp_path, [sys.executable, "-c", WRITES_AN_EVENT, "0"])
    agent = TrialAgent(cfg, blobs, watch)
    assert agent.run() == 0
    assert given == [notice]  # the notice did come between the failed and the good upload
    events_ok = [i for i, (n, _, ok) in enumerate(blobs.puts) if n.startswith("events-") and ok]
    for i, (name, data, _) in enumerate(blobs.puts):
        if name.startswith("agent-") and json.loads(data)["state"] == "exited":
            assert events_ok and events_ok[0] < i, blobs.puts  # never before the last events
    doc, ok = blobs.statuses()[-1]
    assert ok and doc["state"] == "exited" and doc["exit_code"] == 0
    assert doc["notices"] == [notice] and doc["ended_at"] >= doc["started_at"]
    noticed = [d for d, _ in blobs.statuses() if d["notices"]]
    assert noticed[0]["state"] == "running" and noticed[0]["exit_code"] is None
    assert (tmp_path / "art" / "events-0.jsonl").read_text() == EVENT + "\n"
    assert shutdowns == [["shutdown", "-h", "now"]]


def test_an_end_that_cannot_be_uploaded_is_given_up_after_final_tries_and_powers_off(
    tmp_path: Path, shutdowns: list[list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    blobs = FlakyBlobs(tmp_path / "art", {"events-0.jsonl": -1, "agent-0.json": -1})
    cfg = _config(tmp_path, [sys.executable, "-c", WRITES_AN_EVENT, "3"])
    agent = TrialAgent(cfg, blobs, lambda: [])
    with caplog.at_level(logging.WARNING, logger="spotwise.agent"):
        assert agent.run() == 3
    final = [p for p in blobs.puts if p[0] == "events-0.jsonl" and p[1] == (EVENT + "\n").encode()]
    assert len(final) == FINAL_TRIES  # one forced upload a poll, then it gave up
    assert not any(ok for *_, ok in blobs.puts)
    assert all(doc["state"] != "exited" for doc, _ in blobs.statuses())  # no exit without events
    assert "giving up" in caplog.text
    assert shutdowns == [["shutdown", "-h", "now"]]  # a lost channel leaves no machine running


@pytest.mark.parametrize("failures", [0, 2, -1])
def test_a_trial_that_cannot_start_is_reported_and_the_machine_powers_off(
    tmp_path: Path, shutdowns: list[list[str]], failures: int
) -> None:
    """The 127 path retries the status like any end (FINAL_TRIES polls at most), then powers
    the machine off: an idle VM must not bill forever."""
    blobs = FlakyBlobs(tmp_path / "art", {"agent-0.json": failures})
    agent = TrialAgent(_config(tmp_path, [str(tmp_path / "no-such-program")]), blobs, lambda: [])
    assert agent.run() == 127
    tries = FINAL_TRIES if failures < 0 else failures + 1
    assert len(blobs.puts) == tries
    doc, ok = blobs.statuses()[-1]
    assert ok is (failures >= 0)
    assert (doc["state"], doc["exit_code"]) == ("exited", 127) and "cannot start" in doc["error"]
    assert shutdowns == [["shutdown", "-h", "now"]]


def test_a_trial_that_cannot_start_does_not_power_off_when_told_never(
    tmp_path: Path, shutdowns: list[list[str]]
) -> None:
    blobs = FlakyBlobs(tmp_path / "art", {})
    cfg = _config(tmp_path, [str(tmp_path / "no-such-program")], shutdown_after_s=-1.0)
    assert TrialAgent(cfg, blobs, lambda: []).run() == 127
    assert len(blobs.puts) == 1 and shutdowns == []
