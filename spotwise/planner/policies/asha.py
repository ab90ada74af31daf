"""``asha``: asynchronous successive halving (Li et al., MLSys 2020) on spot-greedy placement.

Rungs sit at ``min_steps · η^k`` steps (η = 3). When a trial reports the metric of a rung it
continues only if that metric ranks in the top ``1/η`` of every metric recorded at that rung so
far, itself included (with fewer than η entries it must be the best); otherwise it stops. This
is the promotion rule of ASHA written as a pruner — the form Optuna's
``SuccessiveHalvingPruner`` uses — because a trial here is resumed from its checkpoint rather
than paused and promoted later. The rung table is rebuilt from the trials' curves in the view,
so the policy keeps no state of its own.
"""

from __future__ import annotations

from spotwise.planner.policies._common import (
    checkpoint_on_notice,
    guards,
    place,
    price_per_step,
    stop_invalid,
)
from spotwise.planner.policy import (
    Action,
    Event,
    Phase,
    PlannerView,
    Progress,
    StopEarly,
    register_policy,
)


def rungs(steps_total: int, min_steps: int, eta: int) -> list[int]:
    out, r = [], min_steps
    while r < steps_total:
        out.append(r)
        r *= eta
    return out


@register_policy("asha")
class Asha:
    name = "asha"

    def __init__(self, eta: int = 3, min_steps: int = 1) -> None:
        if eta < 2:
            raise ValueError(f"η must be >= 2, got {eta=}")
        if min_steps < 1:
            raise ValueError(f"min_steps must be >= 1, got {min_steps=}")
        self.eta, self.min_steps = eta, min_steps

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        stop = guards(view) or stop_invalid(view, event)
        if stop:
            return stop
        actions: list[Action] = []
        if isinstance(event, Progress) and event.metric is not None:
            actions += self._prune(view, event)
        stopped = {a.trial_id for a in actions}
        rest = [*checkpoint_on_notice(view, event), *place(view, price_per_step)]
        return [*actions, *(a for a in rest if a.trial_id not in stopped)]

    def _prune(self, view: PlannerView, event: Progress) -> list[Action]:
        t = view.trial(event.trial_id)
        if t.phase is not Phase.RUNNING or event.step not in rungs(
            t.steps_total, self.min_steps, self.eta
        ):
            return []
        values = []
        for other in view.trials:
            for s, v in other.curve:
                if s == event.step:
                    values.append(v)
                    break
        values.sort(reverse=view.direction == "maximize")
        k = max(len(values) // self.eta, 1)
        cutoff = values[k - 1]
        assert event.metric is not None
        if event.metric == cutoff or view.better(event.metric, cutoff):
            return []
        return [StopEarly(t.trial_id, f"asha rung {event.step}", event.metric)]
