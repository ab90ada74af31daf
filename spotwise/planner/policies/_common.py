"""Pieces shared by the built-in policies (all pure: no I/O, no clock, no printing)."""

from __future__ import annotations

from collections.abc import Callable

from spotwise.planner.policies.curves import BAND_Z as BAND_Z
from spotwise.planner.policies.curves import CurvePredictor as CurvePredictor
from spotwise.planner.policies.curves import best_completed as best_completed
from spotwise.planner.policies.curves import earlycurve_predictor as earlycurve_predictor
from spotwise.planner.policies.curves import final_value as final_value
from spotwise.planner.policies.curves import observed as observed
from spotwise.planner.policies.finish import by_deadline
from spotwise.planner.policy import (
    INVALID_METRIC,
    Action,
    Checkpoint,
    Launch,
    NoticeReceived,
    OfferView,
    Phase,
    PlannerView,
    Progress,
    StopEarly,
    TrialView,
)

Score = Callable[[PlannerView, TrialView, OfferView], float]


def price_per_step(view: PlannerView, trial: TrialView, offer: OfferView) -> float:
    """List dollars per step of ``trial`` on ``offer``: at its speed on that instance type."""
    return trial.seconds_on(offer) * offer.price / 3600.0


def launch_cost(view: PlannerView, trial: TrialView, offer: OfferView) -> float:
    """What launching ``trial`` on ``offer`` will cost to its end: the start-up paid before its
    first step (``restart_overhead_s``, measured from this job's launches), its remaining
    steps and the life's wind-down after its last step (``wind_down_s``), at the offer's
    price and at its speed on the offer's instance type; at least the shortest life the offer's
    provider bills (``minimum_s``)."""
    busy_s = view.restart_overhead_s + trial.remaining_steps * trial.seconds_on(offer)
    extra_s = max(busy_s + view.wind_down_s, offer.minimum_s) - busy_s
    return busy_s * offer.price / 3600.0 + extra_s * offer.price / 3600.0


def wind_down_left(view: PlannerView, t: TrialView) -> float:
    """Market seconds a running trial's life is still billed past its last step: the view's
    ``wind_down_s``, less what of it has passed once the last step was seen (``done_at``)."""
    if t.remaining_steps > 0 or t.done_at is None:
        return view.wind_down_s
    return max(t.done_at + view.wind_down_s - view.now, 0.0)


def finish_cost(view: PlannerView, t: TrialView) -> float:
    """What a running trial will cost from now to the end of its life at its current price:
    the rest of its start-up, its remaining steps and the rest of its wind-down after its last
    step (0 for a trial that is not running). The billing minimum of a life already running is
    in ``spent_usd`` (it counts the life as if it ended now)."""
    o = view.offer(t.offer_key) if t.phase is Phase.RUNNING and t.offer_key else None
    if o is None:
        return 0.0
    boot = 0.0
    if t.launched_at is not None:
        boot = max(t.launched_at + view.restart_overhead_s - view.now, 0.0)
    steps = boot * o.price / 3600.0 + t.remaining_steps * price_per_step(view, t, o)
    return steps + wind_down_left(view, t) * o.price / 3600.0


def projected_spend(view: PlannerView) -> float:
    """Spent so far plus what the running trials will cost to finish at their current price,
    the rest of their start-up and their wind-down included."""
    return view.spent_usd + sum(finish_cost(view, t) for t in view.trials)


