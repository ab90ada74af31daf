"""Resuming a job that ended before its plan did (cancelled; failed or succeeded with trials
its limits (budget, deadline, a replayed trace's end) stopped or never made; a crash of its
orchestrator once `spotwise cancel` closed it): what its earlier run left in the store is read
back, checked, and turned into the orchestrator's starting state.

* Trials that ended (completed, stopped early, failed) stay as they ended: their results,
  costs and curves are the job's, and the search is told them again (one model fit), so the
  points it proposes next are informed by them.
* Trials the run left unfinished (cancelled, never closed, or stopped by the job's budget or
  deadline rather than judged by the policy) are queued again with their own id, parameters
  and checkpoint folder: the next launch resumes each from its checkpoint
  (``SPOTWISE_RESUME_STEP``); work after the checkpoint is lost, as after a revocation.
  So are the failed trials a broken command killed before it did anything (a run that the
  rule "two failures, no step reported" stopped; :mod:`spotwise.planner.resume_broken`):
  their failures say nothing of their points, which the search is not told as failures.
* New trials are created as usual until the spec's ``trials``.
* The job keeps its id, records and spend: the budget covers both runs. A deadline counts from
  the resume (the replay market's clock starts again too).
* An offer a lasting launch refusal blocked keeps its backoff (its next refusal doubles the
  last block) and, on a cloud, its block until it ends; a region whose quota refused a launch
  stays paused, on a cloud, until its pause ends (:mod:`spotwise.planner.lasting_refusals`).

Refused, with nothing written: a job that is not finished (still running, or its
orchestrator died and `spotwise cancel` has not closed it), one marked ended whose live
orchestrator has not written its end yet (a cancel's request it is still draining: no
``ended_at``, a fresh heartbeat), one asked to stop whose orchestrator never wrote its end
(``cancelled``, no ``ended_at``: `spotwise cancel [--force]` closes it first,
:func:`~spotwise.liveness.unclosed_text`), one whose records still hold an instance (it may still be
billed, or still be running a trial), one with nothing left to run,
one whose budget is spent, one whose command folder is gone. Only this module's
:meth:`ResumePlan.claim` writes, and only after the market accepted the spec.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotwise.errors import ConfigError, SpecError
from spotwise.liveness import alive_beat, unclosed_text
from spotwise.planner.lasting_refusals import LastingRefusals, read_lasting_refusals
from spotwise.planner.policy import INVALID_METRIC, Phase
from spotwise.planner.resume_broken import command_killed, endings
from spotwise.planner.runstate import (
    CHECKPOINT_SAVES_KEPT,
    LIMITS,
    WIND_DOWNS_KEPT,
    TrialRun,
    runs_again,
)
from spotwise.planner.startup_floor import unreported_before
from spotwise.spec import SEEDS, JobSpec, SearchSpec, load_stored_spec
from spotwise.states import JobState, TrialState

#: the totals a job row carries over to the orchestrator of its resumed run
TOTALS = ("cost_usd", "on_demand_cost_usd", "revocations", "migrations", "early_stopped")


@dataclass
class ResumePlan:
    job_id: str
    from_state: JobState  # the state the earlier run ended in
    ended_at: float | None  # when (the claim checks both: the job must be as it was read)
    spec: JobSpec  # as stored (with the budget or deadline the resume was given)
    spec_path: Path | None
    policy: str
    trials: list[TrialRun]  # by number: ended ones as they ended, the others queued again
    requeued: list[TrialRun]  # those queued again (from their checkpoints)
    ended: list[tuple[Mapping[str, Any], float | None]]  # finals and failures, told again
    totals: dict[str, float]
    stopped: list[tuple[Mapping[str, Any], float]] = field(default_factory=list)  # stops' values
    spec_changed: bool = False  # a new budget or deadline: stored with the job when claimed
    # offers' lasting-refusal backoffs and regions' quota pauses
    lasting: LastingRefusals = field(default_factory=LastingRefusals)

    @property
    def search_spec(self) -> SearchSpec:
        """The spec's search, seeded apart from the earlier run's: the same seed would propose
        the earlier run's first random points again."""
        seed = (self.spec.search.seed + len(self.trials)) % SEEDS
        return self.spec.search.model_copy(update={"seed": seed})

    def claim(
        self, store: Any, pid: int, host: str, now: float, pid_start: str | None = None
    ) -> None:
        """Take the job over from its finished state and queue its unfinished trials again, in
        one transaction, only if the job is still as it was read (two resumes of one job: one
        wins, the other is refused, even if the first has ended again meanwhile). ``pid_start``:
        when process ``pid`` started (a reused pid is not the job's orchestrator)."""
        fields: dict[str, Any] = {
            "state": JobState.PENDING,
            "ended_at": None,
            "error": None,
            "pid": pid,
            "host": host,
            "pid_start": pid_start,
            "early_stopped": int(self.totals["early_stopped"]),  # less the stops undone
        }
        if self.spec_changed:
            fields["spec_json"] = self.spec.model_dump_json()
        again = {"state": "pending", "ended_at": None}
        requeue = {t.trial_id: {**again, "step": t.step} for t in self.requeued}
        expected = {
            "state": self.from_state,
            "ended_at": self.ended_at,
            "cost_usd": self.totals["cost_usd"],
            "on_demand_cost_usd": self.totals["on_demand_cost_usd"],
        }
        # what the next resume reads to forget the stop reasons of the trials queued again
        event = {
            "kind": "resumed",
            "time": now,
            "detail": {
                "previous_state": self.from_state.value,
                "requeued": [t.trial_id for t in self.requeued],
                "spent_usd": self.totals["cost_usd"],
            },
        }
        if not store.claim_job(self.job_id, expected, fields, requeue, event):
            raise ConfigError(
                f"job {self.job_id} changed since it was read (another process resumed or "
                f"cancelled it): run `spotwise resume {self.job_id}` again once that has ended",
                hint=f"`spotwise status {self.job_id}` shows it",
            )


