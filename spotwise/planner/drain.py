"""How the orchestrator leaves (:meth:`Drain._drain`): no instance behind, every life billed,
every trial closed, and the job ended whatever one of those steps raised.

A mixin under :class:`~spotwise.planner.ledger.Ledger` (over
:class:`~spotwise.planner.launch_cleanup.LaunchCleanup`), split from :mod:`spotwise.planner.ledger`
so that each file stays readable: it bills through the ledger's ``_bill``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from spotwise.errors import ProviderError, StoreError
from spotwise.planner.backend import Backend
from spotwise.planner.launch_cleanup import LaunchCleanup, Unconfirmed, launch_leftover
from spotwise.planner.reconcile_ends import TERMINATING
from spotwise.planner.runstate import Life, TrialRun
from spotwise.providers.base import TAG_JOB, InstanceState

log = logging.getLogger("spotwise.planner")
#: A trial asked to stop that has not exited by then is terminated; the drain waits as long for
#: the lives a notice is taking.
STOP_TIMEOUT_WALL_S = 30.0


def _trace(e: BaseException) -> BaseException | None:
    """The traceback a drain step's log line carries: none for a database failure
    (:class:`StoreError`: expected, its one line says what and what to do; a full disk printed
    ~24 tracebacks, review-bf BF3), the exception's for anything else (a bug)."""
    return None if isinstance(e, StoreError) else e


class FailedBill(NamedTuple):
    """How a life ended whose record's write raised (:meth:`Drain._bill`): the drain bills it
    again so (:meth:`Drain._rebill_failed`)."""

    state: InstanceState
    ended_at: float
    released: bool


