"""The drain's last look for a job's strays (:meth:`StraySweep._sweep_strays`): an instance with
the job's tags that no record of it names, terminated and billed to its launch's record.

A mixin under :class:`~spotwise.planner.launch_cleanup.LaunchCleanup` (over
:class:`~spotwise.planner.trialbook.TrialBook`), with the two helpers both use (which listed
instances are the job's own, a terminate that never crashes), split from
:mod:`spotwise.planner.launch_cleanup` so that each file stays readable.

A stray is billed the way `spotwise cancel`'s sweep of a finished job bills one
(:func:`~spotwise.release_sweep.sweep_finished`), so that the two at once bill it once: its
record only while it is still as read before the listing (a compare-and-set,
:meth:`~spotwise.store.bills.BillWrites.rebill_instance_if_unchanged`), its trial's cost set to
its lives' sum in one statement.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from spotwise.errors import ProviderError
from spotwise.planner.runstate import TrialRun
from spotwise.planner.trialbook import TrialBook
from spotwise.providers.base import (
    TAG_JOB,
    TAG_LAUNCH,
    Instance,
    Market,
    Offer,
    launched_by,
    not_ours_line,
)
from spotwise.store.bills import InstanceBills
from spotwise.store.models import TERMINAL_INSTANCE_STATES

if TYPE_CHECKING:
    from spotwise.planner.launch_cleanup import Unconfirmed
    from spotwise.store.heartbeat import Heartbeat


def launch_leftover(launch_id: str) -> str:
    """How a leftover known only by its launch is named to the user: `spotwise cancel` finds
    its instance by the launch's ``spotwise:launch`` tag."""
    return f"launch {launch_id} (no instance id known)"


