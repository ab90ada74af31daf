"""Pieces shared by the built-in policies (all pure: no I/O, no clock, no printing)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from spotwise.planner.policy import (
    Action,
    Checkpoint,
    Launch,
    NoticeReceived,
    OfferView,
    Phase,
    PlannerView,
    StopEarly,
    TrialView,
)

Score = Callable[[PlannerView, TrialView, OfferView], float]


def price_per_step(view: PlannerView, trial: TrialView, offer: OfferView) -> float:
    return trial.seconds_per_step * offer.price / 3600.0


def launch_cost(view: PlannerView, trial: TrialView, offer: OfferView) -> float:
    """What launching ``trial`` on ``offer`` will cost to its end: the start-up paid before its
    first step (``restart_overhead_s``, measured from this job's launches) and its remaining
    steps, at the offer's price."""
    busy_s = view.restart_overhead_s + trial.remaining_steps * trial.seconds_per_step
    return busy_s * offer.price / 3600.0


def projected_spend(view: PlannerView) -> float:
    """Spent so far plus what the running trials will cost to finish at their current price,
    the rest of their start-up included."""
    total = view.spent_usd
    for t in view.trials:
        if t.phase is Phase.RUNNING and t.offer_key:
            o = view.offer(t.offer_key)
            if o is not None:
                boot = 0.0
                if t.launched_at is not None:
                    boot = max(t.launched_at + view.restart_overhead_s - view.now, 0.0)
                total += boot * o.price / 3600.0 + t.remaining_steps * price_per_step(view, t, o)
    return total


def within_budget(
    view: PlannerView, spend: float, trial: TrialView, offer: OfferView
) -> tuple[Action | None, float]:
    """With the projected spend after it: ``Launch`` when the projected spend plus this launch
    stays within ``max_cost_usd``; ``None`` (wait) when it fits only once the running trials
    are done; ``StopEarly(budget)`` when it cannot fit even then (what is spent plus this launch
    alone is over the cap)."""
    extra = launch_cost(view, trial, offer)
    cap = view.max_cost_usd
    if cap is None or spend + extra <= cap:
        return Launch(trial.trial_id, offer.key), spend + extra
    if view.spent_usd + extra > cap:
        return StopEarly(trial.trial_id, "budget", trial.last_metric), spend
    return None, spend  # the running trials' projections leave no room yet: wait for them


def burn_rate_per_s(view: PlannerView) -> float:
    """Dollars per market second the running instances cost right now (list price)."""
    rate = 0.0
    for t in view.trials:
        if t.phase is Phase.RUNNING and t.offer_key:
            o = view.offer(t.offer_key)
            if o is not None:
                rate += o.price / 3600.0
    return rate


def can_start_before_deadline(view: PlannerView, trial: TrialView) -> bool:
    """Whether a launch now could make at least one step before the deadline."""
    if view.deadline is None:
        return True
    return view.now + view.restart_overhead_s + trial.seconds_per_step <= view.deadline


def needy(view: PlannerView) -> list[TrialView]:
    """Trials that need an instance: relaunches first (they hold sunk work), then new ones."""
    return sorted(
        (t for t in view.trials if t.phase in (Phase.QUEUED, Phase.WAITING) and not t.stopping),
        key=lambda t: (t.phase is not Phase.WAITING, t.number),
    )


def free_slots(view: PlannerView) -> int:
    return view.parallel - sum(1 for t in view.trials if t.phase is Phase.RUNNING)


def place(
    view: PlannerView,
    score: Score,
    markets: Callable[[OfferView], bool] = lambda o: True,
) -> list[Action]:
    """Launch every trial that needs an instance on its best-scoring available offer.

    Respects ``parallel`` (running trials count against it), the deadline (no launch that
    could not make a step before it) and the budget: a launch is made only when the projected
    spend of the running trials plus this trial's start-up and remaining steps at the offer's
    price stays within ``max_cost_usd``; one that fits only once they are done waits
    (:func:`within_budget`).
    """
    slots = free_slots(view)
    if slots <= 0:
        return []
    candidates = [o for o in view.offers if o.available and markets(o)]
    if not candidates:
        return []
    actions: list[Action] = []
    spend = projected_spend(view)
    for t in needy(view)[:slots]:
        if not can_start_before_deadline(view, t):
            actions.append(StopEarly(t.trial_id, "deadline", t.last_metric))
            continue
        best = min(candidates, key=lambda o: (score(view, t, o), o.key))
        action, spend = within_budget(view, spend, t, best)
        if action is not None:
            actions.append(action)
    return actions


def checkpoint_on_notice(view: PlannerView, event: object) -> list[Action]:
    if isinstance(event, NoticeReceived):
        t = view.trial(event.trial_id)
        if t.phase is Phase.RUNNING and not t.stopping:
            return [Checkpoint(t.trial_id, "notice")]
    return []


def over_budget(view: PlannerView) -> list[Action]:
    """Stop everything still alive once the budget would be crossed before the next decision.

    ``spent_usd`` already counts the running instances as if they ended now; what they burn
    until the next call (at most ``tick_s`` away, plus a minimum-billing minute) is added.
    """
    if view.max_cost_usd is None:
        return []
    margin = burn_rate_per_s(view) * (view.tick_s + 60.0)
    if view.spent_usd + margin < view.max_cost_usd:
        return []
    return [
        StopEarly(t.trial_id, "budget", t.last_metric)
        for t in view.trials
        if not t.phase.is_terminal() and not (t.stopping and t.phase is not Phase.RUNNING)
    ]


def finish_eta(view: PlannerView, t: TrialView) -> float:
    """When a running trial will have made all its steps if nothing interrupts it."""
    boot = 0.0
    if t.launched_at is not None:
        boot = max(t.launched_at + view.restart_overhead_s - view.now, 0.0)
    return view.now + boot + t.remaining_steps * t.seconds_per_step


def past_deadline(view: PlannerView) -> list[Action]:
    """Stop what cannot finish once the deadline falls before the next decision.

    A running trial that will be done by the deadline keeps going; everything else still alive
    is stopped (its last metric is its result).
    """
    if view.deadline is None or view.now + view.tick_s + view.checkpoint_s < view.deadline:
        return []
    return [
        StopEarly(t.trial_id, "deadline", t.last_metric)
        for t in view.trials
        if not t.phase.is_terminal()
        and not (t.phase is Phase.RUNNING and finish_eta(view, t) <= view.deadline)
    ]


def guards(view: PlannerView) -> list[Action]:
    """The budget and deadline stops every policy applies before anything else."""
    stop = over_budget(view)
    return stop if stop else past_deadline(view)


# ---- learning curves ----------------------------------------------------------------------


class CurvePredictor(Protocol):
    """``(steps, values, total_steps, direction) -> (final, lo, hi)``: EarlyCurve, or a stand-in.

    ``direction`` is the job's (``"maximize"`` / ``"minimize"``); ``(lo, hi)`` is a central 95 %
    band of the final value.
    """

    def __call__(
        self, steps: list[int], values: list[float], total_steps: int, direction: str
    ) -> tuple[float, float, float]: ...


BAND_Z = 1.96  # EarlyCurve's band is a central 95 % interval (spotwise.predictors.earlycurve.Z95)


def earlycurve_predictor(name: str = "earlycurve") -> CurvePredictor:
    """A registered curve predictor's pure ``predict_final`` (imported lazily: numpy/scipy)."""

    def predict(
        steps: list[int], values: list[float], total_steps: int, direction: str
    ) -> tuple[float, float, float]:
        from spotwise.predictors.earlycurve import get_curve_predictor

        opts = {"direction": "max" if direction == "maximize" else "min"}
        try:
            pred = get_curve_predictor(name, **opts)
        except TypeError:  # a predictor without a direction option (last-value, mean-last-k)
            pred = get_curve_predictor(name)
        final, lo, hi = pred.predict_final(steps, values, total_steps)  # type: ignore[arg-type]
        return float(final), float(lo), float(hi)

    return predict


def observed(trial: TrialView, upto: int | None = None) -> tuple[list[int], list[float]]:
    pts = [(s, v) for s, v in trial.curve if upto is None or s <= upto]
    return [s for s, _ in pts], [v for _, v in pts]


def final_value(trial: TrialView) -> float | None:
    """The metric at the last step of a trial that ran to the end, else None."""
    if trial.curve and trial.curve[-1][0] >= trial.steps_total:
        return trial.curve[-1][1]
    return None


def best_completed(view: PlannerView) -> float | None:
    best: float | None = None
    for t in view.trials:
        v = final_value(t)
        if v is not None and (best is None or view.better(v, best)):
            best = v
    return best
