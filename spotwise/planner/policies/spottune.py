"""``spottune``: SpotTune (ICDCS 2020) as published, on our events.

* Placement: the offer with the lowest expected cost per step
  ``E[sCost] = M · (1 − p) · price`` (M seconds per step, p the predicted probability of a
  revocation within the hour; the ``(1 − p)`` is the refund of a revoked first hour, so it
  applies only where the provider refunds one). On-demand has p = 0.
* Proactive stop: a spot instance is left at the last step boundary before the end of its first
  hour (checkpoint, exit, relaunch on the best offer), so every hour is a *first* hour that AWS
  does not bill if it revokes it.
* EarlyCurve at θ: when a trial reaches θ of its steps its final metric is predicted from the
  observed part; it continues only if that prediction is among the ``keep_top`` best
  predictions made at θ so far (trials arrive one by one here, so the cut is asynchronous).
"""

from __future__ import annotations

import math

from spotwise.planner.cost import StepCost
from spotwise.planner.policies._common import (
    CurvePredictor,
    checkpoint_on_notice,
    earlycurve_predictor,
    guards,
    observed,
    place,
    stop_invalid,
)
from spotwise.planner.policy import (
    Action,
    Checkpoint,
    Event,
    OfferView,
    Phase,
    PlannerView,
    Progress,
    StopEarly,
    TrialView,
    register_policy,
)


def spottune_score(view: PlannerView, trial: TrialView, offer: OfferView) -> float:
    refund = view.refund_of(offer) >= 3600.0 and offer.is_spot
    return StepCost(
        seconds_per_step=max(trial.seconds_on(offer), 1e-9),
        price_per_hour=offer.price,
        p_revoke=offer.p_revoke if offer.is_spot else 0.0,
        horizon_s=offer.horizon_s,
        refund_first_hour=refund,
    ).spottune()


def crosses_first_hour(view: PlannerView, t: TrialView) -> bool:
    """The next step (and the checkpoint to leave) would end past the first instance hour."""
    if t.launched_at is None or t.remaining_steps <= 1:
        return False
    age = view.now - t.launched_at
    offer = view.offer(t.offer_key) if t.offer_key else None
    window = view.refund_of(offer)
    return age < window and age + t.seconds_on(offer) + view.checkpoint_s > window


@register_policy("spottune")
class SpotTune:
    name = "spottune"
    uses_forecast = True  # the orchestrator attaches the revocation model (OfferView.p_revoke)

    def __init__(
        self, theta: float = 0.3, keep_top: int = 3, predictor: CurvePredictor | None = None
    ) -> None:
        if not 0.0 < theta < 1.0:
            raise ValueError(f"θ must be in (0, 1), got {theta=}")
        if keep_top < 1:
            raise ValueError(f"keep_top must be >= 1, got {keep_top=}")
        self.theta, self.keep_top = theta, keep_top
        self.predict = predictor or earlycurve_predictor()
        self.at_theta: dict[str, float] = {}  # trial → predicted final at θ (memo, pure)

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        stop = guards(view) or stop_invalid(view, event)
        if stop:
            return stop
        actions: list[Action] = []
        if isinstance(event, Progress):
            actions += self._early_curve(view, event)
            actions += self._first_hour(view, event, {a.trial_id for a in actions})
        actions += checkpoint_on_notice(view, event)
        busy = {a.trial_id for a in actions}
        return [*actions, *(a for a in place(view, spottune_score) if a.trial_id not in busy)]

    def _early_curve(self, view: PlannerView, event: Progress) -> list[Action]:
        t = view.trial(event.trial_id)
        at = max(math.ceil(self.theta * t.steps_total), 2)
        if t.phase is not Phase.RUNNING or event.step < at or event.step >= t.steps_total:
            return []
        self._earlier_run(view, at)  # first: a trial judged in the earlier run is not again
        if t.trial_id in self.at_theta:
            return []
        steps, values = observed(t, upto=event.step)  # a later report read with it: not yet
        final, _, _ = self.predict(steps, values, t.steps_total, view.direction)
        self.at_theta[t.trial_id] = final
        ranked = sorted(self.at_theta.values(), reverse=view.direction == "maximize")
        cutoff = ranked[min(self.keep_top, len(ranked)) - 1]
        if final == cutoff or view.better(final, cutoff):
            return []
        return [StopEarly(t.trial_id, f"earlycurve θ={self.theta:g}", final)]

    def _earlier_run(self, view: PlannerView, at: int) -> None:
        """A resumed job's trials that passed θ in its earlier run: their predictions at θ,
        as that run made them (from its reports up to the first at or past θ; a trial queued
        again from a checkpoint before θ: from its earlier reports), so they rank the trials
        of this run as they ranked the earlier ones, and are not judged a second time."""
        for u in view.trials:
            if u.trial_id in self.at_theta:
                continue
            earlier = u.reported or (u.curve if u.start_step >= at else ())
            first = next((s for s, _ in earlier if s >= at), None)
            if first is not None and first < u.steps_total:
                pts = [(s, v) for s, v in earlier if s <= first]
                self.at_theta[u.trial_id] = self.predict(
                    [s for s, _ in pts], [v for _, v in pts], u.steps_total, view.direction
                )[0]

    def _first_hour(self, view: PlannerView, event: Progress, skip: set[str]) -> list[Action]:
        t = view.trial(event.trial_id)
        if t.trial_id in skip or t.phase is not Phase.RUNNING or t.stopping:
            return []
        o = view.offer(t.offer_key) if t.offer_key else None
        if o is None or not o.is_spot or view.refund_of(o) <= 0:
            return []
        if crosses_first_hour(view, t):
            return [Checkpoint(t.trial_id, "spottune: end of the first hour")]
        return []
