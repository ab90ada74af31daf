"""The job's totals as the orchestrator shows and records them: its summary at the end, its
snapshot while it runs, and the job row's state: its start, a cancel another process wrote
to it, its last write (:class:`JobSummary`, a mixin of
:class:`~spotwise.planner.orchestrator.Orchestrator` over
:class:`~spotwise.planner.actions.Actions`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from spotwise.planner.actions import Actions
from spotwise.planner.policy import Policy
from spotwise.planner.report import best_trial, resumable, snapshot, summary
from spotwise.planner.resume import ResumePlan
from spotwise.planner.runstate import Life, TrialRun

log = logging.getLogger("spotwise.planner")


class JobSummary(Actions):
    policy: Policy
    resume: ResumePlan | None
    row_state: str = "pending"  # the job row's state as this run last wrote or read it

    # the job row's pid, host and pid_start as this run wrote or found them: another's is a
    # takeover (review-az AZ5); None: not known (the end is then written over the state alone)
    owner: dict[str, Any] | None = None
    taken_over: str = ""  # who took the job over from this run, once it has heard it

    def _start_row(self, pid: int, host: str, first: dict[str, Any]) -> None:
        """The job becomes ``running`` with this process's pid only while it is still
        ``pending`` and as this run left it (compare-and-set: no pid yet, or the pid its resume
        claimed it with): a cancel written since it was created or claimed, which took its
        orchestrator for gone (no pid yet: review-ax AX5), is heard instead
        (:meth:`_hear_cancel`) and the run stops at its first pass, launching nothing."""
        from spotwise.providers.local_records import process_start

        # a reused pid is not this process: see liveness.py
        me = {"pid": pid, "host": host, "pid_start": process_start(pid)}
        before = me if self.resume else {"pid": None}  # a resume's claim wrote its pid
        if self.store.claim_job(
            self.job_id, {"state": "pending", **before}, {"state": "running", **me, **first}
        ):
            self.row_state, self.owner = "running", me
            return
        row = self.store.get_job(self.job_id)  # as found: a later change is another's
        self.owner = {k: getattr(row, k) for k in ("pid", "host", "pid_start")}
        self._hear_cancel()

    def _hear_cancel(self) -> None:
        """Read the job's row (one small SELECT: with each totals' save, every ~2 wall s).
        A job another process closed (`spotwise cancel` from another machine, or a cancel that
        took this orchestrator for gone) is cancelled here as by Ctrl-C: its trials checkpoint
        and stop, its drain bills each life once, `tune` exits 130 (review-ax AX1). A job
        another process took over (its pid or host in the row: a `spotwise resume` while this
        run was stopping or frozen) is stopped the same way, but this run writes nothing more
        to the job's row: its totals, heartbeat and end are the other's (review-az AZ5)."""
        row = self.store.get_job(self.job_id)
        theirs = {k: getattr(row, k) for k in ("pid", "host", "pid_start")}
        if self.owner is not None and theirs != self.owner and not self.taken_over:
            self.taken_over = f"pid {row.pid} on {row.host}"
            log.warning(
                "%s: another process (%s) took the job over (spotwise resume): this run stops "
                "its trials (checkpointed), bills and releases what it launched, and leaves "
                "the job's row to it",
                self.job_id,
                self.taken_over,
            )
            self.cancel_requested, self.heartbeat = True, None  # its heartbeat is the other's
            return
        if self.cancelled or self.taken_over:
            return  # the end's write reads the row again (:meth:`_finish_job`)
        state = row.state
        if not state.is_terminal():
            return
        if not self.cancel_requested:
            log.warning(
                "%s: the job was marked %s by another process (spotwise cancel): stopping "
                "its trials (checkpointed)",
                self.job_id,
                state.value,
            )
        self.row_state, self.cancel_requested = state.value, True

    def _trial_write(self, t: TrialRun, **fields: Any) -> bool:
        """Write ``fields`` to ``t``'s row only while the job's row names this run
        (compare-and-set on the owner, the job's row locked first: a takeover's claim cannot
        land between the check and the write): a run taken over writes no state, progress,
        metric or end of a trial the other run now holds, though it still stops, bills and
        releases its own lives (their instance records are its own). False: not written; a
        takeover found so is heard at once (:meth:`_hear_cancel`), not at the next save."""
        if self.taken_over:
            return False
        if self.owner is None:  # not known: written as before
            return super()._trial_write(t, **fields)
        if self.store.update_trial_if_owner(self.job_id, self.owner, t.trial_id, fields):
            return True
        self._hear_cancel()
        return False

    def _observe(self, t: TrialRun, life: Life, step: int, value: float, now: float) -> bool:
        """The observation, as :meth:`_trial_write`: not added by a run taken over."""
        if self.taken_over:
            return False
        if self.owner is None:
            return super()._observe(t, life, step, value, now)
        wall, launch = time.time(), life.launch_id
        if self.store.add_observation_if_owner(
            self.job_id, self.owner, t.trial_id, step, value, wall, now, launch
        ):
            return True
        self._hear_cancel()
        return False

    def _write_totals(self, **fields: Any) -> None:
        """The totals' save, as :meth:`_trial_write`: a takeover landing between the hear and
        this save no longer gets this run's totals written over its row (review-bg's race,
        seen once in CI: the other run's $7 became $0)."""
        if self.taken_over:
            return
        if self.owner is None:
            return super()._write_totals(**fields)
        if not self.store.update_job_if_owner(self.job_id, self.owner, fields):
            self._hear_cancel()

    def _save_and_hear(self, now: float) -> None:
        """The running totals' save (it carries the heartbeat), after hearing a cancel or a
        takeover: a run taken over writes nothing more to the job's row."""
        self._hear_cancel()  # one written by another process (another machine's)
        if not self.taken_over:
            self._save_totals(now)  # `spotwise status` of a running job shows its spend

    def _totals(self) -> dict[str, float]:
        return {
            "cost_usd": self.spent_usd,
            "on_demand_cost_usd": self.on_demand_usd,
            "revocations": self.revocations,
            "migrations": self.migrations,
            "early_stopped": self.early_stopped,
        }

    def summary(self, wall_seconds: float) -> dict[str, Any]:
        job = self.store.get_job(self.job_id)
        state = job.state.value if hasattr(job.state, "value") else str(job.state)
        direction = self.spec.metric.direction
        # the dollars as the job's row holds them (its records' sum: :meth:`_cost_to_records`),
        # so that `tune` and `status` give one figure
        dollars = {"cost_usd": job.cost_usd, "on_demand_cost_usd": job.on_demand_cost_usd}
        if self.taken_over:  # the row is the other run's: this run's own, stopped as cancelled
            state, dollars = "cancelled", {}
        totals = {**self._totals(), **dollars}
        out = summary(
            self.job_id, state, self.policy.name, self.trials, direction, totals, wall_seconds
        )
        out["trials_planned"] = self.spec.trials
        cap = getattr(getattr(self.spec, "budget", None), "max_cost_usd", None)
        over = round(job.cost_usd - cap, 6) if cap is not None else 0.0
        if over > 0:  # never silent: lives billed past their last step longer than projected
            row = out["limits"].setdefault("budget", {"stopped": 0, "never_started": 0})
            row["exceeded_usd"] = over
        # a run the broken-command rule stopped: `resume` runs its killed trials again once the
        # command is mended (planner/resume_broken.py), though every planned trial was made
        killed = self._broken() and any(
            t.state == "failed" and t.crashed and not t.carried and t.furthest == 0
            for t in self.trials
        )
        out["resumable"] = resumable(self.trials, self.spec.trials) or killed
        if self.resume:
            out["resumed"] = {
                "previous_state": self.resume.from_state.value,
                "requeued_trials": [t.trial_id for t in self.resume.requeued],
            }
        if self.taken_over:
            out["error"] = (
                f"another process ({self.taken_over}) took the job over while this run was "
                f"running: this run stopped; see `spotwise status {self.job_id}`"
            )
        elif job.error:
            out["error"] = job.error
        if self.leftover_ids:  # the drain could not terminate them: `tune` exits non-zero
            out["leftover_instances"] = self.leftovers()
        if left := self._left_alone():  # `tune` exits 4 when nothing else went wrong
            out["not_ours"] = left
        return out

    def _left_alone(self) -> list[str]:
        """The lines of this run's ``not_ours`` events: instances listed with the job's tags
        that it did not launch, left alone (and maybe billed to someone) by its cleanups and
        its drain. This run's: recorded since it started on the market clock (a replayed
        market's clock starts again on a resume, so an earlier run's may be named again)."""
        since = getattr(self, "started_at", None)
        rows = self.store.events(self.job_id, "not_ours")
        return not_ours_lines(r for r in rows if since is None or r.time >= since)

    def snapshot(self, now: float) -> dict[str, Any]:
        cost = self.spent_usd + self._running_cost(now)
        total = self.spec.trials * self.spec.steps
        return snapshot(
            self.job_id,
            self.policy.name,
            self.trials,
            now,
            cost,
            self._totals(),
            total,
            self.spec.metric.direction,
        )

    def _finish_job(self, state: str, error: str | None) -> None:
        """The job's end: written only over the state this run last knew (``running``, or the
        ``cancelled`` it heard) and while the row still names this run's orchestrator
        (compare-and-set). A job another process closed since keeps its state (a cancel is
        never overwritten by an end: review-ax AX1), and takes the end's time, error and
        totals; a job another process took over is left to it (review-az AZ5)."""
        best = best_trial(self.trials, self.spec.metric.direction)
        fields: dict[str, Any] = {
            "ended_at": time.time(),
            "error": error,
            "best_trial_id": best.trial_id if best else None,
            "best_metric": best.final_metric if best else None,
            **self._totals(),
        }
        own = self.owner or {}
        if not self.taken_over and self.store.claim_job(
            self.job_id, {"state": self.row_state, **own}, {"state": state, **fields}
        ):
            return
        now = self.store.job_state(self.job_id)
        ended = now.is_terminal() and not self.taken_over
        if ended and self.store.claim_job(self.job_id, {"state": now, **own}, fields):
            log.warning("%s: marked %s by another process as it ended", self.job_id, now.value)
            return
        log.warning(
            "%s: its row changed to %s%s: its end (%s) was not written",
            self.job_id,
            now.value,
            f" (taken over by {self.taken_over})" if self.taken_over else "",
            state,
        )

    def _cost_to_records(self) -> None:
        """The job's cost and on-demand figure become its instance records' sums, in one
        statement (:meth:`~spotwise.store.bills.BillWrites.update_job_cost_to_records`), after
        its end is written: a bill another process wrote to one of its records after this run
        read its totals (a cancel's sweep of the finished job, racing its resume) is in the
        records, not in this run's count, which every save and the end wrote over the
        cancel's sum (s20 report_G case (a)); each trial's cost becomes its lives' sum first,
        for the same reason (a resumed trial's bills wrote its own count over it). Only where
        the run and its drain ended without a failure: a record write that failed after its
        bill was counted (case (b)) leaves the run's own count, then the better figure. Not
        for a run another process took over: the job's row and trials are the other's."""
        if self.taken_over:
            return
        for t in self.trials:
            t.cost_usd = self.store.update_trial_cost_to_lives(t.trial_id)
        job = self.store.update_job_cost_to_records(self.job_id)
        self.spent_usd, self.on_demand_usd = job.cost_usd, job.on_demand_cost_usd


def not_ours_lines(events: Iterable[Any]) -> list[str]:
    """One line per instance named by ``not_ours`` events (the latest event's line wins),
    in the order the instances were first named."""
    lines: dict[str, str] = {}
    for ev in events:
        d = ev.detail
        lines[str(d.get("instance") or ev.id)] = str(d.get("message") or d.get("instance"))
    return list(lines.values())


def not_ours_since(store: Any, job_id: str, after: int = 0) -> tuple[int, list[str]]:
    """The id of the job's last ``not_ours`` event (``after`` when none came since), and the
    lines (:func:`not_ours_lines`) of those recorded after event ``after``: what `spotwise
    cancel` reads before it signals a running orchestrator, and again once its drain is done."""
    rows = store.events(job_id, "not_ours", after_id=after)
    return (rows[-1].id or after if rows else after), not_ours_lines(rows)