def plan_resume(
    store: Any,
    job: Any,
    *,
    max_cost_usd: float | None = None,
    deadline_hours: float | None = None,
) -> ResumePlan:
    """Read a finished job back from the store; raise (one line, naming the fix) where it
    cannot be resumed. Writes nothing. ``max_cost_usd``, ``deadline_hours``: the job's new
    budget (for both runs) or deadline (from the resume)."""
    state = JobState(job.state)
    if not state.is_terminal():
        raise ConfigError(f"job {job.id} is {state.value}: only a finished job can be resumed")
    if job.ended_at is None and (age := alive_beat(job)) is not None:
        # a cancel's request heard by a live orchestrator (here or on another machine), still
        # draining: past its last bill, before its end's write, a resume took the job over
        raise ConfigError(
            f"job {job.id} is {state.value} but its orchestrator is still closing it (heartbeat "
            f"{age:.0f} s old): wait until `spotwise status {job.id}` shows it ended, then resume"
        )
    if job.ended_at is None and state is JobState.CANCELLED:
        raise ConfigError(unclosed_text(job))
    held = store.list_instances(job.id, active_only=True)
    if held:
        ids = ", ".join(r.provider_instance_id or r.id for r in held)
        raise ConfigError(
            f"job {job.id} still holds {len(held)} instance(s) that may be billed or still "
            f"running its trials ({ids}): run `spotwise cancel {job.id}` to release them first"
        )
    spec = load_stored_spec(job.spec_json)
    new: dict[str, float] = {}
    for name, value, what in (
        ("max_cost_usd", max_cost_usd, "--max-cost must be a number of dollars"),
        ("deadline_hours", deadline_hours, "--deadline-hours must be a number of hours"),
    ):
        if value is not None:
            if not (math.isfinite(value) and value > 0):
                raise SpecError(f"{what} > 0, got {value}")
            new[name] = float(value)
    if new:
        spec = spec.model_copy(update={"budget": spec.budget.model_copy(update=new)})
    spec_path = Path(job.spec_path) if job.spec_path else None
    if spec_path is None and not (spec.workdir and Path(spec.workdir).is_absolute()):
        raise ConfigError(
            f"job {job.id} was not started from a spec file: the folder its command runs in "
            "is unknown, so it cannot be resumed"
        )
    folder = spec.base_dir(spec_path)
    if not folder.is_dir():
        raise ConfigError(
            f"job {job.id} runs its command in {folder}, which no longer exists: restore that "
            "folder to resume the job"
        )
    trials, ended, stopped, was_stopped = _read_trials(store, job.id, spec)
    requeued = [t for t in trials if t.phase is Phase.QUEUED]
    left = len(requeued) + max(spec.trials - len(trials), 0)
    if left == 0:
        counts: dict[str, int] = {}
        for t in trials:
            counts[t.state] = counts.get(t.state, 0) + 1
        how = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in sorted(counts.items()))
        raise ConfigError(
            f"job {job.id} has nothing left to run: its {len(trials)} trials ended ({how})"
        )
    cap = spec.budget.max_cost_usd
    if cap is not None and job.cost_usd >= cap:
        raise ConfigError(
            f"job {job.id} has spent ${job.cost_usd:.2f} of its budget (max_cost_usd {cap:g}): "
            "resume it with a larger --max-cost to run its other trials"
        )
    return ResumePlan(
        job_id=job.id,
        from_state=state,
        ended_at=job.ended_at,
        spec=spec,
        spec_path=spec_path,
        policy=job.policy,
        trials=trials,
        requeued=requeued,
        ended=ended,
        stopped=stopped,
        totals={
            **{k: float(getattr(job, k)) for k in TOTALS},
            # the policy's stops that stand (a limit's stop is undone: the trial runs again,
            # and may be stopped again), counted from the trials: a job recorded before the
            # count left out the limits' stops had counted them in its total
            "early_stopped": float(
                sum(
                    1
                    for t in trials
                    if t.trial_id in was_stopped
                    and t.phase is not Phase.QUEUED
                    and t.stop_reason not in LIMITS
                )
            ),
        },
        spec_changed=bool(new),
        lasting=read_lasting_refusals(store, job.id),
    )


