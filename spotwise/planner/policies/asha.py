"""``asha``: asynchronous successive halving (Li et al., MLSys 2020) on spot-greedy placement.

Rungs sit at ``min_steps · η^k`` steps (η = 3; with the default ``min_steps = 1`` the first
rung is the first step: a trial is first judged on one report). A trial is judged at a rung by
its first report at or past it, with the metric of that report: a script that reports every 2
epochs is judged at 2, 4, 10, 28 for the rungs 1, 3, 9, 27. A report that passes several rungs
at once (the first report at step 5) is judged once, at the highest of them (3), and is
recorded at that rung only. At its rung a trial continues only if its metric ranks in the top
``1/η`` of every metric recorded at that rung so far, itself included (with fewer than η entries
it must be the best); otherwise it stops. This is the promotion rule of ASHA written as a
pruner — the form Optuna's ``SuccessiveHalvingPruner`` uses — because a trial here is resumed
from its checkpoint rather than paused and promoted later. The rung table is rebuilt from the
trials' curves in the view, so the policy keeps no state of its own (a trial resumed from a
checkpoint before a rung is judged there again when it passes it again, as before).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence

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


Curve = Sequence[tuple[int, float]]


def mark_judged(curve: Curve, step: int, marks: Collection[int]) -> int | None:
    """The mark (a rung, a check step) a report at ``step`` is judged at: the highest of
    ``marks`` after the trial's previous report (in ``curve``, sorted by step) and at or before
    ``step``; None when the report passes no mark. With a report at every step this is ``step``
    itself when it is a mark."""
    prev = next((s for s, _ in reversed(curve) if s < step), None)
    return max((m for m in marks if (prev is None or prev < m) and m <= step), default=None)


def judged_reports(curve: Curve, marks: Collection[int]) -> Iterator[tuple[int, int]]:
    """(mark, step) for each report of ``curve`` that is judged at a mark (:func:`mark_judged`)."""
    prev: int | None = None
    for s, _ in curve:
        passed = [m for m in marks if (prev is None or prev < m) and m <= s]
        if passed:
            yield max(passed), s
        prev = s


def report_judged_at(curve: Curve, mark: int, marks: Collection[int]) -> tuple[int, float] | None:
    """The report (step, metric) of ``curve`` that was judged at ``mark``: its first report at
    or past it, unless that report passed a higher mark too (then it was judged there)."""
    hit = next(((s, v) for s, v in curve if s >= mark), None)
    if hit is None or any(mark < m <= hit[0] for m in marks):
        return None
    return hit


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
        if t.phase is not Phase.RUNNING or event.step >= t.steps_total:
            return []
        marks = rungs(t.steps_total, self.min_steps, self.eta)
        rung = mark_judged(t.curve, event.step, marks)
        if rung is None:
            return []
        assert event.metric is not None
        values = [event.metric]
        for other in view.trials:
            if other.trial_id != t.trial_id:
                hit = report_judged_at(other.curve, rung, marks)
                values += [hit[1]] if hit is not None else []
        values.sort(reverse=view.direction == "maximize")
        k = max(len(values) // self.eta, 1)
        cutoff = values[k - 1]
        if event.metric == cutoff or view.better(event.metric, cutoff):
            return []
        return [StopEarly(t.trial_id, f"asha rung {rung}")]
