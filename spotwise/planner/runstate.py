"""The orchestrator's mutable bookkeeping of trials and instance lives, the frozen views it
hands to the policy, and a trial attempt's file contract (its environment, its control file).
The only I/O here is :func:`write_control`."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotwise.planner.policy import OfferView, Phase, PlannerView, TrialView
from spotwise.planner.signals import on_signals as on_signals  # importable from here too
from spotwise.planner.speeds import step_seconds
from spotwise.planner.startup_floor import note_unreported_life as note_unreported_life
from spotwise.planner.startup_floor import startup_floor_s
from spotwise.providers.base import Offer
from spotwise.providers.billing import BillingRule

LIMITS = ("budget", "deadline", "trace_end")  # the job's limits, not a policy's (planner.stops)
CHECKPOINT_SAVES_KEPT = 5  # a job's newest timed saves that its checkpoint_s is judged on
WIND_DOWNS_KEPT = 5  # a job's newest measured wind-downs that its wind_down_s is judged on
# the wind-down planned until one is measured: market seconds, and wall seconds at the market's
# speedup (a replay's: the trial's exit after `done`, a fraction of a wall second, is minutes)
WIND_DOWN_S, WIND_DOWN_WALL_S = 60.0, 1.0
# a finished trial still running this many wind-downs past its last step is hung (a stuck
# worker thread after `done`): its instance is terminated (:func:`linger_limit_s`)
LINGER_FACTOR, LINGER_MIN_WALL_S = 3.0, 5.0


def runs_again(state: str, stop_reason: str | None) -> bool:
    """Whether `spotwise resume` runs a trial of the earlier run again (from its checkpoint):
    one left unfinished, or stopped first by a limit of the job rather than judged by the
    policy. Completed, failed and policy-stopped trials keep their end."""
    if state == "stopped_early":
        return stop_reason in LIMITS
    return state not in ("completed", "failed")


@dataclass
class Life:
    """One instance life of a trial: from launch to the instance's end."""

    launch_id: str
    instance_id: str
    offer: Offer
    launched_at: float
    start_step: int  # the checkpoint step it resumed from
    attempt: int
    notice_deadline: float | None = None
    rebalanced: bool = False  # AWS rebalance recommendation: elevated risk, no deadline
    exited: bool = False  # the trial process left this instance
    max_step: int = 0
    first_report_at: float | None = None
    first_report_step: int = 0
    stop_wall: float | None = None  # wall time a stop was requested (for the exit timeout)
    release_failures: int = 0  # terminate calls the provider refused (retried, then reported)
    release_retry_wall: float = 0.0  # wall time before which no terminate is retried
    release_asked: bool = False  # a terminate was accepted: never asked again
    done_at: float | None = None  # market time its trial's last step was seen on it
    finished_at: float | None = None  # market time its trial's `done` was seen (then teardown)
    lingered: bool = False  # terminated for running on after `done` (linger_limit_s)
    heard: bool = False  # its trial (or agent) said something: not silent (planner.no_word)
    said_done_step: int | None = None  # the furthest step its trial's `done` said (resumed_end)


