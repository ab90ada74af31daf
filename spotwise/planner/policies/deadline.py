"""Deadline policies of "Can't Be Late" (Wu et al., NSDI 2024), implemented from the paper.

A job's state is idle, on spot or on on-demand. With ``C(t)`` the remaining computation,
``R(t)`` the time left to the deadline and ``d`` the changeover delay (``restart_overhead_s``):

* ``greedy`` (§3.4): stay on spot until it is preempted (Exploitation Rule); wait while no spot
  is available; when idle and ``R(t) < C(t) + 2d``, move to on-demand and stay there to the end
  (Safety Net Rule; with decisions a tick apart, see :attr:`JobClock.safety_net`).
* ``uniform-progress`` (§5.2): with expected progress ``ep(t) = t · C(0) / R(0)`` and current
  progress ``cp(t)``: (1) idle and ``cp < ep`` → on-demand; (2) take spot whenever it is
  available, even behind, and stay on it until preempted; (3) hysteresis: on on-demand, stay
  until ``cp(t) ≥ ep(t + 2d)``; plus the Safety Net Rule.

Both are stateless: "stay on on-demand until the end" follows from the Safety Net condition,
which only gets tighter once it holds. For a tuning job with several trials the quantities are
per slot: the remaining work of every unfinished trial (and of the trials not yet created, at
full length) divided by the slots it can use (``parallel``, or fewer when fewer trials are
left: one trial cannot use the other slots), and never less than the longest single trial's.
On a market of several instance types, each trial's work is timed at its speed on the
fastest on-demand type (:func:`~.finish.fallback_seconds`: the last moment an on-demand launch
still finishes in time), not on the type it last ran on; a spot type slower than that is taken
only where the clock, with the trial's work at that type's speed, stays out of the Safety Net
(:func:`spot_fits`): an instance that cannot finish in time, or whose revocation near its end
would leave no time for the changeover, is not the spot the rules assume. A trial running on
on-demand is moved to such a type only where it still fits after the changeover the move
causes (:func:`leaves_for_spot`: its checkpoint, the wait for the next decision and the
relaunch's start-up): judged on the slack at the decision alone, it came at the margin's edge;
one decision later, the trial waited for a spot that no longer fitted and went back to the
same on-demand type (review-av F2).
Both place by the list price per step as ``spot-greedy`` does (the trial's speed on each
offer's instance type); on-demand, they take the offers that finish the trial's remaining steps
by the deadline first (:func:`by_deadline`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spotwise.planner.policies._common import (
    checkpoint_on_notice,
    guards,
    place,
    price_per_step,
)
from spotwise.planner.policies.finish import by_deadline as by_deadline
from spotwise.planner.policies.finish import fallback_seconds
from spotwise.planner.policies.finish import finishes_in_time as finishes_in_time
from spotwise.planner.policy import (
    Action,
    Checkpoint,
    Event,
    OfferView,
    Phase,
    PlannerView,
    TrialView,
    register_policy,
)


@dataclass(frozen=True)
class JobClock:
    """Progress of a job against its deadline, in market seconds per slot."""

    remaining: float  # C(t)
    left: float  # R(t)
    done: float  # cp(t)
    total: float  # C(0) = done + remaining
    window: float  # R(0): deadline − start
    elapsed: float  # t − start
    d: float  # changeover delay
    tick: float = 0.0  # longest market time until the next decision (PlannerView.tick_s)

    def expected(self, at_elapsed: float) -> float:
        """ep(t) = t · C(0) / R(0)."""
        return at_elapsed * self.total / self.window if self.window > 0 else self.total

    @property
    def behind(self) -> bool:
        return self.done < self.expected(self.elapsed)

    @property
    def safety_net_margin(self) -> float:
        """The slack ``R(t) − C(t)`` below which the job goes to on-demand: ``d + max(d, tick)``.

        The paper decides continuously and uses ``2d``. Here decisions are up to ``tick`` apart,
        and the slack falls by up to ``tick`` (idle, or booting) before the next one; what must
        be left at any decision is ``d``, the changeover to on-demand. A job whose slack is at
        least the margin can therefore (a) wait one tick and still have ``d`` left, and (b)
        launch a spot instance, lose ``d`` to its start-up and still have ``d`` left for the
        changeover if it is preempted. Slack falls only while the job is idle or starting up
        (a decision on a booting instance already sees the part of the boot that has passed),
        so every decision finds at least ``d`` of slack, and a job that starts with ``d`` or
        more never misses its deadline. With ``tick ≤ d`` this is the paper's ``2d``.
        """
        return self.d + max(self.d, self.tick)

    @property
    def safety_net(self) -> bool:
        """Safety Net Rule: ``R(t) < C(t) + d + max(d, tick)`` (the paper's ``2d`` for a
        continuous decision)."""
        return self.left < self.remaining + self.safety_net_margin


def job_clock(
    view: PlannerView, expected_fraction: float = 1.0, on: tuple[str, float] | None = None
) -> JobClock | None:
    """The job's C, R, cp for a deadline; None without one. A live trial's steps count at its
    speed on the fastest on-demand type (:func:`~.finish.fallback_seconds`), done and
    remaining alike (cp/C(0) stays its share of the steps); ``on``: (trial id, seconds per
    step), that trial's at this speed instead (a spot type chosen for it: :func:`spot_fits`)."""
    if view.deadline is None:
        return None
    speed = {
        t.trial_id: t.seconds_per_step if t.phase.is_terminal() else fallback_seconds(view, t)
        for t in view.trials
    }
    if on is not None:
        speed[on[0]] = on[1]
    sps = sum(speed.values()) / len(speed) if speed else 60.0
    remaining = done = longest = 0.0
    steps_total = view.trials[0].steps_total if view.trials else 1
    live = 0
    for t in view.trials:
        done += (t.step - t.start_step) * speed[t.trial_id]  # this run's: its window's
        if not t.phase.is_terminal():
            live += 1
            remaining += t.remaining_steps * speed[t.trial_id]
            longest = max(longest, t.remaining_steps * speed[t.trial_id])
    unseen = max(view.trials_total - len(view.trials), 0)
    if unseen:
        remaining += unseen * steps_total * sps * expected_fraction
        longest = max(longest, steps_total * sps * expected_fraction)
    p = max(view.parallel, 1)
    # per slot: the remaining work over the slots it can use (fewer trials than slots use
    # fewer), and never less than the longest trial's, which one slot runs alone (review-aq AQ5)
    remaining = max(remaining / max(min(p, live + unseen), 1), longest)
    done = done / p
    return JobClock(
        remaining=remaining,
        left=view.deadline - view.now,
        done=done,
        total=done + remaining,
        window=view.deadline - view.started_at,
        elapsed=view.now - view.started_at,
        d=view.restart_overhead_s,
        tick=max(view.tick_s, 0.0),
    )