def within_budget(
    view: PlannerView, spend: float, trial: TrialView, offer: OfferView
) -> tuple[Action | None, float]:
    """With the projected spend after it: ``Launch`` when the projected spend plus this launch
    stays within ``max_cost_usd``; ``None`` (wait) when it fits only once the running trials
    are done; ``StopEarly(budget)`` when it cannot fit even then (what is spent plus this launch
    alone is over the cap).

    Before any step is timed (``speed_measured`` False) the steps' cost is a guess (60 s a
    step): a trial is launched when what is spent plus its start-up and wind-down (at least
    its provider's minimum) fits, and never stopped on the guess (a $0.30 budget refused
    trials of 10 fast steps that cost $0.10 each);
    :func:`free_slots` keeps that to one trial, and :func:`over_budget` guards the real spend.
    """
    extra = launch_cost(view, trial, offer)
    cap = view.max_cost_usd
    if cap is not None and not view.speed_measured:
        boot_s = max(view.restart_overhead_s + view.wind_down_s, offer.minimum_s)
        boot = boot_s * offer.price / 3600.0
        if view.spent_usd + boot <= cap:
            return Launch(trial.trial_id, offer.key), spend + extra
        return StopEarly(trial.trial_id, "budget"), spend
    if cap is None or spend + extra <= cap:
        return Launch(trial.trial_id, offer.key), spend + extra
    if view.spent_usd + extra > cap:
        return StopEarly(trial.trial_id, "budget"), spend
    return None, spend  # the running trials' projections leave no room yet: wait for them


def first_fit(
    view: PlannerView, spend: float, t: TrialView, ranked: list[OfferView]
) -> tuple[Action | None, float, OfferView]:
    """The favourite of ``ranked`` (best first) as :func:`within_budget` judges it, with the
    projected spend after it and the offer; when it cannot fit even once the running trials
    are done, the next offers in order before ``StopEarly(budget)``: the first that fits now,
    else wait when one fits later (review-aq AQ4: the favourite, maybe the dearer launch, judged
    alone stopped a trial while a cheaper offer fit); a favourite that only waits keeps waiting."""
    action, after = within_budget(view, spend, t, ranked[0])
    if not isinstance(action, StopEarly):
        return action, after, ranked[0]
    waits = False
    for o in ranked[1:]:
        nxt, after = within_budget(view, spend, t, o)
        if isinstance(nxt, Launch):
            return nxt, after, o
        waits = waits or nxt is None
    return (None if waits else action), spend, ranked[0]


def can_start_before_deadline(view: PlannerView, trial: TrialView) -> bool:
    """Whether a launch now could make at least one step before the deadline (on the fastest
    offer available for it)."""
    if view.deadline is None:
        return True
    return view.now + view.restart_overhead_s + fastest_s(view, trial) <= view.deadline


def fastest_s(view: PlannerView, t: TrialView) -> float:
    """``t``'s seconds per step on the fastest available offer (none: its own speed)."""
    return min((t.seconds_on(o) for o in view.offers if o.available), default=t.seconds_per_step)


def needy(view: PlannerView) -> list[TrialView]:
    """Trials that need an instance: relaunches first (they hold sunk work), then new ones."""
    return sorted(
        (t for t in view.trials if t.phase in (Phase.QUEUED, Phase.WAITING) and not t.stopping),
        key=lambda t: (t.phase is not Phase.WAITING, t.number),
    )


def free_slots(view: PlannerView) -> int:
    """How many trials may be launched now: ``parallel`` less the running ones.

    With a budget and no step timed yet (``speed_measured`` False) every projection rests on a
    guessed ``seconds_per_step``: only one trial runs until its steps are timed, then the others
    are admitted on projections at the measured speed. Without a budget nothing waits.
    """
    running = sum(1 for t in view.trials if t.phase is Phase.RUNNING)
    if view.max_cost_usd is not None and not view.speed_measured:
        return min(view.parallel, 1) - running
    return view.parallel - running


def place(
    view: PlannerView,
    score: Score,
    markets: Callable[[OfferView], bool] = lambda o: True,
    suits: Callable[[TrialView, OfferView], bool] | None = None,
) -> list[Action]:
    """Launch every trial that needs an instance on its best-scoring available offer (of those
    that ``suits`` it, when given: a trial none suits waits).

    Respects ``parallel`` (running trials count against it), the deadline (no launch that
    could not make a step before it; the offers finishing by it first: a pool of spot and
    on-demand ranked per step put a trial on a slow on-demand type that could not finish
    while a faster offer could, s22) and the
    budget: a launch only when the projected spend plus this trial's start-up, steps and
    wind-down at the offer's price stays within ``max_cost_usd``, else wait while one fits once
    the others are done (:func:`within_budget`), trying the next offers (:func:`first_fit`);
    until a step has been timed, one trial at a time (:func:`free_slots`)."""
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
            actions.append(StopEarly(t.trial_id, "deadline"))
            continue
        pool = [o for o in candidates if suits is None or suits(t, o)]
        ranked = sorted(pool, key=lambda o: (score(view, t, o), o.key))
        ranked = by_deadline(view, t, ranked)  # those finishing by the deadline first
        if not ranked:
            continue
        action, spend, _ = first_fit(view, spend, t, ranked)
        if action is not None:
            actions.append(action)
    return actions


