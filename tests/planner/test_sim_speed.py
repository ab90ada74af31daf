"""The seconds per step the simulator shows a policy include checkpoint writes, as ``tune``'s do.

``spotwise tune`` times a trial from one progress report to the next, so the time spent writing
the checkpoints between them is part of its seconds per step (and of every projection built on
it). The simulator used to count the steps alone, so its budget projections ran low.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from plan_helpers import T0, curve, make_traces

from spotwise.planner.policy import Action, Event, PlannerView, Policy, Progress, get_policy
from spotwise.planner.simulator import Engine, SimSettings
from spotwise.providers.billing import rule_for
from spotwise.providers.replay import ReplayMarket


@dataclass
class Recorder:
    inner: Policy = field(default_factory=lambda: get_policy("spot-greedy"))
    speeds: dict[int, float] = field(default_factory=dict)  # step reported -> seconds per step

    @property
    def name(self) -> str:
        return self.inner.name

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        if isinstance(event, Progress):
            self.speeds[event.step] = view.trials[0].seconds_per_step
        return self.inner.decide(view, event)


def test_observed_seconds_per_step_include_the_checkpoint_writes() -> None:
    market = ReplayMarket(make_traces({"z": [1] * 60}, {"z": 0.8}))  # never revoked
    settings = SimSettings(
        parallel=1,
        time_scale=1.0,
        restart_overhead_s=120.0,
        checkpoint_s=100.0,
        checkpoint_every=2,
    )
    rec = Recorder()
    Engine(
        rec, market, rule_for("aws"), [curve("c", 0.9, steps=8, step_s=600.0)], settings, T0
    ).run()
    assert rec.speeds[1] == 600.0  # no checkpoint written yet
    assert rec.speeds[3] == (3 * 600.0 + 100.0) / 3  # the write after step 2
    assert rec.speeds[5] == (5 * 600.0 + 2 * 100.0) / 5  # after steps 2 and 4: 640 s, not 600
