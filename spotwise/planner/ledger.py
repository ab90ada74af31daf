"""What the orchestrator pays: billing each instance life, releasing a noticed instance when
that is cheaper (draining every instance at the end is in :mod:`spotwise.planner.drain`, the
cleanup after a failed launch in :mod:`spotwise.planner.launch_cleanup`).

A mixin of :class:`~spotwise.planner.orchestrator.Orchestrator` (over
:class:`~spotwise.planner.drain.Drain`), kept apart so each file stays readable. Every dollar
goes through :meth:`Ledger._bill`, under the billing rule of the provider that sold the life
(:meth:`~spotwise.planner.backend.Backend.rule_of`; a job may trade on several clouds).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from spotwise.errors import ProviderError, StoreError
from spotwise.planner import storage_full
from spotwise.planner.drain import STOP_TIMEOUT_WALL_S, Drain, FailedBill
from spotwise.planner.launch_cleanup import (
    RELEASE_RETRY_WALL_S,
    UNCONFIRMED,
    UNCONFIRMED_RETRY_MAX_WALL_S,
    Unconfirmed,
    launch_leftover,
)
from spotwise.planner.policy import Event
from spotwise.planner.report import life_cost, release_is_cheaper, running_reference
from spotwise.planner.runstate import Life, TrialRun, note_wind_down
from spotwise.providers.base import Instance, InstanceState
from spotwise.store.models import TERMINAL_INSTANCE_STATES, InstanceRow

__all__ = [
    "RELEASE_RETRY_WALL_S",
    "RELEASE_TRIES",
    "STOP_TIMEOUT_WALL_S",
    "UNCONFIRMED",
    "UNCONFIRMED_RETRY_MAX_WALL_S",
    "Ledger",
    "Unconfirmed",
    "launch_leftover",
]

log = logging.getLogger("spotwise.planner")
RELEASE_TRIES = 4  # refusals before the job stops waiting; the drain tries once more, then reports
WRITE_TRIES = 8  # compare-and-set writes of a life's bill lost to another process's, then raise


class Ledger(Drain):
    job_id: str
    opts: Any  # RunOptions (poll_s)
    trials: list[TrialRun]
    lives: dict[str, tuple[TrialRun, Life]]
    spent_usd: float
    on_demand_usd: float
    leftover_ids: list[str]  # instances the drain could not terminate
    migrations: int
    unconfirmed: dict[str, Unconfirmed]  # launch id → a failed launch not confirmed clean
    budget_stops: list[tuple[TrialRun, Life]]  # this pass's budget stops, released together

    # ---- money --------------------------------------------------------------------------
    def _release_is_cheaper(self, life: Life, now: float) -> bool:
        deadline = life.notice_deadline
        if deadline is None or now >= deadline:
            return False  # the provider is taking it now; its report bills the life
        seg = self.backend.segments
        return release_is_cheaper(
            self.backend.rule_of(life.offer),  # the rule of the provider that sold this life
            seg(life.offer, life.launched_at, now),
            seg(life.offer, life.launched_at, deadline),
        )

    def _bill(
        self,
        t: TrialRun,
        life: Life,
        state: InstanceState,
        ended_at: float,
        *,
        released: bool = False,
    ) -> None:
        """Record the end of a life and its bill; ``released``: terminated by us after a notice.
        A life the provider would not terminate (``state`` RUNNING, at the drain) is billed up
        to ``ended_at`` and its record stays open: the provider may still bill it, and
        `spotwise cancel` retries.

        The life leaves :attr:`lives`, and its cost the job's totals, only once its record is
        written: a write that raises (the database locked past its wait) leaves it there, and
        how it ended in :attr:`failed_bills`, for the drain to bill again (review-ax AX2: the
        drain no longer knew it, and its record stayed ``running``)."""
        if state is InstanceState.RUNNING and life.instance_id not in self.leftover_ids:
            self.leftover_ids.append(life.instance_id)
        segs = self.backend.segments(life.offer, life.launched_at, ended_at)
        revoked = state is InstanceState.REVOKED
        kept = t.checkpoint_step if revoked or released else t.step
        rule = self.backend.rule_of(life.offer)  # each life by its own provider's rule
        cost, od, seconds = life_cost(life, segs, rule, revoked, kept, t.seconds_per_step)
        reason = (
            "revoked"
            if revoked
            else "released on notice"
            if released
            else ("completed" if t.state == "completed" else "stopped")
        )
        bill: dict[str, Any] = {
            "cost_usd": cost,
            "on_demand_cost_usd": od,
            "market_seconds": seconds,
        }
        if state is InstanceState.RUNNING:
            bill["end_reason"] = "not terminated"
        else:
            bill |= {"state": state.value, "ended_at": time.time(), "end_reason": reason}
        failed = self.failed_bills
        try:
            closed = self._write_open(life.launch_id, **bill)  # only while it is open
        except Exception:
            failed[life.instance_id] = FailedBill(state, ended_at, released)
            raise
        failed.pop(life.instance_id, None)
        self.lives.pop(life.instance_id, None)
        if closed is not None:  # another process closed and billed it: its bill is the life's
            self._billed_elsewhere(t, life, closed, ended_at)
            return
        t.cost_usd += cost
        t.on_demand_cost_usd += od
        self.spent_usd += cost
        self.on_demand_usd += od
        if not (revoked or released or state is InstanceState.RUNNING):
            # billed past its last step: the next projections count it, and so does a resume
            wound = note_wind_down(t, life, ended_at)
            if wound is not None:
                self.store.add_event(
                    self.job_id,
                    "wind_down",
                    ended_at,
                    trial_id=t.trial_id,
                    instance_id=life.launch_id,
                    seconds=wound,
                )
        self._write_cost(t, revocations=t.revocations)  # a run taken over: the lives' sum

    def _write_open(self, launch_id: str, **fields: Any) -> InstanceRow | None:
        """Write ``fields`` (a life's bill and close, or its start) to record ``launch_id``
        only while it is open, each write a compare-and-set on the record as read
        (:meth:`~spotwise.store.bills.BillWrites.rebill_instance_if_unchanged`); None: written.
        A record another process closed first (`spotwise cancel --force` while this process
        was frozen past the heartbeat's limit: it terminated the life and billed it) is
        returned as that process wrote it, untouched: a plain update wrote this bill over its
        own (s23 helper G, "noticed").  A record another process changed but left open (a
        cancel that learnt its instance) is read again and written on that."""
        for _ in range(WRITE_TRIES):
            seen = self.store.get_instance(launch_id)
            if seen.state in TERMINAL_INSTANCE_STATES:
                return seen
            if self.store.rebill_instance_if_unchanged(seen, **fields) is not None:
                return None
        raise StoreError(
            f"instance record {launch_id!r} kept changing under job {self.job_id}'s "
            f"write ({WRITE_TRIES} tries): `spotwise cancel {self.job_id}` bills it"
        )

    def _billed_elsewhere(self, t: TrialRun, life: Life, row: InstanceRow, ended: float) -> None:
        """Take the bill another process wrote when it closed ``life``'s record as the life's:
        counted once in the job's totals (the job's cost stays its records' sum), the trial's
        cost its lives' sum again, the instance no leftover (that process confirmed it gone);
        logged and a ``billed_elsewhere`` event."""
        self.closed_elsewhere.add(life.instance_id)
        if life.instance_id in self.leftover_ids:
            self.leftover_ids.remove(life.instance_id)
        cost, od = float(row.cost_usd or 0.0), float(row.on_demand_cost_usd or 0.0)
        self.spent_usd += cost
        self.on_demand_usd += od
        t.on_demand_cost_usd += od
        t.cost_usd = self.store.update_trial_cost_to_lives(t.trial_id)
        self._trial_write(t, revocations=t.revocations)
        log.warning(
            "%s: instance record %s (trial %s) was closed by another process (%s, $%.6f): "
            "its bill is kept, not written over",
            self.job_id,
            life.launch_id,
            t.trial_id,
            row.end_reason,
            cost,
        )
        self.store.add_event(
            self.job_id,
            "billed_elsewhere",
            ended,
            trial_id=t.trial_id,
            instance_id=life.launch_id,
            cost_usd=cost,
            end_reason=row.end_reason,
        )

    def _running_cost(self, now: float) -> float:
        """What the lives not billed yet cost up to ``now``, as their bills will count them: a
        noticed life we have not asked to release is costed as its provider bills a life it
        takes (AWS: nothing within the first hour; :meth:`_bill`), the others as terminated by
        us now (the rule's minimum included, as ``simulate`` counts them).
        A failed launch not confirmed clean (:class:`Unconfirmed`) may have started an
        instance: it counts at its offer's price from the start of the instance found (none
        found: from its request), until a retry settles it
        (:meth:`_retry_unconfirmed`; its bill, if any, then replaces this)."""
        total = 0.0
        for _, life in self.lives.values():
            segs = self.backend.segments(life.offer, life.launched_at, now)
            taken = life.notice_deadline is not None and not life.release_asked
            # the others as their bill would be if terminated now (AWS/GCP: a 60 s minimum)
            rule = self.backend.rule_of(life.offer)
            total += rule.charge(segs, revoked_by_provider=taken, market=life.offer.market)
        for u in self.unconfirmed.values():
            segs = self.backend.segments(u.offer, min(u.since(), now), now)
            total += sum(s * p for s, p in segs) / 3600.0
        return total

    def _running_reference(self, now: float) -> float:
        """The on-demand reference of the lives not billed yet, over the seconds
        :meth:`_running_cost` covers (:func:`~spotwise.planner.report.running_reference`)."""
        total = 0.0
        for t, life in self.lives.values():
            segs = self.backend.segments(life.offer, life.launched_at, now)
            # a noticed life that has left will most likely be revoked or released: its bill
            # keeps the checkpoint, as _bill does
            kept = t.checkpoint_step if life.notice_deadline is not None else t.step
            total += running_reference(life, segs, kept, t.seconds_per_step)
        return total

    def _try_release(self, t: TrialRun, iid: str, life: Life, now: float, what: str) -> bool:
        """Terminate a life's instance, once; a refusal is retried after a pause, never raised."""
        if life.release_asked:
            return True  # accepted before: the provider is taking it (e.g. AWS shutting-down)
        if time.monotonic() < life.release_retry_wall:
            return False
        try:
            self.backend.provisioner.terminate([iid])
            life.release_asked = True
            return True
        except ProviderError as e:
            self._event("error", now, t, error=f"terminating {what} {[iid]} failed: {e}")
        finally:
            self._beat()  # the call may have waited a kill grace (local)
        life.release_failures += 1
        life.release_retry_wall = time.monotonic() + RELEASE_RETRY_WALL_S
        return False

    def _release_all(self, lives: list[tuple[TrialRun, Life]], now: float, what: str) -> None:
        """Terminate several lives' instances in one provider call: the local provider bills
        every id of a call up to the request and waits one kill grace for them all, where one
        call each billed the later ones while the earlier ones wound down. A refused batch is
        tried again one instance at a time (:meth:`_try_release`), so that one refusal does
        not keep the others running, and each life keeps its own retry and refusal count."""
        due: dict[str, tuple[TrialRun, Life]] = {}
        for t, life in lives:
            if not life.release_asked and time.monotonic() >= life.release_retry_wall:
                due.setdefault(life.instance_id, (t, life))  # a guard repeats its stop
        if len(due) > 1:
            try:
                self.backend.provisioner.terminate(list(due))
            except ProviderError:
                pass  # one by one below: each refusal is reported against its own life
            else:
                self._beat()  # the call may have waited a kill grace (local)
                for _, life in due.values():
                    life.release_asked = True
                return
        for iid, (t, life) in due.items():
            self._try_release(t, iid, life, now, what)

    @staticmethod
    def _stop_overdue(life: Life) -> bool:
        waited = time.monotonic() - (life.stop_wall or time.monotonic())
        return waited > STOP_TIMEOUT_WALL_S

    @staticmethod
    def _given_up(life: Life) -> bool:
        """The trial has left and the provider keeps refusing to terminate: stop waiting."""
        return life.exited and life.release_failures >= RELEASE_TRIES

    def _delete_ended(self, t: TrialRun, iid: str, life: Life, now: float) -> None:
        """Delete an ended instance that still holds its resources (stopped, deallocated): it
        is still billed. If the provider refuses, its record is reopened so that the summary,
        `spotwise report` and `spotwise cancel` see it."""
        if not self._terminate_quietly(t, [iid], now, "the ended instance"):
            self.leftover_ids.append(iid)
            self.store.update_instance(life.launch_id, state="stopping", end_reason="not deleted")

    def _settle_lives(self, states: dict[str, Instance], now: float) -> list[Event]:
        """What each of our instances' state means for its life: an ended trial's life is billed
        (and a stopped-not-deleted VM deleted), an exited one released when it should be, an
        overdue stop terminated; returns the exits this reveals, as events for the policy."""
        events: list[Event] = []
        for iid, (t, life) in list(self.lives.items()):
            inst = states.get(iid)
            if inst is None:
                continue
            if not life.exited and (inst.exit_code is not None or inst.state.is_terminal()):
                events += self._read_progress(t, life, now)
                events.append(self._on_exit(t, inst.exit_code, inst.state, now))
            if life.exited:
                if inst.state.is_terminal():
                    self._bill(
                        t, life, inst.state, inst.ended_at if inst.ended_at is not None else now
                    )
                    if inst.holds_resource():  # stopped, not deleted: still billed; delete it
                        self._delete_ended(t, iid, life, now)
                elif life.notice_deadline is None:
                    # left on its own and no notice: release it now
                    if self._try_release(t, iid, life, now, "the exited instance"):
                        self._bill(t, life, InstanceState.TERMINATED, now)
                elif self._release_is_cheaper(life, now) and self._try_release(
                    t, iid, life, now, "the noticed instance"
                ):
                    # noticed, trial gone, and waiting for the provider would cost more (past
                    # the free first hour on AWS, always on Azure): released it ourselves
                    self._bill(t, life, InstanceState.TERMINATED, now, released=True)
            elif t.stopping and life.stop_wall is not None and self._stop_overdue(life):
                self._try_release(t, iid, life, now, "the instance of an overdue stop")
                if life.release_failures >= RELEASE_TRIES:  # neither trial nor provider lets go
                    events += self._read_progress(t, life, now)
                    events.append(self._on_exit(t, None, inst.state, now))  # the drain reports it
        storage_full.raise_if_full(self)  # a trial's checkpoint storage is full: the job ends
        return events

    def _budget_spent(self) -> bool:
        """No new trial starts: the cap is reached, or the budget stopped a trial before it
        ever launched (a new one would not fit either). A running trial the budget stopped
        (shed while the running projections overrun) says nothing of what a new one needs."""
        cap = self.spec.budget.max_cost_usd
        if cap is None:
            return False
        never_ran = any("budget" in t.limits_hit and t.lives_started == 0 for t in self.trials)
        return self.spent_usd >= cap or never_ran

    def _save_totals(self, now: float) -> None:
        """The running job's spend so far (running instances as if they ended now) and its
        on-demand reference over the same seconds (`spotwise status` compares the two). The
        job's end writes the billed totals over them. The same write carries the heartbeat
        (:meth:`~spotwise.store.heartbeat.Heartbeat.carried`): a dead local job's lives are
        billed up to it, so at most this save's period of their run goes unbilled, not the
        heartbeat's own (5 wall s: 1500 market s at 300x), and no write is added."""
        beat = {"heartbeat_at": self.heartbeat.carried()} if self.heartbeat is not None else {}
        self._write_totals(
            cost_usd=self.spent_usd + self._running_cost(now),
            on_demand_cost_usd=self.on_demand_usd + self._running_reference(now),
            revocations=self.revocations,
            migrations=self.migrations,
            early_stopped=self.early_stopped,
            **beat,
        )

    def _write_totals(self, **fields: Any) -> None:
        """The job row's running totals (:class:`~spotwise.planner.job_summary.JobSummary`'s
        only while its row names this run)."""
        self.store.update_job(self.job_id, **fields)
