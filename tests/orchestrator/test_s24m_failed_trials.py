"""A job's failed trials are said, with why (review-bf BF1(c), BF4, BF5).

* A trial killed by a signal names it ("killed by SIGKILL (signal 9; on Linux often the
  out-of-memory killer ...)"), not "exited with code -9".
* A trial that failed with an empty log while the run folder's disk is full says the disk is
  full and what to do, instead of pointing at the empty logs.
* A job that succeeded with failed trials says how many failed and the last one's error: in
  `--json` (``failed``, ``last_failure``) and in the text summary (its exit code stays 0).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from rich.console import Console

from spotwise.cli import render
from spotwise.planner.policy import Phase
from spotwise.planner.report import end_state, summary
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trialbook import TrialBook
from spotwise.providers.base import InstanceState, Market, Offer

OFFER = Offer("local", "local", "local-a", "cpu", Market.SPOT, 0.05, 0.2)
SIGKILL_TEXT = (
    "the trial was killed by SIGKILL (signal 9; on Linux often the out-of-memory killer: see "
    "`dmesg`) at step 7 of 20"
)


class _Null:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: None


class Book(TrialBook):
    """A TrialBook with a recording store and search, the local provider's life."""

    def __init__(self, tmp_path: Path) -> None:
        self.run_dir = tmp_path / "runs" / "j-1"
        (self.run_dir / "logs").mkdir(parents=True)
        self.job_id = "j-1"
        self.spec = _Null()  # type: ignore[assignment]
        self.revocations = self.early_stopped = 0
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.store = _Null()
        self.search = _Null()  # type: ignore[assignment]

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.events.append((kind, detail))


def _running(step: int = 7, steps: int = 20) -> TrialRun:
    t = TrialRun("t-1", 0, {}, steps_total=steps, checkpoint_every=1)
    t.life = Life("l1", "vm-1", OFFER, 0.0, 0, 2)
    t.phase, t.state, t.step, t.furthest = Phase.RUNNING, "running", step, step
    return t


class _Usage(NamedTuple):
    total: int
    used: int
    free: int


def _free(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda p: _Usage(1 << 30, (1 << 30) - free, free))


# ---- BF5: a signal is named ---------------------------------------------------------------
def test_a_trial_killed_by_sigkill_names_the_signal_and_the_oom_killer(tmp_path: Path) -> None:
    book = Book(tmp_path)
    (book.run_dir / "logs" / "vm-1.log").write_text("resumed from step 6 (attempt 1)\n")
    t = _running()
    book._on_exit(t, -9, InstanceState.RUNNING, 100.0)
    assert t.last_error == f"{SIGKILL_TEXT}; its last output line: resumed from step 6 (attempt 1)"
    assert book.events[0][1]["exit_code"] == -9  # the event keeps the raw code


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (-15, "the trial was killed by SIGTERM (signal 15) at step 3 of 10"),
        (-11, "the trial was killed by SIGSEGV (signal 11) at step 3 of 10"),
        (-99, "the trial was killed by signal 99 at step 3 of 10"),
        (1, "the trial exited with code 1 at step 3 of 10"),
        (137, "the trial exited with code 137 at step 3 of 10"),
    ],
)
def test_exit_text(code: int, text: str) -> None:
    from spotwise.planner.failure_text import exit_text

    assert exit_text(code, 3, 10) == text
    assert exit_text(-9, 7, 20) == SIGKILL_TEXT


# ---- BF4: a full run folder is said, not its empty logs -----------------------------------
def test_an_empty_log_on_a_full_run_folder_says_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    book = Book(tmp_path)
    (book.run_dir / "logs" / "vm-1.log").write_bytes(b"")  # its output could not be written
    _free(monkeypatch, 4096)
    t = _running(step=0)
    book._on_exit(t, 1, InstanceState.RUNNING, 100.0)
    assert t.last_error == (
        f"the trial exited with code 1 at step 0 of 20; its log is empty: the run folder "
        f"{book.run_dir}'s disk is full (4096 bytes free): free space, then "
        "`spotwise resume j-1`"
    )
    # the job's error (every trial failed) does not send the user to the empty logs
    t.state = "failed"
    state, error = end_state([t], False, None, str(book.run_dir / "logs"))
    assert state == "failed"
    assert error == f"every trial failed (1); the last error: {t.last_error}"