@dataclass
class TrialRun:
    trial_id: str
    number: int
    params: dict[str, Any]
    steps_total: int
    checkpoint_every: int
    phase: Phase = Phase.QUEUED
    state: str = "pending"  # store TrialState value
    step: int = 0
    curve: dict[int, float] = field(default_factory=dict)
    checkpoint_step: int = 0
    checkpoint_uri: str | None = None
    attempt: int = -1  # the last attempt number used (every launch try uses up one)
    lives_started: int = 0  # successful launches: a later one is a migration (or a retry)
    stop_reason: str | None = None  # why a policy stopped it early ("budget", "deadline", ...)
    # limits that reached it while it was already stopping for another reason (the first
    # reason stays its stop_reason): the budget guard and the summary's limits count them too
    also_stopped_by: list[str] = field(default_factory=list)
    last_error: str | None = None  # its latest failure (a refused launch, a crash), for the user
    crashed: bool = False  # its own process failed (not the cloud): its point is a bad one
    unreported: bool = False  # it failed for never reporting its metric at its last step
    invalid_metric: bool = False  # it reported a NaN/inf metric (an event says so, once)
    metric_invalid: bool = False  # its latest report was NaN/inf
    furthest: int = 0  # the furthest step it reported in this run (kept across relaunches)
    carried: bool = False  # it ended in an earlier run of the job (`spotwise resume`)
    start_step: int = 0  # its step when this run began (a resumed job's earlier work)
    reported: dict[int, float] = field(default_factory=dict)  # a requeued trial's earlier run
    life: Life | None = None
    cost_usd: float = 0.0
    on_demand_cost_usd: float = 0.0
    revocations: int = 0
    migrations: int = 0
    failures: int = 0
    retrying: bool = False  # the next launch retries a crash: not a migration
    stopping: str | None = None  # reason the trial was asked to leave its instance
    predicted_final: float | None = None
    seconds_per_step: float | None = None  # market seconds per step, observed
    # instance type → its seconds per step there (its latest life on that type that reported
    # twice): the throughput model's observations (:mod:`spotwise.planner.speeds`)
    step_s: dict[str, float] = field(default_factory=dict)
    restart_overhead_s: float | None = None  # launch → first report, its steps included
    restart_steps: int = 0  # the steps that first report covered (timed into the overhead)
    # market seconds of its longest life taken or stopped before its first report: its
    # start-up was longer (a censored observation, :func:`startup_floor_s`)
    unreported_life_s: float = 0.0
    # its newest timed checkpoint saves: (market time read, market seconds the save took)
    checkpoint_saves: list[tuple[float, float]] = field(default_factory=list)
    # its newest lives' wind-downs: (market time billed to, market seconds past its last step)
    wind_downs: list[tuple[float, float]] = field(default_factory=list)

    @property
    def final_metric(self) -> float | None:
        return self.curve.get(self.steps_total)

    @property
    def last_metric(self) -> float | None:
        return self.curve[max(self.curve)] if self.curve else None

    @property
    def limits_hit(self) -> tuple[str, ...]:
        """The limits (:data:`LIMITS`) that stopped it, first or while it was already stopping."""
        return tuple(x for x in LIMITS if x == self.stop_reason or x in self.also_stopped_by)


def trial_view(
    t: TrialRun, default_sps: float, step_seconds: tuple[tuple[str, float], ...] = ()
) -> TrialView:
    life = t.life
    return TrialView(
        trial_id=t.trial_id,
        number=t.number,
        phase=t.phase,
        step=t.step,
        steps_total=t.steps_total,
        curve=tuple(sorted(t.curve.items())),
        checkpoint_step=t.checkpoint_step,
        checkpoint_every=t.checkpoint_every,
        instance_id=life.instance_id if life else None,
        offer_key=life.offer.key if life else None,
        launched_at=life.launched_at if life else None,
        notice_deadline=life.notice_deadline if life else None,
        seconds_per_step=t.seconds_per_step or default_sps,
        cost_usd=t.cost_usd,
        revocations=t.revocations,
        stopping=t.stopping is not None,
        params=dict(t.params),
        start_step=t.start_step,
        reported=tuple(sorted(t.reported.items())),
        step_seconds=step_seconds,
        done_at=life.done_at if life else None,
        reported_on_life=(life.first_report_at is not None) if life else None,
    )


def build_view(
    now: float,
    offers: list[Offer],
    risk: dict[str, float],
    trials: list[TrialRun],
    *,
    direction: str,
    parallel: int,
    trials_total: int,
    spent_usd: float,
    max_cost_usd: float | None,
    started_at: float,
    deadline: float | None,
    rules: Mapping[str, BillingRule],
    tick_s: float = 60.0,
    checkpoint_every_max: int | None = None,
    wind_down_default_s: float = WIND_DOWN_S,
    no_word_s: float | None = None,
) -> PlannerView:
    """The policy's view; ``rules``: the billing rule of each provider, by ``Offer.provider``
    (each offer carries its own provider's notice lead, refund window and minimum);
    ``wind_down_default_s``: the wind-down planned until one is measured
    (:func:`wind_down_seconds`); ``no_word_s``: the job's "no word" limit
    (:mod:`~spotwise.planner.no_word`), the most a silent life counts in the start-up floor."""
    observed = [t.seconds_per_step for t in trials if t.seconds_per_step]
    default_sps = sum(observed) / len(observed) if observed else 60.0
    # each live trial's speed on each instance type offered (a finished one needs none)
    live = [t.trial_id for t in trials if not t.phase.is_terminal()]
    on_types = step_seconds({t.trial_id: t.step_s for t in trials}, offers, live, default_sps)
    overheads = [
        startup_s(t, t.seconds_per_step or default_sps if observed else None)
        for t in trials
        if t.restart_overhead_s is not None
    ]
    measured_s = checkpoint_seconds(trials)  # None: none timed yet, the view's default stands
    wound_s = wind_down_seconds(trials)  # None: no life ended after its last step yet
    return PlannerView(
        now=now,
        offers=tuple(
            OfferView(
                o,
                risk.get(o.key, 0.0),
                notice_lead_s=rules[o.provider].notice_lead_s,
                free_if_revoked_within_s=rules[o.provider].free_if_revoked_within_s,
                minimum_s=rules[o.provider].minimum_s,
            )
            for o in offers
        ),
        trials=tuple(trial_view(t, default_sps, on_types.get(t.trial_id, ())) for t in trials),
        direction=direction,
        parallel=parallel,
        trials_total=trials_total,
        spent_usd=spent_usd,
        max_cost_usd=max_cost_usd,
        started_at=started_at,
        deadline=deadline,
        restart_overhead_s=max(
            sum(overheads) / len(overheads) if overheads else 60.0,
            startup_floor_s(trials, now, default_sps if observed else None, no_word_s),
        ),
        notice_lead_s=min(r.notice_lead_s for r in rules.values()),
        free_if_revoked_within_s=min(r.free_if_revoked_within_s for r in rules.values()),
        tick_s=tick_s,
        checkpoint_every_max=checkpoint_every_max,
        speed_measured=speed_measured(trials),
        checkpoint_s=PlannerView.checkpoint_s if measured_s is None else measured_s,
        wind_down_s=wind_down_default_s if wound_s is None else wound_s,
    )