def _read_trials(
    store: Any, job_id: str, spec: JobSpec
) -> tuple[
    list[TrialRun],
    list[tuple[Mapping[str, Any], float | None]],
    list[tuple[Mapping[str, Any], float]],
    set[str],
]:
    """The job's trials as the orchestrator holds them, what the search is told of those that
    ended (finals and failures; early stops' values apart: they are no finals), and the ids of
    those that had been stopped early."""
    launches: dict[str, list[Any]] = {}
    for r in store.list_instances(job_id):
        launches.setdefault(r.trial_id, []).append(r)
    stopped_for, crashed = endings(store, job_id)
    events = store.events(job_id)
    launched = {e.instance_id: e for e in events if e.kind == "launch"}
    rows = store.list_trials(job_id)
    observed = {row.id: store.observations(row.id) for row in rows}
    # failed before the command did anything (a broken command, mended since): run again
    killed = command_killed(events, rows, observed, crashed)
    trials, ended, stopped, was_stopped = [], [], [], set()
    for row in rows:
        if row.state is TrialState.STOPPED_EARLY:
            was_stopped.add(row.id)
        obs = observed[row.id]
        curve = {o.step: o.metric for o in obs}  # in the order recorded: the newest wins
        again = row.id in killed
        t = _trial(row, spec, curve, launches.get(row.id, []), stopped_for.get(row.id), again)
        t.crashed = row.id in crashed and not again
        _timing(t, obs, launched, {r.id: r.instance_type for r in launches.get(row.id, [])})
        t.unreported_life_s = unreported_before(row.id, launches.get(row.id, []), obs, events)
        trials.append(t)
        told = _told(row, t)
        if told is not None and t.state == "stopped_early" and told[1] is not None:
            stopped.append((told[0], told[1]))
        elif told is not None:
            ended.append(told)
    _measures(store, job_id, trials)
    return trials, ended, stopped, was_stopped


def _measures(store: Any, job_id: str, trials: list[TrialRun]) -> None:
    """The checkpoint saves and wind-downs the earlier runs measured (their
    ``checkpoint_saved`` and ``wind_down`` events), back in the trials' lists: the newest
    ``CHECKPOINT_SAVES_KEPT`` / ``WIND_DOWNS_KEPT`` of the job, which is all
    :func:`~spotwise.planner.runstate.checkpoint_seconds` and
    :func:`~spotwise.planner.runstate.wind_down_seconds` judge. Without them a resumed job
    planned on the defaults again: a 60 s wind-down let it admit trials past its cap.
    Their market times are the earlier runs' clocks, not this run's (a replay's starts again
    at its ``replay.start``), so they are ordered as recorded and placed before this run
    (times -n … -1): what this run measures is newer and pushes them out."""
    by_id = {t.trial_id: t for t in trials}
    for kind, kept in (("checkpoint_saved", CHECKPOINT_SAVES_KEPT), ("wind_down", WIND_DOWNS_KEPT)):
        found: list[tuple[TrialRun, float]] = []
        for e in store.events(job_id, kind=kind):  # in the order recorded
            seconds, t = e.detail.get("seconds"), by_id.get(e.trial_id or "")
            if t is None or isinstance(seconds, bool) or not isinstance(seconds, int | float):
                continue
            if math.isfinite(seconds) and seconds >= 0:
                found.append((t, float(seconds)))
        found = found[-kept:]
        for i, (t, seconds) in enumerate(found):
            mark = (float(i - len(found)), seconds)
            (t.checkpoint_saves if kind == "checkpoint_saved" else t.wind_downs).append(mark)


