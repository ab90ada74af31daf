"""A failed launch's cleanup: the instance its launch may have left (the cloud can accept a
create before the call fails), terminated and billed, or, while that cannot be confirmed,
counted in the spend, retried on a doubling pause, and at the end named as a leftover.

A mixin of :class:`~spotwise.planner.ledger.Ledger` (over
:class:`~spotwise.planner.stray_sweep.StraySweep`: the drain's last look for strays), kept
apart so each file stays readable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from spotwise.errors import ProviderError, StoreError
from spotwise.planner.resumed_end import held, holding, recheck
from spotwise.planner.runstate import TrialRun
from spotwise.planner.stray_sweep import StraySweep
from spotwise.planner.stray_sweep import launch_leftover as launch_leftover  # ledger's
from spotwise.providers.base import (
    TAG_JOB,
    TAG_LAUNCH,
    Instance,
    InstanceState,
    Offer,
    listing_lag_s,
    unconfirmed_ended_line,
    unconfirmed_launch,
)
from spotwise.store.bills import InstanceBills
from spotwise.store.models import TERMINAL_INSTANCE_STATES, InstanceRow

RELEASE_RETRY_WALL_S = 5.0  # a refused terminate is retried this long after
#: A failed launch's cleanup that keeps failing is retried after a pause that doubles from
#: RELEASE_RETRY_WALL_S up to this: each try that fails writes an "error" event.
UNCONFIRMED_RETRY_MAX_WALL_S = 300.0
#: A trial whose failed launch may have left an instance running it is not launched again for
#: up to this long (wall seconds from the failure), while the cleanup looks for that instance:
#: two copies of a trial would write the same checkpoints, and the copy that is not ours can
#: finish the trial under the relaunch, which then resumes at its last step with nothing to do.
RELAUNCH_HOLD_MAX_WALL_S = 300.0
#: The end reason of an open record of a failed launch that may have left an instance: its
#: tagged instances could not be listed, or terminated (see ``LaunchCleanup._discard_launch``).
UNCONFIRMED = "unconfirmed"
WRITE_TRIES = 8  # compare-and-set writes of a failed launch's record lost, then raise


@dataclass
class Unconfirmed:
    """A failed launch whose cleanup was not confirmed: it may hold a billed instance."""

    trial: TrialRun
    ids: list[str]  # the instances found holding a resource (none known: the listing failed)
    asked_at: float  # when the launch was asked for (market clock)
    offer: Offer  # what it was for: its price and its provider's rule
    retry_wall: float = 0.0  # wall time (monotonic) before which its cleanup is not retried
    tries: int = 1  # cleanups tried and not confirmed: the pause doubles with each
    started_at: float | None = None  # the earliest start of the instances found (market clock)
    # the launch call failed in a way that says nothing of the create (a timeout, a 5xx, a
    # throttled retry): an empty listing proves nothing before ``trust_wall`` (monotonic)
    trust_wall: float = 0.0
    hold_wall: float = 0.0  # its trial is not launched again before this (monotonic)
    cost: float = 0.0  # what the instances its tries terminated cost (billed), and ran
    seconds: float = 0.0
    billed_id: str = ""  # the instance(s) found holding a resource, billed when terminated

    def pause(self) -> float:
        """How long to wait before the next try: doubling, capped (a cloud that keeps refusing
        is not asked, and its refusal not recorded, every few seconds for the whole job)."""
        return min(RELEASE_RETRY_WALL_S * 2 ** (self.tries - 1), UNCONFIRMED_RETRY_MAX_WALL_S)

    def since(self) -> float:
        """Where its running cost starts: the instance found, else the launch request."""
        return self.started_at if self.started_at is not None else self.asked_at


@dataclass
class Discarded:
    """What a failed launch's cleanup found and did (:meth:`LaunchCleanup._discard`)."""

    clean: bool  # nothing of the launch is left: listed, and what it found terminated
    held: list[Instance]  # its instances found still holding a resource
    cost: float = 0.0  # what those it terminated cost (:meth:`LaunchCleanup._bill_discarded`)
    seconds: float = 0.0  # and ran, in market seconds
    # ended ones with its tag whose cloud does not confirm it (unconfirmed_launch), as listed
    gone: list[Instance] = field(default_factory=list)
    own: str = ""  # an instance of the launch the cloud confirms (listed): its id
    # each instance of ``held`` terminated here → its (cost, seconds), counted in the spend
    each: dict[str, tuple[float, float]] = field(default_factory=dict)
    ended: Instance | None = None  # that one, when it has ended and none of them holds anything


