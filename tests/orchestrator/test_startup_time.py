"""The measured start-up a projection adds to a launch: launch → first step, without the steps
that first report covered. Those steps are projected at the measured speed already: counting
them in the start-up too made every projection one reporting interval dearer (a trial that
reported every 10 steps of 60 s was projected 600 s dearer per launch), so a budget could keep
waiting trials that fit."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from shared_helpers import planner_view
from test_lost_lives import Book, _running

from spotwise.planner.runstate import TrialRun, startup_s
from spotwise.providers.base import Market, Offer

SPOT = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 1.0, 3.0)


def _book(tmp_path: Path, reports: list[dict[str, Any]]) -> Book:
    book = Book(tmp_path)
    book.spec = SimpleNamespace(metric=SimpleNamespace(direction="maximize"))  # type: ignore[assignment]
    book.backend = SimpleNamespace(provisioner=SimpleNamespace(progress=lambda iid: reports))  # type: ignore[assignment]
    return book


def _view(trials: list[TrialRun]) -> Any:
    return planner_view(5000.0, [SPOT], trials)


def test_the_first_reports_steps_are_not_counted_as_start_up(tmp_path: Path) -> None:
    t = TrialRun("t1", 0, {}, steps_total=100, checkpoint_every=10)
    t.checkpoint_step = 20  # a relaunch: resumes from step 20
    life = _running(t, 0)
    life.launched_at = 1000.0
    book = _book(tmp_path, [{"type": "report", "step": 30, "metric": 0.5}])
    book._read_progress(t, life, 1000.0 + 120.0 + 10 * 60.0)  # 120 s start-up, 10 steps
    assert (t.restart_overhead_s, t.restart_steps) == (720.0, 10)
    assert _view([t]).restart_overhead_s == 720.0  # no step timed yet: the whole interval
    book.backend.provisioner.progress = lambda iid: [{"type": "report", "step": 40}]
    book._read_progress(t, life, 1720.0 + 10 * 60.0)
    assert t.seconds_per_step == 60.0
    assert _view([t]).restart_overhead_s == pytest.approx(120.0)  # it used to say 720


def test_start_up_of_a_trial_without_its_own_speed_uses_the_measured_mean() -> None:
    a = TrialRun("a", 0, {}, 100, 10)
    a.seconds_per_step = 50.0
    a.restart_overhead_s, a.restart_steps = 150.0, 1
    b = TrialRun("b", 1, {}, 100, 10)
    b.restart_overhead_s, b.restart_steps = 400.0, 5  # its second report is still to come
    assert startup_s(a, 50.0) == 100.0
    assert startup_s(b, 50.0) == 150.0
    assert startup_s(b, None) == 400.0
    assert startup_s(b, 1000.0) == 0.0  # never negative
    assert _view([a, b]).restart_overhead_s == pytest.approx(125.0)


def test_a_measured_speed_is_kept_per_instance_type(tmp_path: Path) -> None:
    """The planner compares offers per step at the trial's speed on each type: a life's
    measurement is kept under its instance type, a later life on another type adds its own."""
    t = TrialRun("t1", 0, {}, steps_total=100, checkpoint_every=10)
    life = _running(t, 0)
    life.launched_at = 1000.0
    book = _book(tmp_path, [{"type": "report", "step": 10, "metric": 0.5}])
    book._read_progress(t, life, 1100.0)
    assert t.step_s == {}  # one report times nothing
    book.backend.provisioner.progress = lambda iid: [{"type": "report", "step": 20}]
    book._read_progress(t, life, 1100.0 + 10 * 45.0)
    assert t.step_s == {life.offer.instance_type: 45.0}
    t4 = Offer(
        "aws", "us-east-1", "us-east-1a", "g4dn.xlarge", Market.SPOT, 0.3, 0.5, 4, 16, 1, "T4"
    )
    t.life = life2 = _running(t, 1)
    life2.offer, life2.launched_at = t4, 2000.0
    book.backend.provisioner.progress = lambda iid: [{"type": "report", "step": 21}]
    book._read_progress(t, life2, 2100.0)
    book.backend.provisioner.progress = lambda iid: [{"type": "report", "step": 25}]
    book._read_progress(t, life2, 2100.0 + 4 * 100.0)
    assert t.step_s == {life.offer.instance_type: 45.0, "g4dn.xlarge": 100.0}


def test_an_sdk_warning_of_a_failed_checkpoint_cleanup_becomes_a_job_event(tmp_path: Path) -> None:
    """save_checkpoint no longer raises when LATEST or retention fails after the manifest: it
    warns, and the orchestrator records the SDK's event (not a report: no step, no metric)."""
    t = TrialRun("t1", 0, {}, steps_total=100, checkpoint_every=10)
    life = _running(t, 0)
    said = {"type": "checkpoint_cleanup_failed", "step": 10, "what": "retention", "reason": "x"}
    book = _book(tmp_path, [said])
    book._read_progress(t, life, 1100.0)
    assert book.events[-1][0] == "checkpoint_cleanup_failed"
    assert book.events[-1][1]["what"] == "retention" and t.step == 0
