"""Asking trials to stop, and stopping the bills of those that are done with their instance: a
trial that a limit reaches while it stops for another reason, the instances of a pass's budget
stops (terminated together at the end of the pass) and those of trials whose result is in but
whose process lingers.

A mixin of :class:`~spotwise.planner.orchestrator.Orchestrator`, under
:class:`~spotwise.planner.actions.Actions` (which carries out the policy's stop actions
through it), kept apart so each file stays readable.
"""

from __future__ import annotations

import time
from pathlib import Path

from spotwise.planner.launch_retry import LaunchRetry
from spotwise.planner.policy import StopEarly
from spotwise.planner.report import reported_final
from spotwise.planner.runstate import LIMITS, TrialRun, linger_limit_s


class Stops(LaunchRetry):
    def _trial_dir(self, t: TrialRun) -> Path:
        raise NotImplementedError

    def _also_stopped_by(self, t: TrialRun, action: StopEarly, now: float) -> None:
        """A limit (budget, deadline) reaching a trial already stopping for another reason: the
        first reason stays the trial's, and the limit is recorded too, once (an event; the
        summary's ``limits`` counts it)."""
        why = action.reason
        if why not in LIMITS or why in t.limits_hit:
            return
        t.also_stopped_by.append(why)
        self._event("stop_early", now, t, reason=why, already_stopping_for=t.stop_reason)

    def _stop_paying(self, t: TrialRun, action: StopEarly, now: float) -> None:
        """A trial stopped for a limit of the job (budget, deadline) is abandoned: its instance
        is terminated at the end of this decision pass (:meth:`_release_budget_stops`) rather
        than billed while the trial winds down (its result is its last metric), unless the
        provider is taking it anyway.

        A deadline stop too (review-aq AQ6): asked to leave at its next step boundary, a trial
        still starting up or in a long step ran on, billed, past the deadline (two on-demand
        lives $6.2 past it, for one step each that counted for nothing). No checkpoint is
        waited for: the one it last wrote stays for `spotwise resume` (which runs a trial
        stopped by a limit again), and at most the steps since it are lost, where waiting for
        the next boundary bills an unbounded step (or the rest of a start-up) past the deadline.
        """
        if action.reason in LIMITS and t.life is not None and not t.life.exited:
            self.budget_stops.append((t, t.life))

    def _release_budget_stops(self, now: float) -> None:
        """Terminate the instances of this pass's budget (and deadline) stops in one provider
        call.

        One call each made every stop wait for the ones before it (the local provider waits a
        kill grace per call, minutes of a fast replayed clock; a cloud API has its own round
        trip), while the instances still running were billed: four trials stopped by a $4
        budget cost $4.9 to $5.6. Each life is billed up to the request
        (:meth:`~spotwise.planner.ledger.Ledger._release_all`).

        A noticed instance whose release is not cheaper than its provider taking it (AWS: a
        spot instance it interrupts within its first hour is free) is left to the provider,
        as when its trial leaves on the notice: it is billed when its end is reported."""
        stops, self.budget_stops = self.budget_stops, []
        live = [
            (t, life)
            for t, life in stops
            if not life.exited
            and t.life is life
            and (life.notice_deadline is None or self._release_is_cheaper(life, now))
        ]
        self._release_all(live, now, "the instance of a budget stop")

    def _release_lingering(self, now: float, default_s: float) -> None:
        """Terminate the instances of trials whose result is in (their last step reported)
        and which still run :func:`~spotwise.planner.runstate.linger_limit_s` after their
        `done`: a stuck thread after it kept a life billed, past the budget, until the market
        took it (review-ad F3). Nothing is lost (the trial completes with its result and its
        last checkpoint); a life under a notice is left to its provider when that is cheaper."""
        limit = linger_limit_s(self.trials, default_s, self.backend.speedup)
        late = [
            (t, t.life)
            for t in self.trials
            if t.life is not None
            and not t.life.exited
            and not t.life.release_asked
            and t.life.finished_at is not None
            and now - t.life.finished_at > limit
            and reported_final(t)
            and (t.life.notice_deadline is None or self._release_is_cheaper(t.life, now))
        ]
        for t, life in late:
            if not life.lingered:
                life.lingered = True
                ran = now - (life.finished_at or now)
                self._event("lingered", now, t, seconds_after_done=ran, limit_s=limit)
        self._release_all(late, now, "the instance of a finished trial still running")

    def _request_stop(self, t: TrialRun, reason: str) -> None:
        assert t.life is not None
        if t.stopping is not None and reason == "migrate":
            return
        t.stopping = reason
        t.life.stop_wall = time.monotonic()
        stop = self._trial_dir(t) / f"stop-{t.life.attempt}"
        stop.touch()