class Drain(LaunchCleanup):
    job_id: str
    opts: Any  # RunOptions (poll_s)
    trials: list[TrialRun]
    lives: dict[str, tuple[TrialRun, Life]]
    leftover_ids: list[str]  # instances the drain could not terminate
    unconfirmed: dict[str, Unconfirmed]  # launch id → a failed launch not confirmed clean
    drain_failures: list[tuple[str, Exception]]  # the drain's failed steps, and why
    _terminate_asked: bool  # a terminate step of this drain called the provider

    def _bill(
        self,
        t: TrialRun,
        life: Life,
        state: InstanceState,
        ended_at: float,
        *,
        released: bool = False,
    ) -> None:  # Ledger's
        raise NotImplementedError

    def _delete_ended(self, t: TrialRun, iid: str, life: Life, now: float) -> None:  # Ledger's
        raise NotImplementedError

    @property
    def failed_bills(self) -> dict[str, FailedBill]:
        """Instance id → how a life ended whose bill's write raised; it is still in
        :attr:`lives` (:meth:`_bill` takes it out once its record is written)."""
        found: dict[str, FailedBill] = self.__dict__.setdefault("_failed_bills", {})
        return found

    @property
    def closed_elsewhere(self) -> set[str]:
        """Instance ids of lives whose record another process closed and billed before this
        one's bill (`spotwise cancel --force` of a frozen orchestrator): :meth:`_bill` took
        that bill as the life's; it confirmed the instance gone, so it is no leftover."""
        found: set[str] = self.__dict__.setdefault("_closed_elsewhere", set())
        return found

    # ---- ending -------------------------------------------------------------------------
    def _drain(self, backend: Backend) -> Exception | None:
        """Leave no instance behind: terminate what runs and no notice is taking, before any
        write to the database; wait a while for the lives a notice is taking, terminate the
        rest, bill them all (a life known ended, its bill's write failed, as it ended), settle
        the failed launches, sweep for strays, close the trials still open and the backend.
        Each step runs whatever an earlier one raised (a bug, the store: the job stayed
        "running" with no orchestrator until `spotwise cancel`): the failure is logged and an
        ``error`` event, and the first is returned for the caller to end the job with
        (:meth:`drain_error` names each failed step). Money first: a life whose terminate was
        not confirmed, and a failed launch not confirmed clean, are leftovers even where their
        step failed; and the database, which may be what failed the job (a lock held past the
        store's patience), is not waited on before the first terminate (review-az AZ2: a
        re-bill, its error event and a heartbeat first kept every instance ~10 min more). The
        heartbeat is written all along (:meth:`_beat`): the wait alone may take
        :data:`STOP_TIMEOUT_WALL_S`."""
        now = backend.now()
        self.drain_failures = []
        self._terminate_asked = False
        steps: list[tuple[str, Callable[[], Exception | None]]] = [
            ("terminating the running instances", lambda: self._terminate_all(backend, now, True)),
            ("waiting for the noticed instances", lambda: self._await_noticed(backend, now)),
            ("terminating the running instances", lambda: self._terminate_all(backend, now)),
            ("billing the lives whose bill failed", lambda: self._rebill_failed(last=False)),
            ("settling the failed launches", lambda: self._settle_or_hold(now)),
            ("sweeping for stray instances", lambda: self._sweep_strays(now)),
            ("billing the lives whose bill failed", lambda: self._rebill_failed(last=True)),
            ("closing a trial", lambda: self._close_open_trials(now)),  # says its own
            ("closing the backend", backend.close),
        ]
        for n, (what, step) in enumerate(steps):
            if n:  # not before the first terminate: the database may be what is held
                self._beat()
            try:
                failed = step()
            except Exception as e:  # a bug or the store: the later steps still run
                failed = e
                said = f"{what} failed: {type(e).__name__}: {e}"
                log.error("%s: the drain: %s", self.job_id, said, exc_info=_trace(e))
                with contextlib.suppress(Exception):  # the store may be what failed
                    self._event("error", now, None, error=said)
            if failed is not None:
                self.drain_failures.append((what, failed))
        return self.drain_failures[0][1] if self.drain_failures else None

    def drain_error(self, first: Exception) -> str:
        """The job's error for the drain's failed steps (``first``: the one it returned)."""
        failed = getattr(self, "drain_failures", None) or [("closing a trial", first)]
        return "; ".join(f"{what} failed: {type(e).__name__}: {e}" for what, e in failed)

    def _ended(self, iid: str) -> bool:
        """A life known ended whose bill's write failed (:attr:`failed_bills`): the drain
        never terminates it, and bills it as it ended (:meth:`_rebill_failed`)."""
        how = self.failed_bills.get(iid)
        return how is not None and how.state is not InstanceState.RUNNING

    def _rebill_failed(self, last: bool = True) -> None:
        """Write again the bill of each life known ended whose record's write raised
        (:meth:`_bill`), as it ended: a life the market revoked keeps its revoked state and
        bill ($0 in AWS's first hour), never terminated by the drain and billed as ours
        (review-ax AX2, review-az AZ3). Tried after the terminates and, for those that failed
        again, at the ``last`` step once more (the database may come back meanwhile): one
        that fails then is confirmed ended, so no leftover: it leaves :attr:`lives`, its
        record stays open for `spotwise cancel` to bill, and the log names the records."""
        first: Exception | None = None
        left: list[str] = []
        for iid, how in list(self.failed_bills.items()):
            held = self.lives.get(iid)
            if held is None or how.state is InstanceState.RUNNING:  # a leftover's: named
                self.failed_bills.pop(iid, None)
                continue
            t, life = held
            try:
                self._bill(t, life, how.state, how.ended_at, released=how.released)
            except Exception as e:  # the others are still tried
                first = first or e
                left.append(life.launch_id)
        if first is None:
            return
        if not last:
            log.warning("%s: billing ended lives failed (%s): tried again", self.job_id, first)
            return
        for iid in [i for i in self.failed_bills if self._ended(i)]:
            self.lives.pop(iid, None)
        log.error(
            "%s: the bill of ended instance record(s) %s could not be written: left open for "
            "`spotwise cancel %s` to bill",
            self.job_id,
            ", ".join(left),
            self.job_id,
        )
        raise first

    def _await_noticed(self, backend: Backend, now: float) -> None:
        """Wait up to :data:`STOP_TIMEOUT_WALL_S` for the lives a notice is taking, billing
        each one its provider ends; the others are terminated next."""
        waited = time.monotonic()
        first: Exception | None = None  # a bill's write that failed: the others still wait
        while any(
            life.notice_deadline and not self._ended(iid) for iid, (_, life) in self.lives.items()
        ):
            self._beat()  # written every HEARTBEAT_EVERY_WALL_S, as in the loop
            if time.monotonic() - waited > STOP_TIMEOUT_WALL_S:
                break  # the provider is slow to take them: terminate below
            try:
                found = backend.provisioner.describe({TAG_JOB: self.job_id})
            except ProviderError:  # cannot see them: terminate them below, do not stop here
                break
            states = {i.instance_id: i for i in found}
            for iid, (t, life) in list(self.lives.items()):
                inst = states.get(iid)
                if inst is not None and inst.state.is_terminal() and not self._ended(iid):
                    try:  # failed: known ended (failed_bills), billed after the terminate
                        self._bill(t, life, inst.state, inst.ended_at or backend.now())
                    except Exception as e:
                        first = first or e
                        continue
                    if inst.holds_resource():  # stopped or deallocated, not deleted: delete it
                        self._delete_ended(t, iid, life, now)
            time.sleep(self.opts.poll_s)
        if first is not None:
            raise first

    def _close_open_trials(self, now: float) -> Exception | None:
        """Close the trials still open; one whose close fails does not keep the others open
        (:meth:`_close_failed` says so): the first failure is returned. A run another process
        took over closes them here only: their rows are the other run's (:meth:`_trial_write`)."""
        failed: Exception | None = None
        for t in self.trials:
            if not t.phase.is_terminal():
                try:
                    self._close_trial(t, "cancelled", now)
                except Exception as e:  # a bug or the store: the other trials still close
                    failed = failed or e
                    self._close_failed(t, e, now)
        return failed

    def _close_failed(self, t: TrialRun, error: Exception, now: float) -> None:
        """Say that closing ``t`` failed, and end its record with the fewest fields (the
        failing field may be one of the others); nothing here may raise again."""
        said = f"closing trial {t.trial_id} failed: {type(error).__name__}: {error}"
        log.error("%s: %s", self.job_id, said, exc_info=_trace(error))
        with contextlib.suppress(Exception):
            self._trial_write(t, state="cancelled", ended_at=time.time())
        with contextlib.suppress(Exception):
            self._event("error", now, t, error=said)

    def _terminate_all(self, backend: Backend, now: float, unnoticed: bool = False) -> None:
        """:meth:`_terminate_running` of the lives still running (``unnoticed``: only those no
        notice is taking, the drain's first step; a life known ended, :meth:`_ended`, never);
        a life it left unbilled, whatever it raised, is not known to be terminated: billed up
        to now, its record open, and named a leftover even where that bill fails too (the
        job's end says what may still be billed)."""
        ids = [
            iid
            for iid, (_, life) in self.lives.items()
            if not self._ended(iid) and not (unnoticed and life.notice_deadline)
        ]
        if not ids and (unnoticed or self.__dict__.get("_terminate_asked")):
            return  # (the last terminate step is always called, with nothing to terminate)
        self._terminate_asked = True
        try:
            self._terminate_running(backend, now, ids)
        finally:
            for iid in ids:
                if iid not in self.lives or self._ended(iid):  # terminated, its bill failed:
                    continue  # billed as it ended next (_rebill_failed), no leftover
                t, life = self.lives[iid]
                at = now
                try:
                    at = backend.now()
                    self._bill(t, life, InstanceState.RUNNING, at)  # names it first
                except Exception as e:
                    log.error("%s: billing %s failed: %s", self.job_id, iid, e, exc_info=_trace(e))
                self.lives.pop(iid, None)
                if iid not in self.leftover_ids and iid not in self.closed_elsewhere:
                    self.leftover_ids.append(iid)

    def _terminate_running(self, backend: Backend, now: float, ids: list[str]) -> None:
        """Terminate the lives ``ids`` in one provider call (one kill grace for all on the
        local provider), each billed up to the request, not the wind-down. A refused batch is
        tried one instance at a time: a life the provider still will not let go is billed up
        to its request and its record stays open (a leftover). Every terminate is asked
        before any life's bill or event is written (the database may be held: review-az
        AZ2); those it accepted are then noted, before their bills, with when they were asked
        (:meth:`_note_terminating`). Another error (a bug, the store) stops no other life's
        terminate or bill: the first is raised once all are done, and a life whose terminate
        raised it is a leftover."""
        running = [(iid, self.lives[iid]) for iid in ids]
        bugs: list[Exception] = []
        if len(running) > 1:
            asked, done = backend.now(), False
            try:
                backend.provisioner.terminate([iid for iid, _ in running])
                done = True
            except Exception as e:  # one by one below: each reported against its own life
                bugs += [] if isinstance(e, ProviderError) else [e]
            if done:
                self._note_terminating(backend, [life.launch_id for _, (_, life) in running], asked)
                self._beat()  # the call may have waited a kill grace (local)
                for _, (t, life) in running:
                    self._bill_noting(t, life, InstanceState.TERMINATED, asked, bugs)
                running = []
        done_each: list[tuple[TrialRun, Life, InstanceState, float, str]] = []
        for iid, (t, life) in running:  # every terminate first, then the bills
            asked, state, refused = backend.now(), InstanceState.TERMINATED, ""
            try:
                backend.provisioner.terminate([iid])
            except ProviderError as e:
                refused = f"terminate failed: {e}"
                state = InstanceState.RUNNING  # billed up to its request, its record open
            except Exception as e:  # not confirmed terminated either
                bugs.append(e)
                state = InstanceState.RUNNING
            done_each.append((t, life, state, asked, refused))
            if not refused and state is InstanceState.TERMINATED:
                self._note_terminating(backend, [life.launch_id], asked)
        self._beat()
        for t, life, state, asked, refused in done_each:
            if refused:
                try:
                    self._event("error", now, t, error=refused)
                except Exception as e:  # the store: the bill is still tried
                    bugs.append(e)
            self._bill_noting(t, life, state, asked, bugs)
        if bugs:
            raise bugs[0]

    def _note_terminating(self, backend: Backend, launches: list[str], asked: float) -> None:
        """Write, once the provider accepted the deletes of the lives of ``launches``, when
        they were ``asked`` (a :data:`~spotwise.planner.reconcile_ends.TERMINATING` event): a
        drain killed before their bills leaves their records open, and `spotwise cancel`,
        finding an instance gone whose provider does not say when (Azure), ends it there, not
        at the cancel (review-bb F2). Only accepted deletes (review-bg BG2: a refused one's
        instance ran on, and was billed short), and after them (BG1: written first, it held
        every terminate up to a busy timeout while another process held the database). Tried
        once, never waited out (the store's patience wraps only the instance's methods), and
        not at all once the store is known held (a bill's write failed, or it gave up on a
        lock). A cloud's only: a local job's cancel bills its processes by their own records."""
        if not launches or getattr(backend.provisioner, "name", "") == "local":
            return
        if self.failed_bills or getattr(self.store, "_lock_gave_up", False):
            return
        with contextlib.suppress(Exception):
            type(self.store).add_event(
                self.store, self.job_id, TERMINATING, asked, launches=launches
            )

    def _bill_noting(
        self, t: TrialRun, life: Life, state: InstanceState, at: float, bugs: list[Exception]
    ) -> None:
        """:meth:`_bill`, its error added to ``bugs`` (a life billed ``RUNNING`` is named a
        leftover before anything can fail)."""
        try:
            self._bill(t, life, state, at)
        except Exception as e:
            bugs.append(e)

    def _settle_or_hold(self, now: float) -> None:
        """:meth:`_settle_unconfirmed`; where it fails, each failed launch it had not closed
        clean (its record ``failed``) is a leftover all the same, as it would have named it."""
        launches = dict(self.unconfirmed)
        try:
            self._settle_unconfirmed(now)
        except Exception:
            for launch_id, before in launches.items():
                u = self.unconfirmed.get(launch_id)
                if u is None and self._closed_clean(launch_id):
                    continue
                for name in (u or before).ids or [launch_leftover(launch_id)]:
                    if name not in self.leftover_ids:
                        self.leftover_ids.append(name)
            raise

    def _closed_clean(self, launch_id: str) -> bool:
        try:
            return bool(self.store.get_instance(launch_id).end_reason == "failed")
        except Exception:  # cannot tell: held
            return False

    def leftovers(self) -> list[str]:
        """After the drain: the instances the provider would not terminate, still billed, and
        the failed launches not confirmed clean (:func:`launch_leftover`)."""
        return sorted(self.leftover_ids)

    def leftover_error(self, error: str | None) -> str | None:
        """``error`` with the leftovers named after it, so the job's record says what to do."""
        ids = self.leftovers()
        if not ids:
            return error
        said = (
            f"{len(ids)} instance(s) could not be terminated and may still be billed: "
            f"{', '.join(ids)}; retry with `spotwise cancel {self.job_id}`"
        )
        return said if error is None else f"{error}; {said}"
