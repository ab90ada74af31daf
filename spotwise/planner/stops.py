"""Asking trials to stop, and stopping the bills of those that are done with their instance: a
trial that a limit reaches while it stops for another reason, the instances of a pass's budget
stops (terminated together at the end of the pass) and those of trials whose result is in but
whose process lingers; and the end of a replayed market (:meth:`Stops._stop_at_trace_end`),
which stops a job as its deadline does, and refuses a resume that would only reach it again.

A mixin of :class:`~spotwise.planner.orchestrator.Orchestrator`, under
:class:`~spotwise.planner.actions.Actions` (which carries out the policy's stop actions
through it), kept apart so each file stays readable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spotwise.errors import ConfigError
from spotwise.planner.launch_retry import LaunchRetry
from spotwise.planner.policy import Action, StopEarly
from spotwise.planner.report import reported_final
from spotwise.planner.runstate import LIMITS, TrialRun, linger_limit_s, runs_again

log = logging.getLogger("spotwise.planner")
#: the stop reason of a trial the end of its replayed market stopped: a limit of the job, as
#: the budget and the deadline are (:data:`~spotwise.planner.runstate.LIMITS` names it)
TRACE_END = "trace_end"


@dataclass(frozen=True)
class TraceEnd:
    """A replayed job's market end, as its run met it: the reason said (warning, ``trace_end``
    event, the error of a job it left without a result), where the market ended, the trials
    it stopped with the checkpoint step this run started each from, and how many trials of
    this run had ended on their own before it (completed, failed, stopped by the policy)."""

    said: str
    end: float
    from_steps: dict[str, int]
    ended: int


def _span(seconds: float) -> str:
    """Market seconds as a person reads them: ``40 s``, ``9 min``, ``3.0 h``, ``46.2 days``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.1f} days"


def trace_end_text(end: float, started_at: float) -> str:
    """The one line that says why a replayed job stopped at its trace's end."""
    when = datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d %H:%M UTC")
    span = _span(max(end - started_at, 0.0))
    return (
        f"the replayed trace ends at {when} ({span} of market time after this run began): the "
        "market has no data after it, so the job stopped there as at a deadline (trials still "
        "running stopped, their instances ended, their last checkpoints kept); a job that does "
        "not fit before the end needs providers.0.replay.start earlier or fewer steps"
    )


def kept_progress(from_steps: Mapping[str, int], ended: int, trials: Iterable[TrialRun]) -> bool:
    """Whether a run that reached its trace's end kept something a resume would not redo: a
    trial of its own that ended (``ended`` before the end; or one the end stopped that then
    completed, failed or was stopped by the policy), or a trial the end stopped whose
    checkpoint passed the step the run started it from (``from_steps``). Without either, a
    resume replays the same market from the same checkpoints and ends the same way."""
    if ended > 0:
        return True
    for t in trials:
        began = from_steps.get(t.trial_id)
        if began is None:
            continue
        # ended for good: a trial a limit stopped first (the deadline, then the end) runs again
        on_its_own = not runs_again(t.state, t.stop_reason)
        if on_its_own or t.checkpoint_step > began:
            return True
    return False


def broken_command_failures(trials: Iterable[TrialRun]) -> set[str]:
    """The failed trials of this run that `spotwise resume` queues again as a broken command's
    (:func:`~spotwise.planner.resume_broken.command_killed`, in this run's terms): at least two
    trials of this run failed and none reported a step past 0 in it, and each crashed (an exit
    code) with no progress past where this run started it. They ended nothing a resume keeps."""
    trials = list(trials)
    failed = [t for t in trials if t.state == "failed" and not t.carried]
    if len(failed) < 2 or any(t.furthest > 0 for t in trials):
        return set()
    return {
        t.trial_id for t in failed if t.crashed and max(t.step, t.checkpoint_step) <= t.start_step
    }