def checkpoint_on_notice(view: PlannerView, event: object) -> list[Action]:
    """A notice asks its trial to checkpoint and leave, if the trial still runs on the noticed
    instance: two notices of one pass are decided one after the other, and handling the first
    can relaunch the second's trial elsewhere (its instance is being taken); its own notice is
    then stale, and stopping the fresh instance would bill a life for nothing (review-ab)."""
    if isinstance(event, NoticeReceived):
        t = view.trial(event.trial_id)
        if t.instance_id not in (None, event.instance_id):
            return []  # the notice is for an instance the trial has already left
        if t.phase is Phase.RUNNING and not t.stopping:
            return [Checkpoint(t.trial_id, "notice")]
    return []


def over_budget(view: PlannerView) -> list[Action]:
    """Stop what would cross the budget before the next decision.

    ``spent_usd`` already counts the running instances as if they ended now; what they burn
    until the next call (at most ``tick_s`` away, plus a minimum-billing minute) is added. When
    that reaches ``max_cost_usd`` every trial still alive that is not running is stopped, and
    the running ones furthest from done (the most cost still to go; ties: the later trial)
    until what the others burn fits: those nearest their end keep going. A trial that has made
    its last step is leaving with its result: it is never stopped, and its instance counts
    only for the rest of its wind-down (``wind_down_s``).
    """
    cap = view.max_cost_usd
    if cap is None:
        return []
    window = view.tick_s + 60.0
    running = [t for t in view.trials if t.phase is Phase.RUNNING and t.remaining_steps > 0]
    spent = view.spent_usd + sum(  # the lives winding down after their last step
        _price_of(view, t) * min(window, wind_down_left(view, t)) / 3600.0
        for t in view.trials
        if t.phase is Phase.RUNNING and t.remaining_steps == 0
    )
    rate = sum(_price_of(view, t) for t in running) / 3600.0
    if spent + rate * window < cap:
        return []
    stop = {
        t.trial_id
        for t in view.trials
        if not t.phase.is_terminal() and t.phase is not Phase.RUNNING and not t.stopping
    }
    for t in sorted(running, key=lambda t: (-finish_cost(view, t), -t.number)):
        if spent + rate * window < cap:
            break
        stop.add(t.trial_id)
        rate -= _price_of(view, t) / 3600.0
    return [StopEarly(t.trial_id, "budget") for t in view.trials if t.trial_id in stop]


def _price_of(view: PlannerView, t: TrialView) -> float:
    o = view.offer(t.offer_key) if t.offer_key else None
    return o.price if o is not None else 0.0


