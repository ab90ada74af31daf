"""The planner uses the measured checkpoint time, not an assumed 30 s (review-y F1).

The SDK times each save (``seconds`` of its ``checkpoint`` event, wall seconds); the
orchestrator keeps them in market seconds (the replay's clock runs ``speedup`` times the wall
clock) and the view's ``checkpoint_s`` is the slowest of the job's newest saves. A save that
no longer fits in the notice changes the spotwise policy's checkpoint interval."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spotwise.planner.policy import (
    Launch,
    Phase,
    PlannerView,
    SetCheckpointEvery,
    Tick,
    get_policy,
)
from spotwise.planner.runstate import Life, TrialRun, build_view
from spotwise.planner.trialbook import TrialBook
from spotwise.providers.base import Market, Offer
from spotwise.providers.billing import rule_for

SPOT = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 1.0, 3.0)
DEFAULT_S = 30.0  # what the planner assumes before a save was timed


class _Null:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: None


class Book(TrialBook):
    """A TrialBook reading ``records`` from a fake provisioner, on a market ``speedup`` times
    faster than the wall clock."""

    def __init__(self, tmp_path: Path, speedup: float) -> None:
        self.run_dir = tmp_path
        self.revocations = self.early_stopped = 0
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.store = _Null()
        self.search = _Null()  # type: ignore[assignment]
        self.spec = SimpleNamespace(metric=SimpleNamespace(direction="maximize"))  # type: ignore[assignment]
        self.records: list[dict[str, Any]] = []
        provisioner = SimpleNamespace(progress=lambda iid: self.records)
        self.backend = SimpleNamespace(speedup=speedup, provisioner=provisioner)  # type: ignore[assignment]

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.events.append((kind, detail))

    def read(self, t: TrialRun, now: float, *records: dict[str, Any]) -> None:
        self.records = list(records)
        assert t.life is not None
        self._read_progress(t, t.life, now)


def _running(t: TrialRun) -> Life:
    t.life = Life("l0", "i0", SPOT, 1000.0, t.checkpoint_step, 0)
    t.phase, t.state = Phase.RUNNING, "running"
    return t.life


def _saved(step: int, seconds: object = None) -> dict[str, Any]:
    rec: dict[str, Any] = {"type": "checkpoint", "step": step, "uri": f"/ckpt/{step}"}
    if seconds is not None:
        rec["seconds"] = seconds
    return rec


def _view(trials: list[TrialRun], every_max: int | None = None) -> PlannerView:
    return build_view(
        5000.0,
        [SPOT],
        {SPOT.key: 0.5},
        trials,
        direction="maximize",
        parallel=len(trials),
        trials_total=len(trials),
        spent_usd=0.0,
        max_cost_usd=None,
        started_at=0.0,
        deadline=None,
        rules={"aws": rule_for("aws")},
        checkpoint_every_max=every_max,
    )


def test_a_timed_save_becomes_the_views_checkpoint_s_in_market_seconds(tmp_path: Path) -> None:
    book = Book(tmp_path, speedup=600.0)  # the replay's default clock
    t = TrialRun("t1", 0, {}, steps_total=100, checkpoint_every=10)
    _running(t)
    assert _view([t]).checkpoint_s == DEFAULT_S  # nothing timed yet
    book.read(t, 2000.0, _saved(10, 0.25))  # a quarter of a wall second: 150 market seconds
    assert t.checkpoint_step == 10
    assert _view([t]).checkpoint_s == pytest.approx(150.0)
    assert t.checkpoint_saves == [(2000.0, 150.0)]
    cloud = Book(tmp_path, speedup=1.0)  # a cloud: market time is wall time
    c = TrialRun("c1", 0, {}, steps_total=100, checkpoint_every=10)
    _running(c)
    cloud.read(c, 2000.0, _saved(10, 240.5))
    assert _view([c]).checkpoint_s == 240.5


def test_an_event_without_seconds_or_with_garbage_is_ignored(tmp_path: Path) -> None:
    book = Book(tmp_path, speedup=600.0)
    t = TrialRun("t1", 0, {}, steps_total=100, checkpoint_every=10)
    _running(t)
    garbage: list[object] = [-1.0, math.nan, math.inf, -math.inf, "3", True, [1], {"s": 1}]
    garbage.append(1e308)  # finite in wall seconds, not in market seconds
    book.read(t, 2000.0, _saved(5), *(_saved(6 + i, g) for i, g in enumerate(garbage)))
    assert t.checkpoint_step == 5 + len(garbage)  # the saves themselves still count
    assert _view([t]).checkpoint_s == DEFAULT_S
    book.read(t, 2100.0, _saved(20, 0))  # an instant save is a measurement too
    assert _view([t]).checkpoint_s == 0.0
    book.read(t, 2200.0, _saved(30, math.nan))  # and garbage after it changes nothing
    assert _view([t]).checkpoint_s == 0.0 and t.checkpoint_step == 30


def test_the_slowest_of_the_newest_saves_is_planned_with(tmp_path: Path) -> None:
    """Not the mean: a slow save that misses the notice loses work; but a slow upload long
    ago is forgotten once newer saves of the job were timed."""
    from spotwise.planner.runstate import CHECKPOINT_SAVES_KEPT, checkpoint_seconds

    book = Book(tmp_path, speedup=1.0)
    a = TrialRun("a", 0, {}, steps_total=100, checkpoint_every=10)
    b = TrialRun("b", 1, {}, steps_total=100, checkpoint_every=10)
    _running(a)
    _running(b)
    book.read(a, 100.0, _saved(1, 20.0))
    book.read(a, 110.0, _saved(2, 200.0))
    book.read(b, 200.0, _saved(1, 10.0))
    assert _view([a, b]).checkpoint_s == 200.0  # one slow save among fast ones: the slow one
    assert checkpoint_seconds([b]) == 10.0 and checkpoint_seconds([]) is None
    for n in range(CHECKPOINT_SAVES_KEPT - 2):  # newer saves of either trial: 20 s drops out
        book.read(a if n % 2 else b, 300.0 + n, _saved(3 + n, 15.0))
    assert _view([a, b]).checkpoint_s == 200.0  # still among the job's newest
    book.read(b, 400.0, _saved(9, 12.0))
    assert _view([a, b]).checkpoint_s == 15.0  # 200 s is no longer among them
    assert len(a.checkpoint_saves) <= CHECKPOINT_SAVES_KEPT


def _place(book: Book, slow_wall_s: float | None) -> list[object]:
    """The spotwise policy's decision for a queued trial while another one runs and (when
    ``slow_wall_s``) has timed a save of that many wall seconds."""
    runner = TrialRun("run", 0, {}, steps_total=100, checkpoint_every=50)
    _running(runner)
    # two reports a step apart: 60 market seconds per step (a step fits in the 120 s notice)
    book.read(runner, 1200.0, {"type": "report", "step": 1, "metric": 0.1})
    book.read(runner, 1260.0, {"type": "report", "step": 2, "metric": 0.2})
    assert runner.seconds_per_step == 60.0
    if slow_wall_s is not None:
        book.read(runner, 1270.0, _saved(2, slow_wall_s))
    queued = TrialRun("new", 1, {}, steps_total=100, checkpoint_every=50)
    view = _view([runner, queued], every_max=50)
    return [a for a in get_policy("spotwise").decide(view, Tick(5000.0)) if a.trial_id == "new"]


def test_a_save_slower_than_the_notice_makes_spotwise_checkpoint_more_often(
    tmp_path: Path,
) -> None:
    # assumed 30 s: a 60 s step plus the save fit in AWS's 120 s notice, so a revocation loses
    # nothing and the job's interval of 50 steps stands
    fast = _place(Book(tmp_path, speedup=600.0), None)
    assert [type(a) for a in fast] == [Launch]
    # a save of 0.05 wall seconds on a cloud fits as well
    assert [type(a) for a in _place(Book(tmp_path, speedup=1.0), 0.05)] == [Launch]
    # the same 0.25 s save on the replay's clock is 150 market seconds: it no longer fits in
    # the notice, so a revocation loses the work since the last checkpoint and Young/Daly
    # sets sqrt(2 * 150 / (ln 2 / 3600)) = 1249 s = 21 steps of 60 s
    slow = _place(Book(tmp_path, speedup=600.0), 0.25)
    assert slow[0] == SetCheckpointEvery("new", 21) and isinstance(slow[1], Launch)
