"""How the orchestrator takes in what a trial reports and how a trial attempt ends.

A mixin of :class:`~spotwise.planner.orchestrator.Orchestrator`, kept apart so each file stays
readable: progress records become observations and events; an instance's end becomes the
trial's next phase (completed, stopped early, failed, or waiting to resume elsewhere).

Every instance life leaves its trial's output in the job's ``logs`` folder as
``<instance id>.log``: the local provisioner writes it there as the trial runs; a cloud trial's
agent uploads the end of it to the trial's artifacts folder
(:func:`~spotwise.providers.channel.read_output`), fetched here when the life ends. A failed
attempt's error quotes the last line of that output (a traceback's exception line).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from spotwise.errors import ProviderError
from spotwise.planner import storage_full
from spotwise.planner.backend import Backend
from spotwise.planner.failure_text import exit_error
from spotwise.planner.policy import (
    INVALID_METRIC,
    Event,
    InstanceLost,
    Phase,
    Progress,
    TrialExited,
)
from spotwise.planner.report import best_of, last_reported, reported_final, unreported_final
from spotwise.planner.resumed_end import note_done, settle
from spotwise.planner.runstate import (
    LIMITS,
    Life,
    TrialRun,
    note_checkpoint_save,
    note_report,
    note_unreported_life,
)
from spotwise.planner.search import Search
from spotwise.planner.trial_output import (  # noqa: F401
    LAST_LINE_CHARS,
    last_line,
    life_log,
    record_metric,
)
from spotwise.providers.base import InstanceState
from spotwise.sdk_io import MAX_STEP, shown
from spotwise.spec import JobSpec

# what the SDK says went wrong with a resume or a save (spotwise.sdk): job events too
SDK_WARNINGS = (
    "checkpoint_rejected",
    "resume_behind",
    "checkpoint_behind",
    "checkpoint_cleanup_failed",
    "sigterm_handler_reset",  # SIGTERM taken back from SIG_DFL/SIG_IGN (spotwise.sdk_signal)
)
_EVENT_FIELDS = ("type", "time", "job_id", "trial_id", "instance_id", "kind")  # the store's own
MAX_FAILURES = 2  # attempts of a trial that may crash before it is marked failed
PROVIDER_READ_GRACE_WALL_S = 300.0  # a provider that cannot be read this long fails the job
READ_RETRY_WALL_S = 1.0  # first pause before a failed provider read is tried again
READ_RETRY_MAX_WALL_S = 30.0  # the pause doubles up to this
T = TypeVar("T")
log = logging.getLogger("spotwise.planner")


@dataclass
class ReadFailing:
    """A streak of failed reads of one kind (notices, describe): since when, the pause now."""

    since: float  # wall time of the first failure
    pause: float = 0.0
    retry_at: float = 0.0


class TrialBook:
    backend: Backend
    job_id: str
    store: Any
    spec: JobSpec
    search: Search
    run_dir: Path
    trials: list[TrialRun]
    revocations: int
    early_stopped: int
    read_failing: dict[str, ReadFailing]  # provider read → its streak of failures

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        raise NotImplementedError

    def _trial_write(self, t: TrialRun, **fields: Any) -> bool:
        """Write ``fields`` to ``t``'s row; False: not written. :class:`~spotwise.planner.
        job_summary.JobSummary`'s writes only while the job's row names this run (a run taken
        over writes no trial the other now holds)."""
        self.store.update_trial(t.trial_id, **fields)
        return True

    def _observe(self, t: TrialRun, life: Life, step: int, value: float, now: float) -> bool:
        """Add the observation ``step``, ``value`` of ``t`` (as :meth:`_trial_write`)."""
        self.store.add_observation(
            t.trial_id, step, value, time.time(), market_time=now, instance_id=life.launch_id
        )
        return True

    def _read_provider(self, what: str, call: Callable[[], list[T]], now: float) -> list[T] | None:
        """``call()``, or None while the provider cannot be read (a 5xx, throttling, a network
        error) for less than ``PROVIDER_READ_GRACE_WALL_S``: one failed poll must not fail a job
        whose instances run on. Failed reads are retried after a pause that doubles from
        ``READ_RETRY_WALL_S`` (not at every pass: that would feed a throttling API); the first
        failure of a streak is an event; past the grace the error ends the job (its drain
        terminates what it can)."""
        failing = self.read_failing.get(what)
        if failing is not None and time.monotonic() < failing.retry_at:
            return None
        try:
            out = call()
        except ProviderError as e:
            wall = time.monotonic()
            if failing is None:
                failing = self.read_failing[what] = ReadFailing(since=wall)
                log.warning("%s: reading %s failed, retrying: %s", self.job_id, what, e)
                self._event("error", now, message=f"reading {what} failed, retrying: {e}")
            if wall - failing.since > PROVIDER_READ_GRACE_WALL_S:
                raise
            failing.pause = min(max(failing.pause * 2, READ_RETRY_WALL_S), READ_RETRY_MAX_WALL_S)
            failing.retry_at = wall + failing.pause
            return None
        self.read_failing.pop(what, None)
        return out

    def _read_progress(self, t: TrialRun, life: Life, now: float) -> list[Event]:
        events: list[Event] = []
        records = self.backend.provisioner.progress(life.instance_id)
        life.heard = life.heard or bool(records)  # any record is word from it (no_word)
        for rec in records:
            kind, step = rec.get("type"), rec.get("step")
            if not isinstance(step, int):
                continue
            if not 0 <= step <= MAX_STEP:  # the store's 64-bit INTEGER cannot keep it
                self._step_refused(t, kind, step, now)
                continue
            if storage_full.note(self, t, life, rec, now):  # a save the storage refused
                continue
            if kind in SDK_WARNINGS:  # a checkpoint set aside, or less resumed than expected
                said = {k: v for k, v in rec.items() if k not in _EVENT_FIELDS}
                self._event(str(kind), now, t, sdk_time=rec.get("time"), **said)
                continue
            if kind == "report":
                metric = rec.get("metric")
                value = record_metric(metric)  # NaN/inf (the SDK sends null): no usable value
                note_report(t, life, step, now)  # its start-up, its speed, its last step
                t.step = max(t.step, step)
                t.furthest = max(t.furthest, step)
                t.metric_invalid = value is None  # the latest report: NaN/inf shows as none
                if value is not None:
                    t.curve[step] = value
                    self._observe(t, life, step, value, now)
                elif not t.invalid_metric:  # an observation holds a number: said once, as an event
                    t.invalid_metric = True
                    self._event("invalid_metric", now, t, step=step, metric=repr(metric))
                events.append(Progress(t.trial_id, step, value))
            elif kind == "checkpoint":
                saved_s = note_checkpoint_save(t, rec.get("seconds"), self.backend.speedup, now)
                if saved_s is not None:  # kept in the job's events: `spotwise resume` reads it
                    self._event("checkpoint_saved", now, t, step=step, seconds=saved_s)
                t.checkpoint_step = max(t.checkpoint_step, step)
                self._trial_write(
                    t, checkpoint_step=t.checkpoint_step, checkpoint_uri=t.checkpoint_uri
                )
            elif kind == "done":
                note_done(life, step)  # at its last step with nothing reported: resumed_end
                if life.finished_at is None:  # only its teardown is left
                    life.finished_at = now
        if events:
            self._trial_write(
                t,
                step=t.step,
                metric=None if t.metric_invalid else t.last_metric,
                best_metric=best_of(t, self.spec.metric.direction),
            )
        return events

    def _step_refused(self, t: TrialRun, kind: object, step: int, now: float) -> None:
        """A progress record whose step is out of the store's range (a timestamp in ns, a hash:
        an SDK before ``check_step``'s bound sent any int >= 0; the store raised and ended the
        job) is ignored, like a record without an int step; said once per trial, as an event."""
        said: set[str] = self.__dict__.setdefault("steps_refused", set())  # trial ids
        if t.trial_id in said:
            return
        said.add(t.trial_id)
        message = (
            f"a {kind} record with step {shown(step)} was ignored: a step must be an int from "
            f"0 to {MAX_STEP}"
        )
        log.warning("%s: trial %s: %s", self.job_id, t.trial_id, message)
        self._event("invalid_step", now, t, record=str(kind), step=shown(step), message=message)

    def _on_exit(
        self,
        t: TrialRun,
        code: int | None,
        state: InstanceState,
        now: float,
        why: str | None = None,
    ) -> Event:
        """The trial has left its instance: its next phase, the event for the policy. ``why``:
        the failure's reason when the planner ended a life that never reported an exit (the
        "no word" limit, :mod:`~spotwise.planner.no_word`)."""
        life = t.life
        assert life is not None
        life.exited = True
        t.life = None
        log_file, output, unread = self._life_log(t, life)
        # its last step reported: complete even if its instance was taken afterwards
        finished = reported_final(t)
        taken = (  # the cloud or the planner ended this life: a relaunch may still report
            life.notice_deadline is not None
            or life.rebalanced
            or state is InstanceState.REVOKED
            or t.stopping == "migrate"
        )
        note_unreported_life(t, life, now, taken or t.stopping is not None)  # its start-up
        copied = None  # resumed at its last step from a checkpoint another copy of it saved:
        if not (finished or taken or t.stopping):  # the copy's result, none, or awaited
            copied = settle(self, t, life, code, log_file, output, now)
        finished = finished or copied == "recovered"
        if finished:
            self._close_trial(t, "completed", now)
        elif copied == "lost":
            self._close_trial(t, "failed", now)
        elif copied == "held":  # waits, not launched, for the copy's report (resumed_end)
            self._to_waiting(t)
        elif max(t.step, t.checkpoint_step) >= t.steps_total and not taken and not t.stopping:
            # its work is done, its result never reported: a relaunch would resume from a
            # checkpoint at its last step, report nothing again and pay for a second instance
            self._unreported_final(t, code, log_file, output, now)
        elif t.stopping == "early":
            self._close_trial(t, "stopped_early", now)
        elif t.stopping == "cancel":
            self._close_trial(t, "cancelled", now)
        elif (
            life.notice_deadline is None
            and not life.rebalanced  # the agent stopped it to move it: migrate, not a failure
            and state is not InstanceState.REVOKED
            # exit 0 with steps left, unasked: a crash too; and so is an instance that ended
            # unasked without reporting any exit (an agent that could not write its channel
            # powers the machine off: relaunching it without a cap would loop forever)
            and (t.stopping is None or (code is not None and code != 0))
        ):
            if code and (full := storage_full.cause(self, t, life)):  # not the trial's fault:
                return storage_full.end(self, t, life, full, code, log_file, now)  # job ends
            t.failures += 1
            detail: dict[str, Any] = {
                "exit_code": code,
                "log": str(log_file or self.run_dir / "logs"),
            }
            if code is None:
                detail["error"] = (
                    why or f"the instance ended ({state.value}) without reporting an exit code"
                ) + (f"; its files cannot be read: {unread}" if unread else "")
            t.crashed = code is not None  # an exit code: the trial's own failure
            t.last_error = detail.get("error") or exit_error(
                code or 0, t, self.run_dir, self.job_id, log_file
            )
            if code == 0:  # which step it reported last (its step may be its checkpoint's)
                last = last_reported(t)
                detail["last_reported_step"] = last
                if last != t.step:
                    metric = self.spec.metric.name
                    t.last_error += (
                        f"; it never reported {metric}"
                        if last is None
                        else f"; it reported {metric} last at step {last}"
                    )
            if output:
                detail["last_output"] = output
                t.last_error += f"; its last output line: {output}"
            self._event("error", now, t, **detail)
            if t.failures >= MAX_FAILURES:
                self._close_trial(t, "failed", now)
            else:
                self._to_waiting(t)
                t.retrying = True
        else:  # revoked, noticed, migrated or asked to stop: resume from the checkpoint elsewhere
            self._to_waiting(t)
        if life.notice_deadline is not None or state is InstanceState.REVOKED:
            t.revocations += 1
            self.revocations += 1
            self._event(  # `launch`: the life it left, which `spotwise cancel` bills as taken
                "revoked",
                now,
                t,
                zone=life.offer.zone,
                step=t.step,
                checkpoint=t.checkpoint_step,
                launch=life.launch_id,
            )
            return InstanceLost(t.trial_id, life.instance_id)
        return TrialExited(t.trial_id, life.instance_id, finished)

    def _unreported_final(
        self, t: TrialRun, code: int | None, log_file: Path | None, output: str, now: float
    ) -> None:
        """The trial's work is done (its checkpoint or its reports reached its last step) but
        it never reported its metric there: it failed, with no relaunch (see
        :func:`~spotwise.planner.report.unreported_final`)."""
        t.failures += 1
        t.crashed = code is not None  # an exit code: the trial's own doing
        t.unreported = True
        t.last_error = unreported_final(t, self.spec.metric.name)
        detail: dict[str, Any] = {
            "exit_code": code,
            "log": str(log_file or self.run_dir / "logs"),
            "error": t.last_error,
            "last_reported_step": last_reported(t),
        }
        if output:
            detail["last_output"] = output
            t.last_error += f"; its last output line: {output}"
        self._event("error", now, t, **detail)
        self._close_trial(t, "failed", now)

    def _life_log(self, t: TrialRun, life: Life) -> tuple[Path | None, str, str]:
        """``(log file, its last output line, why the output could not be read)`` of one
        instance life (:func:`~spotwise.planner.trial_output.life_log`)."""
        return life_log(self, t, life)

    def _to_waiting(self, t: TrialRun) -> None:
        t.phase, t.state, t.stopping = Phase.WAITING, "waiting", None
        t.step = t.checkpoint_step  # work after the checkpoint is lost
        t.curve = {k: v for k, v in t.curve.items() if k <= t.step}
        self._trial_write(t, state="waiting", step=t.step)

    def _broken(self) -> bool:
        """Two trials failed and none ever reported a step: the command itself is broken (a
        typo, a missing file), and every new trial would only pay for more failed launches.
        Likewise two trials that ran to their last step without reporting the metric there
        (steps counted from 0, a report every k steps that skips the last) while none has
        completed: the script's reporting is wrong for every trial. One is enough when it
        reported step 0 and stopped one short of the last (steps counted from 0: no trial of
        that script can report its last step). Judged on this run's trials: a resumed job's
        command may have been mended since."""
        failed = [t for t in self.trials if t.state == "failed" and not t.carried]
        if len(failed) >= 2 and not any(t.furthest > 0 for t in self.trials):
            return True
        unreported = [t for t in failed if t.unreported]
        zero_indexed = any(
            0 in {*t.curve, *t.reported} and last_reported(t) == t.steps_total - 1
            for t in unreported
        )
        return (len(unreported) >= 2 or zero_indexed) and not any(
            t.state == "completed" for t in self.trials
        )

    def _doubtful(self) -> bool:
        """No trial has reported a step yet, one has failed, and another is still under way:
        no new trial starts until that one shows whether the command works (a broken command
        would otherwise start a third trial in the slot the first freed)."""
        if any(t.furthest > 0 for t in self.trials):
            return False
        failed = any(t.failures > 0 for t in self.trials)
        return failed and any(not t.phase.is_terminal() for t in self.trials)

    def _close_trial(self, t: TrialRun, state: str, now: float) -> None:
        t.phase, t.state = Phase.DONE, state
        final = t.final_metric if state == "completed" else None
        if state == "stopped_early" and t.stop_reason not in LIMITS:  # the policy's own
            self.early_stopped += 1  # (a limit's stops are counted apart: the summary's limits)
        # the record first: should the search raise, the trial is not left "running" in the
        # store (the drain only closes trials that are not done); a run taken over ends it
        # only here, its row and event the other run's
        if self._trial_write(
            t,
            state=state,
            final_metric=final,
            predicted_final=t.predicted_final,
            ended_at=time.time(),
            step=t.step,
        ):
            metric = None if t.metric_invalid else t.last_metric  # a NaN end is no last value
            self._event(state, now, t, step=t.step, metric=metric)
        if state == "completed" and final is not None:
            self.search.tell(t.params, final)
        elif state == "completed":  # it ran to the end on a NaN/inf: its point is a bad one
            self.search.tell_failure(t.params)
        elif state == "stopped_early" and t.stop_reason == INVALID_METRIC:
            self.search.tell_failure(t.params)  # diverged: its last finite value flatters it
        elif state == "stopped_early":
            guess = t.predicted_final if t.predicted_final is not None else t.last_metric
            if guess is not None:
                self.search.tell_stopped(t.params, guess)
            else:
                self.search.forget(t.params)
        elif state == "failed" and t.crashed:
            self.search.tell_failure(t.params)  # else the search proposes it again
        else:
            self.search.forget(t.params)
