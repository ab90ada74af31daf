"""How the budget projects a life's wind-down past its trial's last step, and the billing
minimum of a life projected shorter than it (review-ac F4; the real loop's tests are in
``test_s17_budget_wind_down``).

The orchestrator measures each life that ended because its trial made its last step, from
that step seen to the end it was billed to, keeps the slowest of the job's newest five (a
default until one is measured) and gives it to the policy's view as ``wind_down_s``; every
projected life counts it, and the offer's provider's minimum. The simulator's view keeps 0 and
no minimum: its projections are the old ones to the bit.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from shared_helpers import planner_view
from test_s17_budget_wind_down import WindingMarket

from spotwise.planner.policies._common import finish_cost, launch_cost, within_budget
from spotwise.planner.policy import Launch, OfferView, Phase, PlannerView, TrialView
from spotwise.planner.runstate import (
    WIND_DOWN_S,
    Life,
    TrialRun,
    note_report,
    note_wind_down,
    wind_down_seconds,
)
from spotwise.providers.base import InstanceState, Market, Offer
from spotwise.providers.billing import rule_for

AWS = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 0.9, 3.06)


def _life_at_its_last_step(t: TrialRun, launched: float, done: float) -> Life:
    life = Life(f"l-{launched}", f"i-{launched}", AWS, launched, 0, 0)
    note_report(t, life, 1, launched + 100.0)
    note_report(t, life, t.steps_total, done)
    return life


def test_the_wind_down_is_the_slowest_of_the_newest_five_ended_after_their_last_step() -> None:
    a, b = TrialRun("t-a", 0, {}, 4, 2), TrialRun("t-b", 1, {}, 4, 2)
    assert wind_down_seconds([a, b]) is None
    # a life that never reached its last step (stopped, revoked, crashed) measures nothing
    short = Life("l-x", "i-x", AWS, 0.0, 0, 0)
    note_report(a, short, 2, 50.0)
    note_wind_down(a, short, 400.0)
    assert wind_down_seconds([a, b]) is None
    # ends at 1000 + k * 1000, wound down 500 s first, then 10, 20, ... s
    for k, wound in enumerate([500.0, 10.0, 20.0, 30.0, 40.0, 50.0]):
        t = a if k % 2 else b
        end = 1000.0 + k * 1000.0
        note_wind_down(t, _life_at_its_last_step(t, end - 800.0, end - wound), end)
    # the 500 s one is the sixth newest: forgotten; the slowest of the others is 50 s
    assert wind_down_seconds([a, b]) == 50.0
    noticed = _life_at_its_last_step(b, 7000.0, 7100.0)
    noticed.notice_deadline = 7200.0  # its end was the market's (or a release on the notice)
    note_wind_down(b, noticed, 7500.0)
    assert wind_down_seconds([a, b]) == 50.0
    newest = _life_at_its_last_step(a, 7000.0, 7100.0)
    note_wind_down(a, newest, 7080.0)  # billed before the step was seen (a cloud's end time)
    assert a.wind_downs[-1] == (7080.0, 0.0)


def _view(trials: list[TrialRun], speedup_default: float = WIND_DOWN_S) -> PlannerView:
    return planner_view(10_000.0, [AWS], trials, wind_down_default_s=speedup_default)


def test_the_orchestrators_view_carries_the_wind_down_and_each_offers_minimum() -> None:
    t = TrialRun("t-a", 0, {}, 4, 2)
    assert _view([t]).wind_down_s == WIND_DOWN_S  # nothing measured: the default
    assert _view([t], 300.0).wind_down_s == 300.0  # a replay's: a wall second at 300x
    note_wind_down(t, _life_at_its_last_step(t, 0.0, 500.0), 620.0)
    assert _view([t], 300.0).wind_down_s == 120.0  # measured: the default no longer stands
    assert _view([t]).offers[0].minimum_s == 60.0  # AWS bills a life 60 s at least
    assert PlannerView(now=0.0, offers=(), trials=()).wind_down_s == 0.0  # the simulator's


OV = OfferView(AWS, minimum_s=60.0)


def test_a_life_shorter_than_its_providers_minimum_is_projected_at_the_minimum() -> None:
    """Start-up 20 s and 2 steps of 5 s, no wind-down: a 30 s life that AWS bills 60 s."""
    t = TrialView("t0", 0, Phase.QUEUED, steps_total=2, seconds_per_step=5.0)
    view = PlannerView(now=0.0, offers=(OV,), trials=(t,), restart_overhead_s=20.0)
    assert launch_cost(view, t, OV) == pytest.approx(60.0 * 0.9 / 3600.0)
    longer = dataclasses.replace(view, wind_down_s=100.0)  # 130 s: past the minimum
    assert launch_cost(longer, t, OV) == pytest.approx(130.0 * 0.9 / 3600.0)
    # before a step is timed: a launch needs its start-up and wind-down (or the minimum)
    unmeasured = dataclasses.replace(view, speed_measured=False, max_cost_usd=59.0 * 0.9 / 3600)
    assert within_budget(unmeasured, 0.0, t, OV)[0] != Launch("t0", OV.key)


def test_a_running_trial_is_projected_to_the_end_of_its_wind_down() -> None:
    """4 steps left of 60 s at $0.9/h, a 200 s wind-down: 440 s; at its last step, seen 50 s
    ago, the 150 s of the wind-down still to come."""
    run = TrialView(
        "t0", 0, Phase.RUNNING, step=6, steps_total=10, offer_key=OV.key, launched_at=-1000.0
    )
    view = PlannerView(now=0.0, offers=(OV,), trials=(run,), wind_down_s=200.0)
    assert finish_cost(view, run) == pytest.approx(440.0 * 0.9 / 3600.0)
    done = dataclasses.replace(run, step=10, done_at=-50.0)
    assert finish_cost(view, done) == pytest.approx(150.0 * 0.9 / 3600.0)
    assert finish_cost(dataclasses.replace(view, now=500.0), done) == 0.0


def test_the_simulators_projections_are_the_old_ones_to_the_bit() -> None:
    """The simulator's view keeps ``wind_down_s`` 0 and its offers no minimum: every
    projection is the old formula's float, so no simulated number moves."""
    o = OfferView(AWS)
    for sps, boot, step in [(37.3, 61.7, 3), (0.1, 0.0, 0), (1234.5, 98.6, 9)]:
        t = TrialView(
            "t",
            0,
            Phase.RUNNING,
            step=step,
            steps_total=10,
            seconds_per_step=sps,
            offer_key=o.key,
            launched_at=-10.0,
        )
        view = PlannerView(now=0.0, offers=(o,), trials=(t,), restart_overhead_s=boot)
        busy = boot + t.remaining_steps * sps
        assert launch_cost(view, t, o) == busy * o.price / 3600.0
        left = max(-10.0 + boot, 0.0)
        assert finish_cost(view, t) == left * o.price / 3600.0 + t.remaining_steps * (
            sps * o.price / 3600.0
        )


