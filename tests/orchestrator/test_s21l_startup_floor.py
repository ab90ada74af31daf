"""Lives that never reached their first report bound the start-up from below (review-aq AQ7):
they were dropped, and the view kept the 60 s default through lives revoked after 600-3100 s
without a report (the deadline then admitted launches that could not report before it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shared_helpers import planner_view
from test_lost_lives import Book, _running

from spotwise.planner.policy import Phase
from spotwise.planner.runstate import TrialRun
from spotwise.providers.base import InstanceState, Market, Offer

SPOT = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 1.0, 3.0)


def _view(trials: list[TrialRun], now: float = 5000.0) -> Any:
    return planner_view(now, [SPOT], trials)


def test_a_life_revoked_before_its_first_report_raises_the_start_up(tmp_path: Path) -> None:
    t = TrialRun("t1", 0, {}, steps_total=10, checkpoint_every=1)
    life = _running(t, 0)  # launched at 0
    Book(tmp_path)._on_exit(t, None, InstanceState.REVOKED, 1800.0)
    assert t.life is None and t.phase is Phase.WAITING
    assert _view([t]).restart_overhead_s == 1800.0  # no speed known: the whole life
    t.seconds_per_step = 100.0  # once a step is timed: less the step its report covers
    assert _view([t]).restart_overhead_s == pytest.approx(1700.0)
    assert life.first_report_at is None


def test_the_measured_start_up_stands_when_it_is_longer(tmp_path: Path) -> None:
    a = TrialRun("a", 0, {}, 10, 1)
    a.restart_overhead_s, a.restart_steps, a.seconds_per_step = 900.0, 1, 100.0  # 800 s
    b = TrialRun("b", 1, {}, 10, 1)
    _running(b, 0)
    Book(tmp_path)._on_exit(b, None, InstanceState.REVOKED, 300.0)
    assert _view([a, b]).restart_overhead_s == pytest.approx(800.0)


def test_a_life_that_failed_by_itself_tells_nothing(tmp_path: Path) -> None:
    t = TrialRun("t1", 0, {}, steps_total=10, checkpoint_every=1)
    _running(t, 0)
    Book(tmp_path)._on_exit(t, 1, InstanceState.TERMINATED, 1800.0)  # its own crash
    assert t.unreported_life_s == 0.0
    assert _view([t]).restart_overhead_s == 60.0


def test_a_life_still_waiting_for_its_first_report_counts_too() -> None:
    t = TrialRun("t1", 0, {}, steps_total=10, checkpoint_every=1)
    life = _running(t, 0)
    life.launched_at = 1000.0
    assert _view([t], now=1030.0).restart_overhead_s == 60.0  # the default still stands
    assert _view([t], now=3000.0).restart_overhead_s == 2000.0