def stop_reasons(store: Any, job_id: str) -> dict[str, str]:
    """Why each trial stopped early stands stopped: the policy's name, ``budget``, ``deadline``
    or ``invalid metric`` (:func:`~spotwise.planner.resume_broken.endings`), for `spotwise
    trials`."""
    return endings(store, job_id)[0]


def _timing(
    t: TrialRun,
    obs: list[Any],
    launched: Mapping[str | None, Any],
    types: Mapping[str, str],
) -> None:
    """The trial's speed as the earlier run measured it (market seconds per step over its
    last life that reported twice; the start-up of that life, launch to first report), so a
    resumed run projects its cost and time from the start instead of assuming 60 s a step;
    and its speed on each instance type it ran on (its latest life there: ``types`` gives each
    life's, by launch id), which the planner compares offers by.
    Times of one life come from one run's market clock: their differences hold."""
    lives: dict[str | None, list[Any]] = {}
    for o in obs:
        if o.market_time is not None:
            lives.setdefault(o.instance_id, []).append(o)
    latest = True
    for launch_id, life in reversed(list(lives.items())):  # the latest life first
        first, last = life[0], max(life, key=lambda o: o.step)
        if last.step <= first.step:
            continue
        sps = (last.market_time - first.market_time) / (last.step - first.step)
        itype = types.get(launch_id or "")
        if itype is not None and sps > 0:
            t.step_s.setdefault(itype, sps)
        if latest:
            latest = False
            t.seconds_per_step = sps
            launch = launched.get(first.instance_id)
            if launch is not None:
                t.restart_overhead_s = max(first.market_time - launch.time, 0.0)
                t.restart_steps = max(first.step - int(launch.detail.get("resume_step", 0)), 0)


def _trial(
    row: Any,
    spec: JobSpec,
    curve: dict[int, float],
    launches: list[Any],
    stop_reason: str | None,
    killed: bool = False,
) -> TrialRun:
    """A trial of the earlier run as the orchestrator holds one: as it ended, or queued again
    from its checkpoint (unfinished, stopped by a limit of the job: not judged a loser; or
    ``killed``: failed before a broken command did anything, :mod:`.resume_broken`)."""
    stored = row.params  # JSON with sorted keys: shown in the spec's order, as the search's
    params = {n: stored[n] for n in spec.search_space if n in stored}
    t = TrialRun(row.id, row.number, params, spec.steps, spec.checkpoint.every)
    t.cost_usd, t.revocations, t.migrations = row.cost_usd, row.revocations, row.migrations
    t.checkpoint_step = row.checkpoint_step
    # each launch try used up an attempt number, whose files the trial's folder still holds
    t.attempt = len(launches) - 1
    t.lives_started = sum(1 for r in launches if r.launched_at is not None)
    state = TrialState(row.state)
    # furthest stays 0: what it reported before does not show that the command works now
    if not (killed or runs_again(state.value, stop_reason)):
        t.phase, t.state, t.step, t.curve = Phase.DONE, state.value, row.step, curve
        t.carried = True  # ended before: not this run's failure (a mended command runs on)
        t.stop_reason = stop_reason if state is TrialState.STOPPED_EARLY else None
        t.start_step = row.step  # its steps are the earlier run's work
        t.predicted_final = row.predicted_final
        t.metric_invalid = row.metric is None and row.step > 0  # its last report was NaN/inf
        return t
    t.phase, t.state, t.step = Phase.QUEUED, "pending", t.checkpoint_step
    t.start_step = t.step
    t.curve = {k: v for k, v in curve.items() if k <= t.step}  # work after it is lost
    t.reported = curve  # what the earlier run's policy judged it on
    t.retrying = t.lives_started > 0  # its next life continues it: not a migration
    return t


def _told(row: Any, t: TrialRun) -> tuple[Mapping[str, Any], float | None] | None:
    """What the orchestrator told the search when the trial ended (as near as the store can
    tell): its final metric; an early-stopped trial's prediction or last value; None (the
    worst value) for a failure. None: nothing (a trial queued again is pending instead)."""
    if t.phase is not Phase.DONE:
        return None
    if t.state == "completed":
        return t.params, row.final_metric  # a NaN end was stored as no final: a failure
    if t.state == "stopped_early":
        guess = row.predicted_final if row.predicted_final is not None else row.metric
        if t.stop_reason == INVALID_METRIC or (guess is None and t.metric_invalid):
            return t.params, None  # diverged: its last finite value flatters it
        return None if guess is None else (t.params, guess)
    # failed: a trial whose own process crashed is a bad point; one the cloud failed (its
    # launches refused, its instance gone without an exit code) says nothing about its point
    return (t.params, None) if t.crashed else None