def shed_for_budget(view: PlannerView) -> list[Action]:
    """Stop the running trials furthest from done while the others' projections overrun.

    Trials are admitted on projections; a trial slower than the speed it was admitted at (the
    job's mean) can push the running trials' projected spend past ``max_cost_usd``, and
    :func:`over_budget` would later stop every one of them, often a step from the end. Once
    steps are timed, while the projection is over the cap by more than the running trials
    burn in one tick (admission uses the same cap: a projection that merely drifts, a start-up
    re-measured, must not stop a trial just admitted) and more than one trial runs, the one
    with the most cost still to go (ties: the later trial) is stopped for the budget, so the
    rest can finish. A trial still starting up is not chosen (its start-up would be wasted),
    and nothing is shed while a running trial has a notice: its instance is leaving, and its
    projection with it.
    """
    cap = view.max_cost_usd
    if cap is None or not view.speed_measured:
        return []
    # a trial that has made its last step is winding down with its result: never shed
    running = [t for t in view.trials if finish_cost(view, t) > 0.0 and t.remaining_steps > 0]
    if any(t.notice_deadline is not None for t in running):
        return []
    burn = sum(_price_of(view, t) for t in running) / 3600.0 * (view.tick_s + 60.0)
    spend = projected_spend(view)
    out: list[Action] = []
    for t in sorted(running, key=lambda t: (-finish_cost(view, t), -t.number)):
        if spend <= cap + burn or len(running) - len(out) <= 1:
            break
        if _starting(view, t):
            continue
        out.append(StopEarly(t.trial_id, "budget"))
        spend -= finish_cost(view, t)
    return out


STARTING_BOUND = 3.0  # a life with no report yet is starting for up to this many start-ups


def _starting(view: PlannerView, t: TrialView) -> bool:
    """Still in its start-up: its instance has reported no step yet (review-aq AQ2: the job's
    *mean* start-up called a slower one over, shed with all of it spent), for up to
    :data:`STARTING_BOUND` start-ups; where that is unknown, launched less than one ago."""
    if t.launched_at is None:
        return False
    elapsed = view.now - t.launched_at
    if t.reported_on_life is False:
        return elapsed < STARTING_BOUND * view.restart_overhead_s
    return elapsed < view.restart_overhead_s


def finish_eta(view: PlannerView, t: TrialView) -> float:
    """When a running trial will have made all its steps if nothing interrupts it."""
    boot = 0.0
    if t.launched_at is not None:
        boot = max(t.launched_at + view.restart_overhead_s - view.now, 0.0)
    return view.now + boot + t.remaining_steps * t.seconds_on(current_offer(view, t))


def current_offer(view: PlannerView, t: TrialView) -> OfferView | None:
    """The offer a trial's instance was bought on (None: none, or no longer offered)."""
    return view.offer(t.offer_key) if t.offer_key else None


def past_deadline(view: PlannerView) -> list[Action]:
    """Stop what cannot finish once the deadline falls before the next decision.

    A running trial that will be done by the deadline keeps going, and so does one waiting for
    an instance that a launch now would finish in time; everything else still alive is stopped
    (its last metric is its result).
    """
    if view.deadline is None or view.now + view.tick_s + view.checkpoint_s < view.deadline:
        return []
    return [
        StopEarly(t.trial_id, "deadline")
        for t in view.trials
        if not t.phase.is_terminal() and not _can_finish(view, t, view.deadline)
    ]


def _can_finish(view: PlannerView, t: TrialView, deadline: float) -> bool:
    """A running trial that will be done by the deadline, or one waiting for an instance that
    a launch now would finish by then, on the fastest offer available for it (the deadline
    policies' Safety Net launches it on on-demand: stopping it first made a job with 93 s of
    slack miss its deadline; its last offer's speed stopped one a faster type would finish)."""
    if t.phase is Phase.RUNNING:
        return finish_eta(view, t) <= deadline
    if t.stopping:
        return False
    return view.now + view.restart_overhead_s + t.remaining_steps * fastest_s(view, t) <= deadline


def stop_invalid(view: PlannerView, event: object) -> list[Action]:
    """What an early-stopping policy does with a NaN/inf report (a Progress whose metric is
    None): stop the trial. A diverged trial cannot win, and each further step is paid for;
    ranking skips a None, so it would otherwise run to its end while sound trials are cut."""
    if not isinstance(event, Progress) or event.metric is not None:
        return []
    t = view.trial(event.trial_id)
    if t.phase is not Phase.RUNNING or event.step >= t.steps_total:
        return []
    return [StopEarly(t.trial_id, INVALID_METRIC, None)]


def guards(view: PlannerView) -> list[Action]:
    """The budget and deadline stops every policy applies before anything else."""
    return over_budget(view) or shed_for_budget(view) or past_deadline(view)