class Stops(LaunchRetry):
    cancelled: bool
    started_at: float
    trace_end: TraceEnd | None  # where a replayed market ended this run (None: it did not)

    def _trial_dir(self, t: TrialRun) -> Path:
        raise NotImplementedError

    def _execute(self, action: Action, offers: list[Any], now: float) -> None:
        raise NotImplementedError

    def _stop_at_trace_end(self, end: float, now: float) -> None:
        """No market past the replayed trace's end: the job stops there as at its deadline,
        said once (warning, ``trace_end`` event). Every trial not ended is stopped early for
        :data:`TRACE_END` as the deadline stops one: a running trial's instance is terminated
        at the end of this pass (billed up to it, not on over a market with no data; its last
        checkpoint kept), a waiting one closed; no trial is created after it. The job then
        ends as a deadline leaves one (succeeded with a result, else failed with this reason),
        and `spotwise resume` runs the stopped trials again, from their checkpoints, on the
        market from ``replay.start`` again, unless this run kept nothing
        (:meth:`_refuse_resume_past_trace_end`)."""
        if self.trace_end is not None or self.cancelled:
            return
        said = trace_end_text(end, self.started_at)
        stopping = [t for t in self.trials if not t.phase.is_terminal()]
        requeued = broken_command_failures(self.trials)  # a resume runs them again
        ended = sum(
            1
            for t in self.trials
            if not t.carried
            and t.phase.is_terminal()
            and not runs_again(t.state, t.stop_reason)
            and t.trial_id not in requeued
        )
        from_steps = {t.trial_id: t.start_step for t in stopping}
        self.trace_end = TraceEnd(said, end, from_steps, ended)
        log.warning("%s: %s", self.job_id, said)
        self._event("trace_end", now, message=said, end=end, from_steps=from_steps, ended=ended)
        for t in stopping:
            self._execute(StopEarly(t.trial_id, TRACE_END), [], now)

    def _trace_end_error(self, state: str, error: str | None) -> str | None:
        """The error of a job that met its trace's end: one left without a result fails for
        it, as one the deadline leaves fails for the deadline (unless every trial failed, or
        one completed on a NaN: that error stands; a budget's stays first); one with a result
        succeeded, with no error (the summary's ``limits`` counts the trials the end stopped)."""
        te, trials = self.trace_end, self.trials
        if te is None or state != "failed" or any(t.state == "completed" for t in trials):
            return error
        if trials and all(t.state == "failed" for t in trials):
            return error
        other = {x for t in self.trials for x in t.limits_hit} - {TRACE_END}
        return f"{error}; {te.said}" if other and error else te.said

    def _refuse_resume_past_trace_end(self, trials: Iterable[TrialRun]) -> None:
        """Refuse (one line, nothing written) to resume a job whose last run reached its
        replayed trace's end keeping nothing (:func:`kept_progress` over ``trials``, the
        resume's reading of the store): the resumed run would replay the same market from the
        same checkpoints and stop at the same end again, each time billing its lives."""
        ends = self.store.events(self.job_id, kind="trace_end")
        resumes = self.store.events(self.job_id, kind="resumed")
        if not ends or (resumes and (resumes[-1].id or 0) > (ends[-1].id or 0)):
            return  # the last run did not end at the trace's end
        d = ends[-1].detail
        from_steps, ended, end = d.get("from_steps"), d.get("ended"), d.get("end")
        if not isinstance(from_steps, dict) or not isinstance(ended, int):
            return  # recorded before these were (the job was then cancelled at the end)
        if kept_progress(from_steps, ended, trials):
            return
        when = (
            datetime.fromtimestamp(end, UTC).strftime(" (%Y-%m-%d %H:%M UTC)")
            if isinstance(end, int | float)
            else ""
        )
        raise ConfigError(
            f"job {self.job_id} stopped at the end of its replayed trace{when} with no trial "
            "ended and no checkpoint past where that run started it: a resume replays the same "
            "market from providers.0.replay.start and would stop there again; run `spotwise "
            "tune` with providers.0.replay.start earlier or fewer steps"
        )

    def _also_stopped_by(self, t: TrialRun, action: StopEarly, now: float) -> None:
        """A limit (budget, deadline, trace end) reaching a trial already stopping for another
        reason: the first reason stays the trial's, and the limit is recorded too, once (an
        event; the summary's ``limits`` counts it)."""
        why = action.reason
        if why not in LIMITS or why in t.limits_hit:
            return
        t.also_stopped_by.append(why)
        self._event("stop_early", now, t, reason=why, already_stopping_for=t.stop_reason)

    def _stop_paying(self, t: TrialRun, action: StopEarly, now: float) -> None:
        """A trial stopped for a limit of the job (budget, deadline, trace end) is abandoned: its
        instance is terminated at the end of this decision pass (:meth:`_release_budget_stops`)
        rather than billed while the trial winds down (its result is its last metric), unless
        the provider is taking it anyway.

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