def test_a_billed_life_that_the_market_took_measures_no_wind_down() -> None:
    """Ledger._bill keeps a life's wind-down only when the trial's own end ended it."""
    from spotwise.planner.ledger import Ledger

    class Book(Ledger):
        def __init__(self) -> None:
            self.lives, self.leftover_ids, self.spent_usd, self.on_demand_usd = {}, [], 0.0, 0.0
            self.backend = dataclasses.replace(
                WindingMarket().backend(), rules={"aws": rule_for("aws")}
            )
            self.job_id = "j-a"
            open_row = SimpleNamespace(state="running")  # the life's record, still open
            self.store = type(
                "S",
                (),
                {
                    "get_instance": lambda s, launch_id: open_row,
                    "rebill_instance_if_unchanged": lambda s, seen, **kw: seen,
                    "update_trial": _no,
                    "add_event": _no,
                },
            )()

    book = Book()
    for state, released, kept in [
        (InstanceState.REVOKED, False, 0),
        (InstanceState.TERMINATED, True, 0),
        (InstanceState.TERMINATED, False, 1),
    ]:
        t = TrialRun("t-a", 0, {}, 4, 2)
        t.state = "completed"
        life = _life_at_its_last_step(t, 0.0, 500.0)
        book._bill(t, life, state, 700.0, released=released)
        assert [w for _, w in t.wind_downs] == [200.0] * kept


def _no(*a: Any, **kw: Any) -> None:
    return None