def test_a_missing_log_on_a_full_run_folder_after_steps_advises_a_new_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`spotwise resume` keeps a trial failed that reported steps: it is not the advice."""
    book = Book(tmp_path)
    _free(monkeypatch, 0)
    t = _running(step=5)
    book._on_exit(t, 1, InstanceState.RUNNING, 100.0)
    assert t.last_error is not None
    assert t.last_error.startswith("the trial exited with code 1 at step 5 of 20; its log is ")
    assert "disk is full (0 bytes free): free space, then run the job again" in t.last_error


@pytest.mark.parametrize(("log", "free"), [(b"", 10 << 20), (b"Traceback: boom\n", 0)])
def test_no_disk_word_when_the_log_says_something_or_there_is_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: bytes, free: int
) -> None:
    book = Book(tmp_path)
    (book.run_dir / "logs" / "vm-1.log").write_bytes(log)
    _free(monkeypatch, free)
    t = _running(step=0)
    book._on_exit(t, 1, InstanceState.RUNNING, 100.0)
    assert t.last_error is not None and "disk" not in t.last_error
    t.state = "failed"
    _, error = end_state([t], False, None, "LOGS")
    assert error is not None and error.endswith("; see the trial logs in LOGS")


# ---- BF1(c)/BF5: a succeeded job with failed trials says so -------------------------------
def _trials() -> list[TrialRun]:
    out = []
    for n, (state, err) in enumerate(
        [("failed", "the trial exited with code 1 at step 10 of 10"), ("completed", None),
         ("failed", SIGKILL_TEXT)]
    ):  # fmt: skip
        t = TrialRun(f"t-{n}", n, {"lr": 0.1}, steps_total=20, checkpoint_every=5)
        t.state, t.last_error = state, err
        if state == "completed":
            t.curve = {20: 0.9}
        out.append(t)
    return out


TOTALS = {
    "cost_usd": 1.98,
    "on_demand_cost_usd": 3.0,
    "revocations": 0,
    "migrations": 0,
    "early_stopped": 0,
}


def test_summary_counts_the_failed_trials_and_gives_the_last_error() -> None:
    trials = _trials()
    assert end_state(trials, False, None, "LOGS") == ("succeeded", None)
    out = summary("j-1", "succeeded", "spot-greedy", trials, "maximize", TOTALS, 1.0)
    assert (out["trials"], out["completed"], out["failed"]) == (3, 1, 2)
    assert out["last_failure"] == SIGKILL_TEXT
    clean = summary("j-1", "succeeded", "spot-greedy", trials[1:2], "maximize", TOTALS, 1.0)
    assert (clean["failed"], clean["last_failure"]) == (0, None)


def _printed(monkeypatch: pytest.MonkeyPatch, s: dict[str, Any]) -> str:
    console = Console(width=400, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    render.print_summary(s)
    return console.export_text()


def test_the_text_summary_says_how_many_trials_failed_and_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = summary("j-1", "succeeded", "spot-greedy", _trials(), "maximize", TOTALS, 1.0)
    text = _printed(monkeypatch, s)
    assert f"2 of 3 trials failed; the last error: {SIGKILL_TEXT}\n" in text
    assert "trials 3 · completed 1" in text


def test_no_failed_line_when_none_failed_or_the_error_says_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trials = _trials()
    s = summary("j-1", "succeeded", "spot-greedy", trials[1:2], "maximize", TOTALS, 1.0)
    assert "failed" not in _printed(monkeypatch, s).replace("succeeded", "")
    for t in trials:
        t.state = "failed"
    _, error = end_state(trials, False, None, "LOGS")
    s = summary("j-1", "failed", "spot-greedy", trials, "maximize", TOTALS, 1.0)
    text = _printed(monkeypatch, {**s, "error": error})
    assert text.count(SIGKILL_TEXT) == 1  # said once, by the job's error
    assert "every trial failed (3)" in text
