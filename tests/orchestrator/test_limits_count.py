"""A limit that reaches a trial already stopping for another reason still counts.

The budget guard repeats its stop every tick; a trial the curve rule (or the deadline) had
already stopped kept that first reason and the budget's stop left no trace but the release of
its instance. So the summary's ``limits`` left it out, and the guard that creates no new trial
once the budget has stopped one (``any(t.stop_reason == "budget")``) did not fire. The first
reason stays the trial's; the limit is recorded too.

Since the budget also sheds a running trial when the running projections overrun, a launched
trial it stopped no longer ends the creation of trials: only the cap reached, or a trial that
the budget stopped before it ever launched (a new one would not fit either), does.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_running_totals import SPOT, ScriptedMarket, run_scripted, usd

from spotwise.planner import policy as policy_registry
from spotwise.planner.actions import Actions
from spotwise.planner.policies.greedy import SpotGreedy
from spotwise.planner.policy import (
    Action,
    Event,
    Phase,
    PlannerView,
    Progress,
    StopEarly,
)
from spotwise.planner.report import limits, nothing_to_show
from spotwise.planner.runstate import Life, TrialRun
from spotwise.providers.base import Market, Offer
from spotwise.store import Store

CURVE = "earlycurve θ=0.5"
CURVE_AT = 2


class CurveStop:
    """spot-greedy (its budget and deadline guards first), plus a curve rule that stops every
    running trial once it has reported step CURVE_AT."""

    name = "test-curve-stop"

    def __init__(self) -> None:
        self.greedy = SpotGreedy()

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        actions = self.greedy.decide(view, event)
        if isinstance(event, Progress) and event.step >= CURVE_AT:
            t = view.trial(event.trial_id)
            if t.phase is Phase.RUNNING and not t.stopping:
                actions.append(StopEarly(t.trial_id, CURVE, event.metric))
        return actions


@pytest.mark.timeout(120)
def test_a_budget_stop_of_a_trial_already_stopping_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$0.12 fits the first launch (60 s start-up + 6 x 60 s at $1/h = $0.117, the policy's
    guess before it has measured anything). The curve rule stops the trial at step 2 (+240 s);
    its trial never looks at its stop file. The budget guard fires at +360 s (spent $0.1 plus a
    tick and a minute at $1/h reach $0.12) and terminates the instance: $0.10 billed, under the
    cap, and the stop counts in "limits" (before, only the trial after it did). The job then
    creates a second trial, which does not fit ($0.117 more) and is stopped before it starts:
    no third one."""
    monkeypatch.setitem(policy_registry._POLICIES, CurveStop.name, CurveStop)
    market = ScriptedMarket(steps=6)
    summary, db = run_scripted(
        tmp_path,
        monkeypatch,
        market,
        policy=CurveStop.name,
        trials=3,
        budget={"max_cost_usd": 0.12},
    )
    assert (summary["trials"], summary["trials_planned"]) == (2, 3), summary
    assert summary["limits"] == {"budget": {"stopped": 2, "never_started": 1}}
    # the curve rule's stop is the policy's; the second trial's, before it started, the
    # budget's: counted under limits only (review-ac F1: it was counted as early-stopped too)
    assert (summary["early_stopped"], summary["completed"]) == (1, 0)
    assert summary["cost_usd"] == pytest.approx(usd(360, SPOT), abs=1e-9)
    assert summary["state"] == "failed"
    assert summary["error"] == (
        "the budget (max_cost_usd 0.12) was reached, or projected to be, before "
        "any trial completed; "
        "raise budget.max_cost_usd or lower steps"
    )
    (launched,) = market.launched
    assert market.lives["i-0"]["terminated_at"] == launched + 360.0  # released by the budget
    with Store.open_existing(db) as store:
        stops = [(e, e.detail) for e in store.events(summary["job_id"], kind="stop_early")]
        first, second = (t.id for t in store.list_trials(summary["job_id"]))
    # the curve rule's stop, then the budget's, once, naming the reason it came on top of;
    # then the budget's stop of the second trial, before it launched
    assert [(e.trial_id, d["reason"], d.get("already_stopping_for")) for e, d in stops] == [
        (first, CURVE, None),
        (first, "budget", CURVE),
        (second, "budget", None),
    ]
    assert first != second