def spot_fits(
    view: PlannerView,
    t: TrialView,
    o: OfferView,
    expected_fraction: float = 1.0,
    lose_s: float = 0.0,
) -> bool:
    """Whether spot offer ``o`` keeps the job out of the Safety Net with ``t`` on it: a type at
    least as fast as ``t``'s on-demand fallback does (the clock already holds the margin), a
    slower one only where the clock with ``t``'s work at ``o``'s speed still does, with
    ``lose_s`` market seconds fewer left (a move's changeover: :func:`leaves_for_spot`). A
    slower spot run to its end eats the slack the changeover needs (revoked near its end, the
    on-demand relaunch comes too late), and one that cannot finish by the deadline buys no
    final; with no on-demand offer available there is nothing to keep the slack for."""
    sps = t.seconds_on(o)
    if view.deadline is None or sps <= fallback_seconds(view, t):
        return True
    if not any(x.available and not x.is_spot for x in view.offers):
        return True
    clock = job_clock(view, expected_fraction, on=(t.trial_id, sps))
    return clock is None or clock.left - lose_s >= clock.remaining + clock.safety_net_margin


def changeover_s(view: PlannerView) -> float:
    """Market seconds a move off a running instance can cost before its relaunch has booted:
    the checkpoint write, up to a decision interval until the trial, then waiting, is placed
    again, and the relaunch's start-up."""
    return view.checkpoint_s + max(view.tick_s, 0.0) + view.restart_overhead_s


