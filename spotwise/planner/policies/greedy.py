"""``spot-greedy`` and ``on-demand``: the two reference policies.

* ``spot-greedy`` places each trial on the available offer with the lowest list price per step
  (seconds per step × price, spot and on-demand ranked together: on one instance type spot is
  always the cheaper, on several an on-demand type can be cheaper per step than a slower or
  dearer spot one; with a deadline, the offers that finish the trial by it first),
  checkpoints on an interruption notice and relaunches from the checkpoint on the next best
  offer. No early stopping — what price-only tools do.
* ``on-demand`` runs every trial on on-demand capacity to the end: the reference cost.

Both stop everything before the budget or the deadline would be crossed (``guards``).
"""

from __future__ import annotations

from spotwise.planner.policies._common import (
    checkpoint_on_notice,
    guards,
    place,
    price_per_step,
)
from spotwise.planner.policy import Action, Event, PlannerView, register_policy


@register_policy("spot-greedy")
class SpotGreedy:
    name = "spot-greedy"

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        stop = guards(view)
        if stop:
            return stop
        return [*checkpoint_on_notice(view, event), *place(view, price_per_step)]


@register_policy("on-demand")
class OnDemand:
    name = "on-demand"

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        stop = guards(view)
        if stop:
            return stop
        return place(view, price_per_step, markets=lambda o: not o.is_spot)