# ---- the action-application code directly ---------------------------------------------------
OFFER = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 0.9, 3.06)


class Book(Actions):
    """The orchestrator's action code over a running trial, recording events and terminates."""

    def __init__(self, tmp_path: Path, cap: float | None = 10.0) -> None:
        self.tmp_path = tmp_path
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.terminated: list[list[str]] = []
        self.spent_usd = 1.0  # far under the cap: only a budget stop can make it "spent"
        self.spec = SimpleNamespace(budget=SimpleNamespace(max_cost_usd=cap))  # type: ignore[assignment]
        self.backend = SimpleNamespace(  # type: ignore[assignment]
            provisioner=SimpleNamespace(terminate=self.terminated.append)
        )
        self.trial = TrialRun("t-1", 0, {}, 10, 5)
        self.trial.life = Life("l-1", "i-1", OFFER, 0.0, 0, 0)
        self.trial.phase, self.trial.state = Phase.RUNNING, "running"
        self.trial.lives_started = 1
        self.trials = [self.trial]
        self.lives = {"i-1": (self.trial, self.trial.life)}
        self.budget_stops = []

    def _trial_dir(self, t: TrialRun) -> Path:
        return self.tmp_path

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.events.append((kind, detail))

    def stop(self, reason: str) -> None:
        self._execute(StopEarly("t-1", reason, 0.5), [], 100.0)
        self._release_budget_stops(100.0)  # the end of the decision pass


@pytest.mark.parametrize("first", [CURVE, "deadline"])
def test_the_budget_reaching_a_stopping_trial_is_recorded_besides_its_first_reason(
    tmp_path: Path, first: str
) -> None:
    book = Book(tmp_path)
    book.stop(first)
    assert book._budget_spent() is False
    for _ in range(3):  # the guard repeats itself each tick
        book.stop("budget")
    t = book.trial
    assert (t.stop_reason, t.stopping) == (first, "early")  # the first reason stays
    assert t.limits_hit == (("budget", "deadline") if first == "deadline" else ("budget",))
    # it had launched (shed while the running projections overrun): a new trial may still fit
    assert book._budget_spent() is False
    assert book.terminated == [["i-1"]]  # the budget stop still terminates it, once
    assert book.events == [
        ("stop_early", {"reason": first, "predicted": 0.5}),
        ("stop_early", {"reason": "budget", "already_stopping_for": first}),
    ]
    t.phase, t.state = Phase.DONE, "stopped_early"
    want = {"budget": {"stopped": 1, "never_started": 0}}
    if first == "deadline":  # each limit that stopped it counts it
        want["deadline"] = {"stopped": 1, "never_started": 0}
    assert limits([t]) == want
    assert nothing_to_show([t], 10.0) == (
        "the budget (max_cost_usd 10.0) was reached, or projected to be, before "
        "any trial completed; "
        "raise budget.max_cost_usd or lower steps"
    )


def test_a_policy_reason_after_a_limit_is_not_a_limit(tmp_path: Path) -> None:
    """Only the limits (budget, deadline) are recorded on top of a first reason."""
    book = Book(tmp_path)
    book.stop("budget")
    book.stop(CURVE)
    book.stop("budget")
    t = book.trial
    assert (t.stop_reason, t.also_stopped_by, t.limits_hit) == ("budget", [], ("budget",))
    assert [d["reason"] for _, d in book.events] == ["budget"]
    t.phase, t.state = Phase.DONE, "stopped_early"
    assert limits([t]) == {"budget": {"stopped": 1, "never_started": 0}}