def startup_s(t: TrialRun, seconds_per_step: float | None) -> float:
    """A trial's measured start-up (launch to its first step), without the steps its first
    report covered: they are projected at ``seconds_per_step`` already, and counting them
    twice made every projection a step (or a reporting interval) too dear. Unknown speed:
    the whole interval."""
    raw = t.restart_overhead_s or 0.0
    if seconds_per_step is None:
        return raw
    return max(raw - t.restart_steps * seconds_per_step, 0.0)


def note_checkpoint_save(t: TrialRun, seconds: object, speedup: float, now: float) -> float | None:
    """Keep a ``checkpoint`` event's ``seconds`` (wall seconds the save took, see
    :mod:`spotwise.sdk`) as market seconds: the market clock runs ``speedup`` times the wall
    clock (a replay's; 1 on a cloud), as it does for every duration the orchestrator times.
    Anything but a finite number >= 0 (an older SDK's event has none) is ignored. Returns the
    market seconds kept (None: none), which the caller records for `spotwise resume`."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    market_s = float(seconds) * speedup
    if not math.isfinite(market_s) or market_s < 0:
        return None
    t.checkpoint_saves.append((now, market_s))
    del t.checkpoint_saves[:-CHECKPOINT_SAVES_KEPT]
    return market_s


def checkpoint_seconds(trials: list[TrialRun]) -> float | None:
    """The market seconds a checkpoint is planned to take: the slowest of the job's newest
    ``CHECKPOINT_SAVES_KEPT`` timed saves (any trial's); None before one was timed.

    The slowest, not the mean: a save that does not fit in an interruption notice loses every
    step since the last checkpoint, so underrating it costs far more than overrating it (the
    policy only checkpoints a little more often). The saves also vary with the trial (a
    larger model's state) and the store (a slow or throttled upload), and the view has one
    figure for them all. Only the newest few count, so one slow upload long ago is forgotten."""
    saves = sorted(s for t in trials for s in t.checkpoint_saves)[-CHECKPOINT_SAVES_KEPT:]
    return max(s for _, s in saves) if saves else None


def note_report(t: TrialRun, life: Life, step: int, now: float) -> None:
    """Time a report of ``step`` seen at market time ``now`` on ``life``: the first one times
    the trial's start-up, a later one its seconds per step (on the life's instance type); the
    first one at its last step starts the life's wind-down (:func:`note_wind_down`)."""
    if life.first_report_at is None:
        life.first_report_at, life.first_report_step = now, step
        t.restart_overhead_s = now - life.launched_at
        t.restart_steps = max(step - life.start_step, 0)
    elif step > life.first_report_step:
        t.seconds_per_step = (now - life.first_report_at) / (step - life.first_report_step)
        t.step_s[life.offer.instance_type] = t.seconds_per_step
    life.max_step = max(life.max_step, step)
    if step >= t.steps_total and life.done_at is None:
        life.done_at = now


def note_wind_down(t: TrialRun, life: Life, ended_at: float) -> float | None:
    """Keep the wind-down of a life billed to ``ended_at`` that ended because its trial made
    its last step (completed, or stopped after it): market seconds from that step seen
    (``done_at``) to the end it was billed to. A life under a notice ended when the market
    took it or we released it, not when its trial left: not kept (the caller leaves out a
    revoked life, and one released on a notice, too). Returns the seconds kept (None: none)."""
    if life.done_at is None or life.notice_deadline is not None or life.lingered:
        return None  # a hung one ended by the limit: its length is the limit's, not a wind-down
    wound = max(ended_at - life.done_at, 0.0)
    t.wind_downs.append((ended_at, wound))
    del t.wind_downs[:-WIND_DOWNS_KEPT]
    return wound


def wind_down_seconds(trials: list[TrialRun]) -> float | None:
    """The market seconds a life is planned to be billed past its trial's last step: the
    slowest of the job's newest ``WIND_DOWNS_KEPT`` measured wind-downs (any trial's; the
    slowest, as for :func:`checkpoint_seconds`: an underrated one lets the budget be
    exceeded); None before one was measured."""
    ends = sorted(w for t in trials for w in t.wind_downs)[-WIND_DOWNS_KEPT:]
    return max(s for _, s in ends) if ends else None


def linger_limit_s(trials: list[TrialRun], default_s: float, speedup: float) -> float:
    """How long past its `done` (seen) a trial's life may run before the orchestrator ends it
    (its result and last checkpoint are in: nothing is lost): ``LINGER_FACTOR`` times the job's
    wind-down (measured from its last step, so longer than a teardown; else ``default_s``), and
    at least that plus ``LINGER_MIN_WALL_S`` of the market's wall clock (a slow exit on a
    loaded machine is not a hang). A life ended so is not measured (:func:`note_wind_down`)."""
    wind = wind_down_seconds(trials)
    wind = default_s if wind is None else wind
    return max(LINGER_FACTOR * wind, wind + LINGER_MIN_WALL_S * speedup)


def speed_measured(trials: list[TrialRun]) -> bool:
    """Whether a step has been timed: a trial's ``seconds_per_step`` (two reports of one life),
    or, when every trial has a single step, a first report (its start-up includes that step)."""
    if any(t.seconds_per_step for t in trials):
        return True
    return all(t.steps_total <= 1 for t in trials) and any(
        t.restart_overhead_s is not None for t in trials
    )


def trial_env(
    job_id: str, t: TrialRun, attempt: int, trial_dir: Path, extra: Mapping[str, str]
) -> dict[str, str]:
    """The ``SPOTWISE_*`` contract of one trial attempt (see :mod:`spotwise.sdk`)."""
    return {
        **extra,
        "SPOTWISE_JOB_ID": job_id,
        "SPOTWISE_TRIAL_ID": t.trial_id,
        "SPOTWISE_ATTEMPT": str(attempt),
        "SPOTWISE_PARAMS": json.dumps(t.params),
        "SPOTWISE_STEPS": str(t.steps_total),
        "SPOTWISE_CHECKPOINT_URI": str(t.checkpoint_uri),
        "SPOTWISE_CHECKPOINT_EVERY": str(t.checkpoint_every),
        "SPOTWISE_EVENTS_FILE": str(trial_dir / f"events-{attempt}.jsonl"),
        "SPOTWISE_STOP_FILE": str(trial_dir / f"stop-{attempt}"),
        "SPOTWISE_CONTROL_FILE": str(control_file(trial_dir, attempt)),
    }


def control_file(trial_dir: Path, attempt: int) -> Path:
    """Where the orchestrator writes the live settings of one trial attempt (the SDK reads it)."""
    return trial_dir / f"control-{attempt}.json"


def write_control(path: Path, checkpoint_every: int) -> None:
    """Replace the control file atomically (temp file + rename): a trial that reads it at any
    moment sees the old content or the new one, never a partial file."""
    data = json.dumps({"checkpoint_every": int(checkpoint_every)}).encode()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def trial_argv(command: list[str]) -> tuple[str, ...]:
    """The trial's argv; a bare ``python`` first means the interpreter running spotwise."""
    return tuple(sys.executable if a == "python" and i == 0 else a for i, a in enumerate(command))


def default_run_root() -> Path:
    """Where a job's events, logs and stop files go: $SPOTWISE_HOME/runs, else the user
    data folder's."""
    import platformdirs

    root = os.environ.get("SPOTWISE_HOME")
    return Path(root) / "runs" if root else Path(platformdirs.user_data_dir("spotwise")) / "runs"


def whoami() -> tuple[int, str]:
    """This orchestrator's pid and machine (a pid means nothing on another host)."""
    import socket

    return os.getpid(), socket.gethostname()
