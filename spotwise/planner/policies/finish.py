"""Whether a launch now finishes a trial by the job's deadline, and offers ordered by it
(review-aq AQ1): the cheapest on-demand offer per step can be a slower type that misses the
deadline. Used by every policy's on-demand placement (:func:`~._common.place`, the deadline
policies' ``launch_all``, spotwise's ``_place``), and by the deadline clock: a trial's work is
timed at its speed on the fastest on-demand type (:func:`fallback_seconds`)."""

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


def on_demand_fallback(view: PlannerView, t: TrialView) -> OfferView | None:
    """The on-demand offer the Safety Net's guarantee rests on for ``t``: the fastest available
    for it (ties: the cheaper per step). The Safety Net is the last moment an on-demand launch
    still finishes in time (Can't Be Late's rule), so it is timed on the fastest type; once it
    fires, :func:`by_deadline` takes the cheapest per step of those still in time. None: no
    on-demand offer is available."""
    od = [o for o in view.offers if o.available and not o.is_spot]
    return min(od, key=lambda o: (t.seconds_on(o), t.seconds_on(o) * o.price, o.key), default=None)


def fallback_seconds(view: PlannerView, t: TrialView) -> float:
    """``t``'s seconds per step on its :func:`on_demand_fallback`, what the deadline clock counts
    its remaining work at: the speed of the type it last ran on missed the deadline where the
    on-demand types are slower (review-aq AQ1), and fired the Safety Net needlessly where one
    is faster. Its own speed where no on-demand offer is available."""
    return t.seconds_on(on_demand_fallback(view, t))