class LaunchCleanup(StraySweep):
    job_id: str
    spent_usd: float
    leftover_ids: list[str]  # instances (or launches) the job could not confirm terminated
    unconfirmed: dict[str, Unconfirmed]  # launch id → a failed launch not confirmed clean
    taken_over: str = ""  # JobSummary's: who took the job over from this run, once heard

    def _write_cost(self, t: TrialRun, **fields: Any) -> None:
        """``t``'s cost (and ``fields``) to its row, as :meth:`_trial_write` writes; a run another
        process took over writes no field of it but the cost, as the sum of the trial's instance
        records' (its lives', this run's bills included: real money), right whichever process
        writes it (s24 helper G). Call it once the bill is on its record."""
        if not self._trial_write(t, cost_usd=t.cost_usd, **fields):
            self.store.update_trial_cost_to_lives(t.trial_id)

    # ---- failed launches -------------------------------------------------------------------
    def _close_failed_launch(
        self,
        t: TrialRun,
        launch_id: str,
        now: float,
        offer: Offer,
        unsure: bool = False,
        final: bool = False,
    ) -> None:
        """Close a failed launch's record as ``failed`` once :meth:`_discard_launch` confirms
        nothing of it is left. After an ``unsure`` failure (the call's error says nothing of
        the create: :class:`~spotwise.errors.TransientError`) an empty listing confirms it only
        once the provider's listing lag (:func:`listing_lag_s`) has passed since the request,
        or at the ``final`` try of the drain, which waits that long first. Otherwise the
        record stays open (``requested``, end reason :data:`UNCONFIRMED`): it may hold a billed
        instance, which the budget counts
        (:meth:`_running_cost`). The loop tries again after a pause that doubles with each try
        (:meth:`Unconfirmed.pause`, :meth:`_retry_unconfirmed`), and the drain once more
        (:meth:`_settle_unconfirmed`); one still unconfirmed then is a
        leftover of the job, `spotwise report` lists it as held and `spotwise cancel` finds it
        by its launch tag. ``now`` (market clock): when the launch was asked for; ``offer``:
        what it was for."""
        seen = self.store.get_instance(launch_id)  # before the listing: see _write_launch
        d = self._discard(t, launch_id, now, offer)
        confirmed, held, cost, seconds = d.clean, d.held, d.cost, d.seconds
        ids = [i.instance_id for i in held]
        before = self.unconfirmed.pop(launch_id, None)
        trust_wall = before.trust_wall if before is not None else 0.0
        if unsure and before is None:
            trust_wall = time.monotonic() + listing_lag_s(self.backend.provisioner)
        if confirmed and not held and not final and time.monotonic() < trust_wall:
            confirmed = False  # not listed yet, perhaps: look again once the lag has passed
        # what any try terminated is a billed life, on the record as in the spend (review-ad
        # F4: an unconfirmed try's was left off it); `cancel`/support find it by its id
        if before is not None:
            cost, seconds = cost + before.cost, seconds + before.seconds
        bill = {"cost_usd": cost, "market_seconds": seconds, "on_demand_cost_usd": 0.0}
        bill = bill if cost or seconds else {}
        if confirmed:  # an ended one is billed once, unless a try billed its own (_bill_gone)
            found = {"provider_instance_id": ids[0]} if len(ids) == 1 else {}
            close = {"state": "failed", "end_reason": "failed", "ended_at": time.time()}
            earlier = before.billed_id if before and before.seconds else ""
            ended = self._bill_gone(t, d, now, offer, billed=earlier)
            gone = float(ended.get("cost_usd", 0.0))  # type: ignore[arg-type]
            self._write_launch(t, seen, {**close, **bill, **found, **ended}, d, gone)
            return
        if final:  # the last try: its record stays open, a leftover of the job
            self._bill_gone(t, d, now, offer, closed=False)
        starts = [i.launched_at for i in held if i.launched_at > 0]
        started = min(starts) if starts else None
        if not ids and before is not None:
            ids = before.ids  # the listing failed this time: the instances found before stay
            started = before.started_at
        # one instance found (its terminate refused): its id lets `cancel` match the record
        found = {"provider_instance_id": ids[0]} if len(ids) == 1 else {}
        if not self._write_launch(t, seen, {"end_reason": UNCONFIRMED, **found, **bill}, d):
            return  # another process settled it: no longer held, nor a leftover
        u = Unconfirmed(t, ids, now, offer, tries=before.tries + 1 if before else 1)
        u.started_at, u.trust_wall = started, trust_wall
        u.cost, u.seconds = cost, seconds  # what its tries terminated, billed (on the record)
        u.billed_id = before.billed_id if before and before.billed_id else ",".join(ids)
        u.hold_wall = before.hold_wall if before else time.monotonic() + RELAUNCH_HOLD_MAX_WALL_S
        u.retry_wall = time.monotonic() + u.pause()
        if ids == [] and time.monotonic() < trust_wall:  # nothing refused: only the lag to wait
            u.retry_wall = min(u.retry_wall, trust_wall)
        self.unconfirmed[launch_id] = u

    def _write_launch(
        self,
        t: TrialRun,
        seen: InstanceRow,
        fields: dict[str, Any],
        d: Discarded,
        gone: float = 0.0,
    ) -> bool:
        """Write a failed launch's record ``fields`` only while it is open (a compare-and-set
        on it as read, ``seen``: before its listing); whether it was. One another process
        closed first (`spotwise cancel --force` of this job while it was frozen) keeps its
        close and bill (a plain update wrote this one over them): what this cleanup terminated
        and the closer did not bill is added to it as a part naming it, as the stray sweep
        bills one (:meth:`_bill_stray`); a bill counted here that the closer wrote instead is
        taken out of the spend (``gone``: :meth:`_bill_gone`'s); an instance that would not
        terminate is a leftover."""
        cur = seen
        for _ in range(WRITE_TRIES):
            if cur.state in TERMINAL_INSTANCE_STATES:
                break
            if self.store.rebill_instance_if_unchanged(cur, **fields) is not None:
                if self.taken_over:  # its bill on the trial's row as its lives' sum
                    self.store.update_trial_cost_to_lives(t.trial_id)
                return True
            cur = self.store.get_instance(seen.id)
        else:
            raise StoreError(f"instance record {seen.id!r} kept changing under its cleanup")
        bills = InstanceBills(self.store, {seen.id: seen})
        for inst in d.held:
            iid = inst.instance_id
            if iid not in d.each:  # its terminate was refused: still running
                self.leftover_ids.append(iid)
                continue
            cost, s = d.each[iid]
            if cur.provider_instance_id != iid:
                self._bill_stray(t, seen.id, inst, cost, s, bills)
                continue
            t.cost_usd, self.spent_usd = t.cost_usd - cost, self.spent_usd - cost  # its bill
        t.cost_usd, self.spent_usd = t.cost_usd - gone, self.spent_usd - gone
        self.store.update_trial_cost_to_lives(t.trial_id)
        return False

    def _held_by_unconfirmed(self, t: TrialRun) -> bool:
        """Whether a failed launch of ``t`` may still hold an instance running it (see
        :data:`RELAUNCH_HOLD_MAX_WALL_S`): no relaunch until it is settled, or the hold ends.
        Likewise while ``t`` waits for the report of a copy such a launch ran
        (:func:`~spotwise.planner.resumed_end.held`)."""
        now = time.monotonic()
        return held(self, t) or any(
            u.trial is t and now < u.hold_wall for u in self.unconfirmed.values()
        )

    def _retry_unconfirmed(self) -> None:
        """Each pass of the loop: try again to clean up each failed launch not confirmed clean
        whose pause is over. Its instance may be running, billed, until the drain otherwise.
        And read again the events of the copies such launches ran whose report a trial waits
        for (:func:`~spotwise.planner.resumed_end.recheck`)."""
        for launch_id, u in list(self.unconfirmed.items()):
            if time.monotonic() >= u.retry_wall:
                self._close_failed_launch(u.trial, launch_id, u.asked_at, u.offer)
        if holding(self):  # (a replayed clock may move when read: only when needed)
            recheck(self, self.backend.now())

    def _discard_launch(
        self, t: TrialRun, launch_id: str, asked_at: float, offer: Offer
    ) -> tuple[bool, list[Instance], float, float]:
        """:meth:`_discard`'s ``clean``, ``held``, ``cost`` and ``seconds``."""
        d = self._discard(t, launch_id, asked_at, offer)
        return d.clean, d.held, d.cost, d.seconds

    def _discard(self, t: TrialRun, launch_id: str, asked_at: float, offer: Offer) -> Discarded:
        """Terminate whatever a failed launch left running: the instances carrying its tag
        (the cloud may have accepted it before the call failed). Errors become events.

        Clean: the listing succeeded, the terminate of what it found did too, and no instance
        whose cloud does not say which request made it holds a resource with its tag (left
        alone: never terminated on its tags alone). Such an instance that has ended is in
        ``gone``, billed only when its record is closed (:meth:`_bill_gone`)."""
        prov = self.backend.provisioner
        now = self.backend.now()
        try:
            found = prov.describe({TAG_JOB: self.job_id, TAG_LAUNCH: launch_id})
        except ProviderError as e:
            self._event("error", now, t, error=f"looking for the failed launch's instance: {e}")
            return Discarded(False, [])
        ours = self._ours(found, {launch_id}, now, t)  # a copy with its tag is not its own
        doubt = [i for i in found if unconfirmed_launch(i, self.job_id, {launch_id})]
        # its tag on an instance whose cloud does not say which request made it: not clean
        clean = not any(i.holds_resource() for i in doubt)
        gone = [i for i in doubt if not i.holds_resource()]
        own = ours[0].instance_id if ours else ""
        held = [i for i in ours if i.holds_resource()]
        if not held:
            ended = next((i for i in ours if not i.holds_resource()), None)
            return Discarded(clean, [], gone=gone, own=own, ended=ended)
        left = [i.instance_id for i in held]
        if not self._terminate_quietly(t, left, now, "the failed launch's instance"):
            return Discarded(False, held, gone=gone, own=own)
        cost, seconds = self._bill_discarded(t, held, asked_at, now, offer)
        each = {i.instance_id: self._charge(i, asked_at, now, offer) for i in held}
        return Discarded(clean, held, cost, seconds, gone, own, each=each)

    def _bill_gone(
        self,
        t: TrialRun,
        d: Discarded,
        at: float,
        offer: Offer,
        closed: bool = True,
        billed: str = "",
    ) -> dict[str, object]:
        """Close a failed launch on an ended instance its cloud does not confirm it made, as
        `spotwise cancel` does: with no instance of the launch confirmed, the first listed is
        billed as the launch's (its life, from its start, else the request, to its end, under
        the offer's rule: :meth:`_bill_discarded`); returns its record's fields. Each is named
        once (an ``unconfirmed_ended`` event), when the record is ``closed`` or, at the last
        try, left open (`spotwise cancel` settles it)."""
        now, first = self.backend.now(), ""
        out: dict[str, object] = {}
        own = d.own or billed  # ``billed``: its own instance, billed by an earlier try
        if closed and d.ended is not None and not billed:  # its own, ended: the launch's life
            out = self._bill_ended(t, d.ended, at, offer)
        for inst in d.gone:
            what = "its launch's cleanup is not confirmed: left to `spotwise cancel`"
            if closed and own:
                what = f"not billed (the launch's own instance {own} is confirmed)"
            elif closed and first:
                what = f"not billed ({first}, listed first, is billed as the launch's)"
            elif closed:
                first, out = inst.instance_id, self._bill_ended(t, inst, at, offer)
                what = "no instance of the launch is confirmed: billed as the launch's"
                what += f" (${out['cost_usd']:.4f})"
            line = unconfirmed_ended_line(inst, what)
            self._event("unconfirmed_ended", now, t, instance=inst.instance_id, message=line)
        return out

    def _bill_ended(
        self, t: TrialRun, inst: Instance, asked_at: float, offer: Offer
    ) -> dict[str, object]:
        """Bill an ended instance's life to a failed launch (:meth:`_bill_discarded`, to its
        end; free when its provider took it in its refund window): its record's fields."""
        end = inst.ended_at if inst.ended_at is not None else self.backend.now()
        revoked = inst.state is InstanceState.REVOKED
        cost, s = self._bill_discarded(t, [inst], asked_at, end, offer, revoked)
        out = {"provider_instance_id": inst.instance_id, "cost_usd": cost, "market_seconds": s}
        out |= {"launched_at": inst.launched_at} if inst.launched_at > 0 else {}
        return {**out, "on_demand_cost_usd": 0.0}

    def _bill_discarded(
        self,
        t: TrialRun,
        held: list[Instance],
        asked_at: float,
        ended_at: float,
        offer: Offer,
        revoked: bool = False,
    ) -> tuple[float, float]:
        """What instances a failed launch left running cost, and how many market seconds they
        ran, from their start (else the launch request) to the terminate request (an ended
        one: to its end), at the price of the offer launched on, under its provider's rule
        (``revoked``: the provider took it). Counted in the trial's and the job's spend (the
        budget sees it). An instance found only at the end of the job may have run all along."""
        cost = seconds = 0.0
        for inst in held:
            one, s = self._charge(inst, asked_at, ended_at, offer, revoked)
            cost, seconds = cost + one, seconds + s
        if cost:
            t.cost_usd += cost
            self.spent_usd += cost
            self._write_cost(t)  # taken over: the sum, again once the record holds it
        return cost, seconds

    def _charge(
        self, inst: Instance, asked_at: float, ended_at: float, offer: Offer, revoked: bool = False
    ) -> tuple[float, float]:
        """One instance's (cost, market seconds) for :meth:`_bill_discarded`."""
        start = inst.launched_at if inst.launched_at > 0 else asked_at
        segs = self.backend.segments(offer, min(start, ended_at), ended_at)
        rule = self.backend.rule_of(offer)
        charge = rule.charge(segs, revoked_by_provider=revoked, market=offer.market)
        return charge, sum(s for s, _ in segs)

    def _settle_unconfirmed(self, now: float) -> None:
        """At the end of the job, one more try at each failed launch whose cleanup could not
        be confirmed (a transient error listing or terminating its instance must not fail the
        job): confirmed clean now, its record is closed as ``failed``; otherwise it is a
        leftover, named by the instance found or, with none known, by its launch
        (:func:`launch_leftover`: the summary and the job's error say so; `tune` exits 1).

        An instance found running that would not terminate is billed up to ``now`` (from its
        start, else the launch request) into the trial's and the job's cost, and the record
        keeps that bill, open: `spotwise cancel` adds what it runs after. With no instance
        found (the listing kept failing) nothing is known to bill: the record stays open at
        $0 and the job's error names it."""
        lag = max((u.trust_wall - time.monotonic() for u in self.unconfirmed.values()), default=0)
        if lag > 0:  # a create the provider may not list yet: give it that long to show
            time.sleep(lag)
        for launch_id, u in list(self.unconfirmed.items()):  # whatever its pause
            self._close_failed_launch(u.trial, launch_id, u.asked_at, u.offer, final=True)
        for launch_id, u in self.unconfirmed.items():
            self.leftover_ids += u.ids or [launch_leftover(launch_id)]
            if u.ids:
                self._bill_leftover_launch(launch_id, u, now)

    def _bill_leftover_launch(self, launch_id: str, u: Unconfirmed, now: float) -> None:
        """Bill a failed launch's instances the cloud would not terminate, up to ``now``, each
        from the earliest start found (a launch starts one instance; a retried create may
        have started more)."""
        start = min(u.since(), now)
        segs = self.backend.segments(u.offer, start, now)
        cost = self.backend.rule_of(u.offer).charge(segs, revoked_by_provider=False)
        seconds = sum(s for s, _ in segs) * len(u.ids)
        cost *= len(u.ids)
        u.trial.cost_usd += cost
        self.spent_usd += cost
        self.store.update_instance(  # what its tries terminated (on the record) stays on it
            launch_id, cost_usd=u.cost + cost, market_seconds=u.seconds + seconds
        )
        self._write_cost(u.trial)