class StraySweep(TrialBook):
    job_id: str
    spent_usd: float
    leftover_ids: list[str]  # instances (or launches) the job could not confirm terminated
    unconfirmed: dict[str, Unconfirmed]  # launch id → a failed launch not confirmed clean
    heartbeat: Heartbeat | None = None  # the orchestrator's, once its run has started

    def _beat(self) -> None:
        """Say the orchestrator is alive, after a call that may block (a local terminate waits
        a kill grace) and while the drain waits: written at most every
        ``HEARTBEAT_EVERY_WALL_S`` however often it is called, as the loop's
        (:class:`~spotwise.store.heartbeat.Heartbeat`), so that a record written just after
        is within :data:`spotwise.last_alive.LATE_S` of the last heartbeat."""
        if self.heartbeat is not None:
            self.heartbeat.beat()

    def _bill_discarded(
        self,
        t: TrialRun,
        held: list[Instance],
        asked_at: float,
        ended_at: float,
        offer: Offer,
        revoked: bool = False,
    ) -> tuple[float, float]:  # LaunchCleanup's
        raise NotImplementedError

    def _ours(
        self, found: list[Instance], launch_ids: set[str], now: float, t: TrialRun | None = None
    ) -> list[Instance]:
        """Of ``found`` (listed with the job's tags), the instances one of ``launch_ids`` made
        (:func:`~spotwise.providers.base.launched_by`); each other one still holding a resource
        is left alone, never terminated nor billed, with a ``not_ours`` event saying so."""
        ours = [i for i in found if launched_by(i, self.job_id, launch_ids)]
        kept = {i.instance_id for i in ours}
        for inst in found:
            if inst.instance_id not in kept and inst.holds_resource():
                line = not_ours_line(inst, self.job_id, launch_ids)
                self._event("not_ours", now, t, instance=inst.instance_id, message=line)
        return ours

    def _terminate_quietly(self, t: TrialRun, ids: list[str], now: float, what: str) -> bool:
        """Terminate ``ids``; a provider error becomes an "error" event (never a crash)."""
        try:
            self.backend.provisioner.terminate(ids)
        except ProviderError as e:
            self._event("error", now, t, error=f"terminating {what} {ids} failed: {e}")
            return False
        finally:
            self._beat()  # the call may have waited a kill grace (local)
        self._event("terminated", now, t, instances=ids, reason=what)
        return True

    def _sweep_strays(self, now: float) -> None:
        """The drain's last look: an instance with the job's tags that still holds a resource
        and that no record of the job names (a create the cloud took although its call failed,
        missed by every listing of its launch) is terminated and billed, from its start, to
        its launch's record, trial and job; one that will not terminate is a leftover. Only an
        instance a launch of the job made counts (its launch tag names a record of the job and
        the cloud's own identity of it is that launch): any other is left alone
        (:meth:`_ours`). The records are read before the listing: one whose bill changed since
        (a `spotwise cancel` that found the same stray and billed it first) is not billed
        again; each of a launch's strays is decided on its own (:meth:`_bill_stray`)."""
        rows = {r.id: r for r in self.store.list_instances(self.job_id)}
        try:
            found = self.backend.provisioner.describe({TAG_JOB: self.job_id})
        except ProviderError as e:
            self._event("error", now, None, error=f"the last listing of the job failed: {e}")
            self._settled_by_cancel()  # the cancel's close is known all the same
            return
        known = {r.provider_instance_id for r in rows.values()} | set(self.leftover_ids)
        trials = {t.trial_id: t for t in self.trials}
        found = [i for i in found if i.instance_id not in known]  # each life's own: settled
        bills = InstanceBills(self.store, rows)  # each stray decided on its own (review-al F7)
        for inst in self._ours(found, set(rows), now):
            row = rows[inst.tags[TAG_LAUNCH]]
            if not inst.holds_resource():
                continue
            t = trials.get(row.trial_id)
            if t is None:
                continue
            offer = Offer(
                provider=row.provider,
                region=row.region,
                zone=row.zone,
                instance_type=row.instance_type,
                market=Market(row.market),
                price_per_hour=row.price_per_hour,
                # a cloud bills an on-demand life at the offer's on-demand price, which for an
                # on-demand record is its price (review-an F3: 0.0 billed such a stray $0)
                on_demand_price_per_hour=row.price_per_hour if row.market == "on-demand" else 0.0,
            )
            if not self._terminate_quietly(t, [inst.instance_id], now, "a stray instance"):
                self.leftover_ids.append(inst.instance_id)
                continue
            if bills.elsewhere(row.id, inst.instance_id):  # the other process bills it
                continue
            # from its start as the provider lists it (no start known: nothing to bill)
            start = inst.launched_at if inst.launched_at > 0 else now
            cost, seconds = self._bill_discarded(t, [inst], start, now, offer)
            self._bill_stray(t, row.id, inst, cost, seconds, bills)
        self._settled_by_cancel()

    def _settled_by_cancel(self) -> None:
        """A failed launch the drain could not confirm clean, with no instance of it found,
        whose record a `spotwise cancel` closed meanwhile (it settled the launch: what it found
        of it terminated and billed, or confirmed gone) is no leftover of the job (s22 A2 gap
        4: it stayed one where the drain found no stray of it to bill)."""
        for launch_id, u in list(self.unconfirmed.items()):
            name = launch_leftover(launch_id)
            if u.ids or name not in self.leftover_ids:
                continue
            if self.store.get_instance(launch_id).state in TERMINAL_INSTANCE_STATES:
                del self.unconfirmed[launch_id]
                self.leftover_ids.remove(name)

    def _bill_stray(
        self,
        t: TrialRun,
        row_id: str,
        inst: Instance,
        cost: float,
        seconds: float,
        bills: InstanceBills,
    ) -> bool:
        """Add a terminated stray's ``cost`` and ``seconds`` (already in the trial's and the
        job's spend: :meth:`_bill_discarded`) to its launch's record ``row_id`` as read before
        the listing (then as written or read by ``bills``: the next stray of the launch adds to
        this one's bill), only while the record is still as read; whether it was. What another
        process (a cancel's sweep that found the same strays) billed the record meanwhile is
        added to the spend, and where it billed this stray, its bill replaces ``cost``, so that
        the job's end counts each stray once, as the record does. A failed launch's record the
        drain could not confirm clean is closed by its first stray's bill, unless a cancel
        closed it meanwhile (its close and end stay; the launch is settled either way: no
        leftover). The trial's cost becomes its lives' sum, in one statement (was: the
        orchestrator's own count, over a bill a cancel had set meanwhile)."""
        close: dict[str, object] = {}
        u = self.unconfirmed.get(row_id)
        settles = u is not None and not u.ids  # its launch's listings never found it
        if settles:
            close = {"state": "failed", "end_reason": "failed", "ended_at": time.time()}

        def fields(seen: Any) -> dict[str, Any]:
            named = {} if seen.provider_instance_id else {"provider_instance_id": inst.instance_id}
            # closed meanwhile (a cancel settled the launch): its close, its end, stay
            return {**named, **(close if seen.state not in TERMINAL_INSTANCE_STATES else {})}

        out = bills.bill(
            row_id, inst.instance_id, {"cost_usd": cost, "market_seconds": seconds}, fields
        )
        took = out.others_usd - (0.0 if out.written is not None else cost)
        if took:
            t.cost_usd += took
            self.spent_usd += took
        if settles and bills.rows[row_id].state in TERMINAL_INSTANCE_STATES:
            del self.unconfirmed[row_id]  # settled (here, or by a cancel): no longer a leftover
            self.leftover_ids.remove(launch_leftover(row_id))
        # over what _bill_discarded wrote (the orchestrator's count)
        if cost or out.written is None or out.others_usd:
            self.store.update_trial_cost_to_lives(t.trial_id)
        return out.written is not None
