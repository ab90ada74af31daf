"""Whether a launch now finishes a trial by the job's deadline, and offers ordered by it
(review-aq AQ1): the cheapest on-demand offer per step can be a slower type that misses the
deadline. Used by every policy's on-demand placement (:func:`~._common.place`, the deadline
policies' ``launch_all``, spotwise's ``_place``)."""

from __future__ import annotations

from spotwise.planner.policy import OfferView, PlannerView, TrialView


def finishes_in_time(view: PlannerView, t: TrialView, o: OfferView) -> bool:
    """Whether a launch of ``t`` on ``o`` now makes its remaining steps by the deadline (at its
    speed on ``o``'s instance type, after the start-up), as ``past_deadline`` judges it."""
    if view.deadline is None:
        return True
    return view.now + view.restart_overhead_s + t.remaining_steps * t.seconds_on(o) <= view.deadline


def by_deadline(view: PlannerView, t: TrialView, ranked: list[OfferView]) -> list[OfferView]:
    """``ranked`` (best first) with the offers that finish ``t`` by the deadline first, in their
    order, then the others fastest first: the cheapest on-demand per step can be a slower type
    that misses the deadline (review-aq AQ1: a T4 at a sixth of a V100's price, 20 steps late)."""
    if view.deadline is None:
        return ranked
    ok = [o for o in ranked if finishes_in_time(view, t, o)]
    keys = {o.key for o in ok}
    return ok + sorted((o for o in ranked if o.key not in keys), key=t.seconds_on)
