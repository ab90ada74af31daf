"""The real loop: run a job's trials on a market, under a pure policy, recording everything.

Each pass: read the market clock, collect interruption notices, trial progress and instance
ends from the provisioner; turn them into events; ask the policy; execute its actions. Every
launch is recorded in the store *before* the provider is called (so a crash can be reconciled
by tags); every instance life is billed by its own provider's rule when it ends (a job may trade on
several clouds: :mod:`spotwise.providers.multi`).

Mixins keep this file readable: :class:`~spotwise.planner.trialbook.TrialBook` (progress
intake, how a trial attempt ends), :class:`~spotwise.planner.ledger.Ledger` (billing,
releasing noticed instances, draining at the end), :class:`~spotwise.planner.actions.Actions`
(carrying out the policy's actions: launch, stop, checkpoint interval),
:class:`~spotwise.planner.job_summary.JobSummary` (the job's totals, summary and snapshot) and
:class:`~spotwise.planner.no_word.NoWord` (ending a life silent past its limit).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spotwise.errors import SpotwiseError
from spotwise.planner.backend import open_backend
from spotwise.planner.ledger import Unconfirmed
from spotwise.planner.no_word import NoWord
from spotwise.planner.offer_watch import NoOfferWatch
from spotwise.planner.policy import (
    Event,
    NoticeReceived,
    Phase,
    Policy,
    Tick,
    TrialAdded,
    make_policy,
)
from spotwise.planner.preflight import preflight
from spotwise.planner.report import end_state
from spotwise.planner.resume import ResumePlan
from spotwise.planner.runstate import (
    WIND_DOWN_S,
    WIND_DOWN_WALL_S,
    Life,
    TrialRun,
    build_view,
    default_run_root,
    on_signals,
    whoami,
)
from spotwise.planner.search import Search
from spotwise.planner.stops import TraceEnd, kept_progress
from spotwise.planner.trialbook import ReadFailing
from spotwise.providers.base import TAG_JOB, NoticeKind, Offer, market_end
from spotwise.providers.local_records import process_start
from spotwise.spec import JobSpec
from spotwise.spec_options import cost_cap_note
from spotwise.store.heartbeat import HEARTBEAT_EVERY_WALL_S, Heartbeat
from spotwise.store.models import new_id

log = logging.getLogger("spotwise.planner")
REBALANCE_AVOID_S = 600.0  # market seconds a pool with a rebalance recommendation is avoided
SAVE_TOTALS_EVERY_WALL_S = 2.0  # how often a running job writes its spend to the store


@dataclass(frozen=True)
class RunOptions:
    policy: str | None = None
    poll_s: float = 0.05
    run_root: Path | None = None  # where events/logs/stop files go (default: user data dir)
    on_update: Callable[[dict[str, Any]], None] | None = None
    update_every_s: float = 0.25


class Orchestrator(NoWord):
    def __init__(
        self,
        spec: JobSpec,
        spec_path: Path | None,
        store: Any,
        opts: RunOptions,
        resume: ResumePlan | None = None,
    ) -> None:
        self.spec, self.store, self.opts, self.resume = spec, store, opts, resume
        self.policy: Policy = make_policy(opts.policy or spec.policy, spec.policy_options)
        self.base_dir = spec.base_dir(spec_path).resolve()
        self.spec_path = spec_path
        self.trials: list[TrialRun] = []
        self.lives: dict[str, tuple[TrialRun, Life]] = {}  # instance id → life not yet billed
        self.leftover_ids: list[str] = []
        self.unconfirmed: dict[str, Unconfirmed] = {}  # failed launches not confirmed clean
        self.budget_stops: list[tuple[TrialRun, Life]] = []  # released at the end of a pass
        self.blocked: dict[str, float] = {}  # offer key → market time until which it is avoided
        self.throttled: dict[str, tuple[float, float]] = {}  # provider → (until, last pause)
        self.quota_full: dict[tuple[str, str], float] = {}  # (provider, region) → until
        self.read_failing: dict[str, ReadFailing] = {}  # provider read → its failures
        self.cancelled = False
        self.cancel_requested = False
        self.trace_end: TraceEnd | None = None  # where a replayed job's market ended
        self.spent_usd = 0.0
        self.on_demand_usd = 0.0
        self.revocations = self.migrations = self.early_stopped = 0

    # ---- public -------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        spec, resume = self.spec, self.resume
        self.job_id: str = resume.job_id if resume else new_id("j")
        self.offer_watch = NoOfferWatch(self.job_id)  # says so when no offer is left for long
        # absolute: the trial runs in the spec's folder and must find the same events/stop files
        self.run_dir = ((self.opts.run_root or default_run_root()) / self.job_id).resolve()
        forecast = bool(getattr(self.policy, "uses_forecast", False))
        # opening the market validates what the spec names (trace, zones, regions, offers) and
        # raises before anything is written
        backend = open_backend(spec, self.base_dir, self.run_dir, forecast=forecast)
        self.backend = backend
        self.ckpt_root = self._checkpoint_root()
        restore: Callable[[], None] = lambda: None  # noqa: E731
        try:
            # what only the open market shows (options, regions, instance types, a checkpoint
            # location we cannot write): refused before the job is recorded or anything bought
            preflight(spec, backend, self.ckpt_root, source=str(self.spec_path or ""))
            if note := cost_cap_note(spec):  # a cloud job nothing stops spending (review-ak M6)
                log.warning("%s", note)  # after the refusals above: not before an error line
            # the search only now: scikit-optimize takes seconds to import, which a job refused
            # above need not pay; a replayed market's clock starts once it is loaded
            search = resume.search_spec if resume else spec.search
            self.search = Search(spec.search_space, search, spec.metric.direction)
            # before the job's row: a SIGTERM once it exists ends it cancelled (review-aw F2)
            restore = on_signals(self._request_cancel)
            if resume is None:
                backend.start_clock()
                self.store.create_job(
                    name=spec.name,
                    spec_json=spec.model_dump_json(),
                    spec_path=str(self.spec_path or ""),
                    policy=self.policy.name,
                    direction=spec.metric.direction,
                    job_id=self.job_id,
                )
            else:
                self._carry_over(resume)
        except BaseException:
            restore()
            backend.close()
            raise
        self.run_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # runs/: private
        self.run_dir.mkdir(exist_ok=True, mode=0o700)
        wall0 = time.monotonic()
        state, error = "failed", None
        crashed: str | None = None  # an exception ends the run (the drain's own is raised after)
        try:
            self.started_at = backend.now()
            self.deadline = (
                self.started_at + spec.budget.deadline_hours * 3600
                if spec.budget.deadline_hours
                else None
            )
            # a write another process's lock holds past the busy timeout is tried again (up
            # to 5 minutes, warned) rather than failing the running job (review-ax AX2)
            self.store.wait_out_locks(self.job_id)
            # `running` only over `pending`: a cancel written meanwhile is heard (review-ax AX5)
            self._start_row(*whoami(), {} if resume else {"started_at": time.time()})
            # when it was last alive: what a cancel after a kill -9 bills its lives up to
            self.heartbeat = Heartbeat(self.store, self.job_id, HEARTBEAT_EVERY_WALL_S)
            self.heartbeat.beat()  # a resumed run writes its own
            self._loop()
            state, error = end_state(
                self.trials, self.cancelled, spec.budget.max_cost_usd, str(self.run_dir / "logs")
            )
            error = self._trace_end_error(state, error)
        except SpotwiseError as e:
            error = crashed = str(e)
            e.job_id = e.job_id or self.job_id  # `tune --json` names the job it ended
            raise
        except BaseException as e:  # crash: record it, leave no orphan, re-raise
            error = crashed = f"{type(e).__name__}: {e}"
            raise
        finally:
            # a step of it that failed (a trial it could not close, a bug, the store) is
            # logged and an event, and the job still ends, failed, its error naming the step
            try:
                closing = self._drain(backend)
                if closing is not None:
                    said = self.drain_error(closing)
                    state, error = "failed", said if error is None else f"{error}; {said}"
                self._finish_job(state, self.leftover_error(error))
                if closing is None and crashed is None:  # every bill is on a record
                    self._cost_to_records()
            finally:  # only now: a signal until the end is written only sets the flag (BA4)
                restore()
            if closing is not None and crashed is None:
                raise closing  # a bug: the exit code says so (the job's record is complete)
        out = self.summary(time.monotonic() - wall0)
        te = self.trace_end
        if te and not kept_progress(te.from_steps, te.ended, self.trials):
            out["resumable"] = False  # a resume would replay the same end: it is refused
        return out

    def _carry_over(self, resume: ResumePlan) -> None:
        """A resumed job starts from its earlier run: its trials, its totals (the budget
        covers both runs), its results told to the search; then the job is taken over (refused
        if another process took it first), and its offers' lasting-refusal backoffs restored."""
        self.trials = resume.trials
        for t in self.trials:
            t.checkpoint_uri = f"{self.ckpt_root}/{t.trial_id}"
        tot = resume.totals
        self.spent_usd, self.on_demand_usd = tot["cost_usd"], tot["on_demand_cost_usd"]
        self.revocations, self.migrations = int(tot["revocations"]), int(tot["migrations"])
        self.early_stopped = int(tot["early_stopped"])
        self.search.replay(resume.ended, [t.params for t in resume.requeued], resume.stopped)
        self._refuse_resume_past_trace_end(resume.trials)  # before anything is written
        self.run_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # runs/: private
        self.run_dir.mkdir(exist_ok=True, mode=0o700)  # nothing left to fail after the claim
        self.backend.start_clock()
        pid, host = whoami()
        resume.claim(self.store, pid, host, self.backend.now(), pid_start=process_start(pid))
        self._restore_lasting(resume.lasting, self.backend.now())  # the offers' backoffs

    # ---- the loop -----------------------------------------------------------------------
    def _loop(self) -> None:
        b, spec = self.backend, self.spec
        last_update = last_saved = 0.0
        prev_now = b.now()
        end = market_end(b.catalog)  # a replayed trace's end; None for a cloud
        while True:
            if self.cancel_requested and not self.cancelled:
                self.cancel()
            now = b.now()
            if end is not None and now >= end:
                self._stop_at_trace_end(end, now)
            events: list[Event] = [*self._admit(), *self._collect(now)]
            events += self._release_silent(now)  # lives silent since launch past the limit
            events.append(Tick(now))
            offers = self._usable_offers(now)
            self._watch_offers(offers, now)
            risk = b.risk(offers, now) if b.risk is not None else {}
            for ev in events:
                view = build_view(
                    now,
                    offers,
                    risk,
                    self.trials,
                    direction=spec.metric.direction,
                    parallel=spec.parallel,
                    trials_total=spec.trials,
                    spent_usd=self.spent_usd + self._running_cost(now),
                    max_cost_usd=spec.budget.max_cost_usd,
                    started_at=self.started_at,
                    deadline=self.deadline,
                    rules=b.rules,
                    tick_s=max(now - prev_now, self.opts.poll_s * b.speedup, 1.0),
                    checkpoint_every_max=spec.checkpoint.every,
                    wind_down_default_s=max(WIND_DOWN_S, WIND_DOWN_WALL_S * b.speedup),
                    no_word_s=self._no_word_s(),
                )
                for action in self.policy.decide(view, ev):
                    self._execute(action, offers, now)
            self._release_budget_stops(now)  # one terminate call for all of this pass's stops
            self._release_lingering(now, max(WIND_DOWN_S, WIND_DOWN_WALL_S * b.speedup))
            self._retry_unconfirmed()  # a failed launch's instance may be running, billed
            done = self._finished()  # the last picture is drawn too, not one a poll before
            due = time.monotonic() - last_update >= self.opts.update_every_s
            if self.opts.on_update and (done or due):
                last_update = time.monotonic()
                self.opts.on_update(self.snapshot(now))
            if time.monotonic() - last_saved >= SAVE_TOTALS_EVERY_WALL_S:
                last_saved = time.monotonic()
                self._save_and_hear(now)  # its spend for `spotwise status`; another's cancel
            # the totals' save carries the heartbeat (every SAVE_TOTALS_EVERY_WALL_S); a write
            # of its own only where none was carried for HEARTBEAT_EVERY_WALL_S
            if self.heartbeat is not None:  # set as the run starts
                self.heartbeat.beat()
            if done:
                return
            prev_now = now
            time.sleep(self.opts.poll_s)

    def _watch_offers(self, offers: list[Offer], now: float) -> None:
        waiting = any(t.phase in (Phase.QUEUED, Phase.WAITING) for t in self.trials)
        if said := self.offer_watch.note(offers, waiting, self.last_lasting_refusal):
            log.warning("%s: %s", self.job_id, said)
            self._event("no_offers", now, message=said)

    def _usable_offers(self, now: float) -> list[Offer]:
        """The market's offers, with those that just sent a notice or refused a launch, those of
        a provider whose API throttles our launches and those of a region whose quota is used
        up, marked unavailable: a zone whose capacity is being reclaimed is not capacity."""
        self.blocked = {k: until for k, until in self.blocked.items() if until > now}
        return [
            replace(o, available=False) if self._refused_lately(o, now) else o
            for o in self.backend.list_offers(now)
        ]

    def _finished(self) -> bool:
        if any(not self._given_up(life) for _, life in self.lives.values()):
            return False
        if self.cancelled:
            return True
        done = all(t.phase.is_terminal() for t in self.trials)
        no_more = self._budget_spent() or self._broken() or self.trace_end is not None
        return done and (len(self.trials) >= self.spec.trials or no_more)

    def _admit(self) -> list[Event]:
        """Create trials from the search while there is room for them, asking for about a
        second a pass (a GP ask fits a model: 12 empty slots took minutes on a loaded machine,
        with no exit reaped and no notice handled meanwhile); the rest next pass."""
        if self.cancelled or self.trace_end or self._budget_spent() or self._broken():
            return []  # past the replayed market's end (trace_end) no trial is created
        if self._doubtful():
            return []
        active = sum(1 for t in self.trials if not t.phase.is_terminal())
        room = min(self.spec.parallel - active, self.spec.trials - len(self.trials))
        out: list[Event] = []
        for params in self.search.asks(max(room, 0)):
            row = self.store.add_trial(self.job_id, len(self.trials), params)
            t = TrialRun(
                row.id, len(self.trials), params, self.spec.steps, self.spec.checkpoint.every
            )
            t.checkpoint_uri = f"{self.ckpt_root}/{t.trial_id}"
            self.trials.append(t)
            out.append(TrialAdded(t.trial_id))
        return out

    def _collect(self, now: float) -> list[Event]:
        prov = self.backend.provisioner
        events: list[Event] = []
        for n in self._read_provider("notices", prov.notices, now) or []:
            if n.instance_id not in self.lives:
                continue
            t, life = self.lives[n.instance_id]
            if n.kind is NoticeKind.REBALANCE:
                # no deadline and nothing is taken; the agent may stop the trial to move it
                life.rebalanced = True
                key = life.offer.key
                self.blocked[key] = max(self.blocked.get(key, 0.0), now + REBALANCE_AVOID_S)
                self._event("rebalance", now, t, zone=life.offer.zone)
                continue
            life.notice_deadline = n.deadline
            key = life.offer.key  # a longer block (a lasting refusal) stays (review-ai F3)
            self.blocked[key] = max(self.blocked.get(key, 0.0), n.deadline + self._tick_s())
            self._event("notice", now, t, deadline=n.deadline)
            if not life.exited:
                events.append(NoticeReceived(t.trial_id, n.instance_id, n.deadline))
        for t, life in list(self.lives.values()):
            if not life.exited:
                events += self._read_progress(t, life, now)
        found = self._read_provider("describe", lambda: prov.describe({TAG_JOB: self.job_id}), now)
        if found is not None:  # unread this pass: nothing is known to have ended
            events += self._settle_lives({i.instance_id: i for i in found}, now)
        return events

    # ---- helpers ------------------------------------------------------------------------
    def _checkpoint_root(self) -> str:
        """The job's checkpoint folder or URI prefix (URIs are joined as strings, not paths)."""
        where = self.spec.checkpoint.location
        if "://" in where:
            return f"{where.rstrip('/')}/{self.job_id}"
        loc = Path(where).expanduser()
        return str((loc if loc.is_absolute() else self.base_dir / loc) / self.job_id)

    def _trial_dir(self, t: TrialRun) -> Path:
        d = self.run_dir / t.trial_id
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.store.add_event(
            self.job_id,
            kind,
            now,
            trial_id=t.trial_id if t else None,
            instance_id=t.life.launch_id if t and t.life else None,
            **detail,
        )

    def _request_cancel(self) -> None:
        self.cancel_requested = True  # acted on by the loop, never inside a signal handler

    def cancel(self) -> None:
        """Stop every trial at its next step (checkpointed) and end the job as cancelled."""
        self.cancelled = True
        for t in self.trials:
            if t.phase is Phase.RUNNING and t.life is not None:
                self._request_stop(t, "cancel")
            elif not t.phase.is_terminal():
                t.phase, t.state = Phase.DONE, "cancelled"  # taken over: the other run's row
                self._trial_write(t, state="cancelled", ended_at=time.time())


def run_job(spec: JobSpec, spec_path: Path | None, store: Any, opts: RunOptions) -> dict[str, Any]:
    """Run one tuning job to the end and return its summary (the core call behind `tune`)."""
    return Orchestrator(spec, spec_path, store, opts).run()


def resume_job(plan: ResumePlan, store: Any, opts: RunOptions) -> dict[str, Any]:
    """Run a finished job's unfinished trials and the rest of its plan (`spotwise resume`)."""
    return Orchestrator(plan.spec, plan.spec_path, store, opts, resume=plan).run()