def leaves_for_spot(
    view: PlannerView, t: TrialView, spots: list[OfferView], expected_fraction: float = 1.0
) -> bool:
    """Whether ``t``, running on on-demand, may be checkpointed to move to one of ``spots``: one
    fits (:func:`spot_fits`) with the move's changeover (:func:`changeover_s`) already spent.
    The relaunch the move causes is judged by :func:`spot_fits` at the next decision; a move
    judged on the slack of now was made at the margin's edge, the relaunch found the spot no
    longer fitting, the trial waited and took the same on-demand type again, and did it again
    on the way to the deadline (review-av F2: three on-demand launches, each with its start-up
    and minimum, for 40 steps due in 3600 s). A type as fast as the fallback always fits, so on
    one instance type the move is decided as before."""
    lose = changeover_s(view)
    return any(spot_fits(view, t, o, expected_fraction, lose) for o in spots)


def launch_all(
    view: PlannerView,
    offers: list[OfferView],
    suits: Callable[[TrialView, OfferView], bool] | None = None,
) -> list[Action]:
    """Every trial that needs an instance on its offer among ``offers`` (those that ``suits``
    it), cheapest per step (on on-demand: those finishing by the deadline first), as far as the
    budget allows; a trial that could not make a step before the deadline is stopped:
    ``place`` over that pool."""
    keys = {o.key for o in offers}
    return place(view, price_per_step, markets=lambda o: o.key in keys, suits=suits)


def _fits(view: PlannerView) -> Callable[[TrialView, OfferView], bool]:
    return lambda t, o: spot_fits(view, t, o)


def _pool(view: PlannerView, spot: bool) -> list[OfferView]:
    return [o for o in view.offers if o.available and o.is_spot == spot]


@register_policy("greedy")
class Greedy:
    """Can't Be Late's greedy: spot when available, idle otherwise, on-demand at the last moment."""

    name = "greedy"

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        stop = guards(view)
        if stop:
            return stop
        clock = job_clock(view)
        actions = checkpoint_on_notice(view, event)
        if clock is not None and clock.safety_net:
            return [*actions, *launch_all(view, _pool(view, spot=False))]
        return [*actions, *launch_all(view, _pool(view, spot=True), _fits(view))]


@register_policy("uniform-progress")
class UniformProgress:
    """Can't Be Late's Uniform Progress with hysteresis and the Safety Net Rule."""

    name = "uniform-progress"

    def decide(self, view: PlannerView, event: Event) -> list[Action]:
        stop = guards(view)
        if stop:
            return stop
        clock = job_clock(view)
        actions = checkpoint_on_notice(view, event)
        spot, od = _pool(view, spot=True), _pool(view, spot=False)
        if clock is None:  # no deadline: plain spot placement by price
            return [*actions, *place(view, price_per_step, markets=lambda o: o.is_spot)]
        if spot and not clock.safety_net:
            fits = _fits(view)
            # hysteresis: leave on-demand only once ahead of ep(t + 2d), for a spot that fits
            # after the changeover the move causes
            if clock.done >= clock.expected(clock.elapsed + 2.0 * clock.d):
                actions += [
                    Checkpoint(t.trial_id, "uniform-progress: back to spot")
                    for t in view.trials
                    if t.phase is Phase.RUNNING
                    and not t.stopping
                    and _on_demand(view, t.offer_key)
                    and leaves_for_spot(view, t, spot)
                ]

            def suits(t: TrialView, o: OfferView) -> bool:  # behind, no spot fits: on-demand
                return (
                    fits(t, o) if o.is_spot else clock.behind and not any(fits(t, s) for s in spot)
                )

            return [*actions, *launch_all(view, spot + od, suits)]
        if clock.safety_net or clock.behind:
            return [*actions, *launch_all(view, od)]
        return actions


def _on_demand(view: PlannerView, key: str | None) -> bool:
    o = view.offer(key) if key else None
    return o is not None and not o.is_spot
