"""What `spotwise cancel` releases: the instances a job may still hold, and each one's bill.

:func:`_release` settles the job's open instance records (a dead orchestrator's, or a finished
job's whose drain could not terminate them);
:func:`~spotwise.release_sweep.sweep_finished` looks, for a finished cloud job whose records
are all closed, for an instance of the job that outlived its records. Split from
:mod:`spotwise.jobs` so that each file stays readable.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spotwise.providers.base import Market
from spotwise.release_ends import gone_end, note_revoked
from spotwise.release_local import local_ends
from spotwise.release_reference import OnDemandReference
from spotwise.release_reference import _unknown_text as _unknown_text  # jobs.py's


def _release(store: Any, job: Any, orchestrator_died: bool = False) -> dict[str, Any]:
    """Terminate what the providers still run with the job's tags, then close each instance
    record whose instance is confirmed to hold nothing any more; a record that could not be
    confirmed (its region could not be listed, its terminate was refused) stays open, so that
    a later cancel retries. Local: the trial processes' pid records are reconciled and every
    record is closed.

    Each closed record is billed up to now (or up to when its provider says it ended; one
    gone whose provider does not say, up to its notice's deadline or the drain's request to
    delete it, as the job's store says: :func:`~spotwise.release_ends.gone_end`; when
    ``orchestrator_died``, a local job's trial processes that died with it, even where their
    helpers outlived them, up to when it was last known alive, and a life the replayed market
    took up to then: :func:`~spotwise.release_local.local_ends`, not before their start): the
    seconds no life's bill covered (an instance left by a dead orchestrator, or billed only up
    to a drain that could not terminate it) at its price, in market seconds (a replay's clock
    runs ``speedup`` times the wall clock), and the job's cost becomes the sum of its instances'
    again, each billed trial's the sum of its lives' (one rule for both: review-aj F2), its
    on-demand figure too (it was a dead orchestrator's last running estimate). A stopped VM
    ('not deleted') has no compute to bill. Of the seconds billed now, only the life's useful
    ones get an on-demand reference, under the orchestrator's rule
    (:class:`~spotwise.release_reference.OnDemandReference`): up to its last report (a life the
    provider took: its last checkpoint), less a relaunch's start-up; the idle time after, and
    work nobody saw, are billed but not referenced (the saving is never overstated). Each other
    instance of a record's launch this cancel terminated (a retried create) is billed to the
    record too, from its start, as a part naming it (:func:`_bill_record`): one life each.

    Returns ``terminated_instances`` (ids terminated now), ``closed_records`` (how many this
    cancel closed: a record another cancel closed first is left as that one billed it),
    ``records`` (a cloud job's: each record's instance, region and outcome: ``terminated``,
    ``ended``, ``not found`` or ``open``), ``open_instances`` (the ids still open) and
    ``errors`` (why); ``on_demand_unknown``: those billed more at an unknown on-demand price;
    ``not_ours``: one line for each instance listed with the job's tags that no launch of it
    made (:func:`~spotwise.providers.base.launched_by`), left alone."""
    from spotwise.planner import reconcile as rec
    from spotwise.spec import ReplaySpec, load_stored_spec

    spec = load_stored_spec(job.spec_json)
    rows = store.list_instances(job.id, active_only=True)
    first = spec.providers[0]
    ends: dict[str, float | None] = {}  # launch id → when it ended (None: now)
    seen: dict[str, tuple[Any, Any]] = {}  # launch id → (its Settled, the instance listed)
    listed: dict[str, tuple[Any, str | None]] = {}  # a cloud's: each instance, its record
    records: list[dict[str, Any]] = []
    errors: list[str] = []
    not_ours: list[str] = []
    billed_to = "now"
    taken: set[str] = set()  # launch ids whose instance its provider took (billed as revoked)
    speedup = (first.replay or ReplaySpec()).speedup if first.name == "local" else 1.0
    started: dict[str, float] = {}  # a local launch's start its record lacks
    if first.name == "local":
        # its trial processes died with the orchestrator, or were killed now: up to when
        # each life ended (:mod:`spotwise.release_local`)
        local = local_ends(store, job, spec, rows, orchestrator_died, speedup)
        terminated, ends, taken = local.terminated, local.ends, local.taken
        started, billed_to = local.started, local.billed_to
    else:
        here = socket.gethostname()
        # its orchestrator wrote each request time on its machine's clock (an open record
        # holds up `resume`, so the machine the job names wrote every open one)
        there = job.host if job.host and job.host != here else ""
        absent = rec.unlisted_since(store.events(job.id, kind=rec.UNLISTED), here)
        cols = [(r.id, r.provider, r.region, r.provider_instance_id, r.requested_at) for r in rows]
        held = [rec.Held(*one, there, absent.get(one[0])) for one in cols]
        every = store.list_instances(job.id)  # a closed record's instance is the job's too
        looked = wall_now()
        res = rec.reconcile_records(
            spec,
            job.id,
            held,
            _resumed_since(store, job.id),
            launches={r.id for r in every},
            instance_ids={r.provider_instance_id for r in every if r.provider_instance_id},
            now=looked,
        )
        for one in res.records:
            if one.unlisted:  # the next cancel here counts the listing lag from this one
                store.add_event(
                    job.id, rec.UNLISTED, looked, instance_id=one.held.launch_id, host=here
                )
        terminated, errors, not_ours = res.terminated, res.errors, res.not_ours
        # every instance of the job listed, with the record its id names when it is not the
        # record its launch tag names (never billed as another instance of that launch)
        names = {r.provider_instance_id: r.id for r in every if r.provider_instance_id}
        listed = {i.instance_id: (i, names.get(i.instance_id)) for i in res.listed}
        said = store.events(job.id)
        for one in res.records:
            note = one.note
            if one.outcome != rec.OPEN:
                ends[one.held.launch_id] = one.ended_at
            if one.outcome == rec.NOT_FOUND and one.note:  # gone, no end from its provider
                got = gone_end(store, said, one, rows)
                if got is not None:  # a notice's deadline, the drain's delete: not now
                    ends[one.held.launch_id], note = got.at, got.note
                    if got.revoked:
                        taken.add(one.held.launch_id)
            if one.revoked:  # listed or not (a GCE preempted operation of a VM gone since)
                taken.add(one.held.launch_id)
            if one.found:
                seen[one.held.launch_id] = (one, listed.get(one.instance_id, (None, None))[0])
            records.append(
                {
                    "launch_id": one.held.launch_id,
                    "instance_id": one.instance_id,
                    "region": one.held.region,
                    "outcome": one.outcome,
                    **({"error": one.error} if one.error else {}),
                    **({"note": note} if note else {}),  # ended, billed, unconfirmed
                }
            )
    now = wall_now()
    extra_by_trial: dict[str, float] = {}  # what the lives ran after the job's own bill
    closed = 0  # the records this cancel closed (another may have closed some first)
    od_price = OnDemandReference(store, spec, job, speedup, [i for i, _ in listed.values()])
    for row in rows:
        found, inst = seen.get(row.id, (None, None))
        # the launch's other instances this cancel terminated (a retried create): each a life
        others = _others(row, found, listed, set(terminated))
        if row.id not in ends and not others:
            known, _ = _known(row, found)
            if known:
                store.update_instance(row.id, **known)
            continue
        end = min(ends[row.id] or now, now) if row.id in ends else None
        revoked = row.id in taken or (found is not None and found.revoked)
        how = _Close(end, now, speedup, revoked, _rule(spec, row.provider), started.get(row.id))
        usd = _bill_record(store, row, found, inst, others, how, od_price)
        if usd is None:  # another cancel closed it first, as it billed it
            continue
        closed += end is not None
        if end is not None and _taken(row, how):  # counted as the orchestrator counts one
            note_revoked(store, row, end)
        extra_by_trial[row.trial_id] = extra_by_trial.get(row.trial_id, 0.0) + usd
    # a trial's cost is its lives' sum, set, not added to (review-ah F6), in one statement
    for trial_id in [trial_id for trial_id, extra_usd in extra_by_trial.items() if extra_usd]:
        store.update_trial_cost_to_lives(trial_id)
    _sum_job(store, job.id)
    return {
        "terminated_instances": terminated,
        "closed_records": closed,
        "records": records,
        "open_instances": [r["instance_id"] for r in records if r["outcome"] == rec.OPEN],
        "errors": errors,
        "billed_to": billed_to,
        **({"on_demand_unknown": od_price.unknown} if od_price.unknown else {}),
        **({"not_ours": not_ours} if not_ours else {}),
    }


_TRIES = 8  # bills another process wrote to a record first, before it is left to that one


@dataclass(frozen=True)
class _Close:
    """How :func:`_bill_record` bills a record: up to ``end`` (None: the record stays open,
    only the launch's other instances are billed; the others up to ``now``, the cancel's
    time, not the bill's date: each write dates its own); ``speedup``: market seconds per
    wall second; ``revoked``: its provider took the life; ``rule``: its billing; ``started``:
    a local life's start its record lacks (its process was started: review-aw F3)."""

    end: float | None
    now: float
    speedup: float
    revoked: bool
    rule: Any
    started: float | None = None


def _known(row: Any, found: Any) -> tuple[dict[str, Any], float | None]:
    """What record ``row`` learns of the instance ``found`` for it (a launch that never
    answered has no instance id or start: the instance the provider listed for it gives both,
    and it is billed from its creation, else from the request: it cannot have started
    earlier; no instance listed: nothing to bill), and its life's start. The provider's
    creation time is the life's start whenever it says (the record's is when the launch call
    answered, seconds later)."""
    start = row.launched_at
    known: dict[str, Any] = {}
    if found is not None and row.provider_instance_id is None:
        known["provider_instance_id"] = found.instance_id
    if found is not None and found.launched_at:
        if start is None:
            known["launched_at"] = found.launched_at  # `spotwise report` bills from it
        start = min(start or found.launched_at, found.launched_at)
    elif found is not None and start is None:
        start = row.requested_at
        known["launched_at"] = start
    return known, start


def _others(
    row: Any, found: Any, listed: dict[str, tuple[Any, str | None]], terminated: set[str]
) -> list[Any]:
    """The instances of record ``row``'s launch, other than the one it was settled on, that
    this cancel terminated (a retried create of the launch, a failed launch's second
    instance): each a life of its own, billed to the record (it was terminated and never
    billed: review s22 A2 gap 1). One whose id another record names is that record's."""
    from spotwise.providers.base import TAG_LAUNCH

    own = found.instance_id if found is not None else row.provider_instance_id
    return [
        inst
        for iid, (inst, named) in listed.items()
        if inst.tags.get(TAG_LAUNCH) == row.id
        and iid in terminated
        and iid != own
        and named in (None, row.id)
    ]


def _bill_record(
    store: Any, row: Any, found: Any, inst: Any, others: list[Any], how: _Close, od: Any
) -> float | None:
    """Bill record ``row`` (read open): close it up to ``how.end`` with the bill of its own
    life, the one it was settled on (``found``, listed as ``inst``), and add each of
    ``others`` as a part naming it; returns the dollars added, None where another process
    closed it first (it billed the life). Written only while the record is still as read
    (a compare-and-set, :meth:`~spotwise.store.bills.BillWrites.rebill_instance_if_unchanged`):
    a bill another process wrote to it meanwhile (the drain's stray sweep) was overwritten by
    the bill computed from the earlier read (review s22 A2 gap 3); it is read again and billed
    on that.

    The own life is billed from its start (:func:`_known`) to its end in market seconds, less
    what the record's bill holds of it: its bill less the parts that name another instance
    (:class:`~spotwise.release_sweep._OwnLife`; a stray the drain billed to the open record
    was counted as the own life's, which was under-billed by it: gap 2), under its rule
    (:func:`_whole_life_cost`), with an on-demand reference for its useful seconds (``od``).
    A record's bill that names no instance beyond the own life's seconds (a failed launch's
    leftovers, billed together up to the drain) is taken as the others' first, so that none
    is billed twice."""
    from spotwise.release_sweep import _other_lives, _OwnLife
    from spotwise.store.models import TERMINAL_INSTANCE_STATES

    mark, cur = len(od.unknown), row
    for _ in range(_TRIES):
        del od.unknown[mark:]  # said once, of the try that is written
        fields, start = _known(cur, found)
        if start is None and how.started is not None:  # a life all the same: billed from it
            start = fields["launched_at"] = how.started
        own = _OwnLife(cur, found.instance_id if found is not None else cur.provider_instance_id)
        own_s = ((how.end or how.now) - start) * how.speedup if start is not None else 0.0
        usd = 0.0
        if how.end is not None:
            extra_s = 0.0
            if start is not None and cur.end_reason != "not deleted":
                extra_s = max(own_s - own.market_seconds, 0.0)
            cost = own.cost_usd
            # a life that started is billed at least the rule's minimum, even when nothing
            # measured how long it ran (a dead local job's trial that never reported: review-ac
            # F3; one whose record never said it started: review-aw F3)
            began = cur.launched_at is not None or how.started is not None
            unbilled = start is not None and began and not own.market_seconds
            if extra_s or how.revoked or (unbilled and cur.end_reason != "not deleted"):
                cost = _whole_life_cost(own, extra_s, how.revoked, how.rule)
            usd = cost - own.cost_usd
            # a launch that never answered was no life of the trial to its orchestrator either
            ref = 0.0
            if cur.launched_at is not None:
                ref = od.reference(own, inst, start, extra_s, how.revoked)
            fields |= {
                "state": "terminated",
                "end_reason": "revoked" if _taken(cur, how) else "reconciled",
                "ended_at": how.end,
                "cost_usd": cur.cost_usd + usd,
                "on_demand_cost_usd": cur.on_demand_cost_usd + ref,
                "market_seconds": cur.market_seconds + extra_s,
            }
        parts = _other_lives(cur, others, max(own.market_seconds - own_s, 0.0), how)
        if not fields and not parts:
            return 0.0
        # dated as written (`report` counts it then, not in a past window: af F4), by the
        # clock read once the write holds the lock, not by ``how.now``: a record written over
        # a minute after it was in no chained window (s23, report_I item 3)
        done = store.rebill_instance_if_unchanged(cur, parts=parts, clock=wall_now, **fields)
        if done is not None:
            return usd + sum(p["cost_usd"] for p in parts.values())
        cur = store.get_instance(row.id)
        if cur.state in TERMINAL_INSTANCE_STATES:
            break  # another cancel closed it: it billed the life (never twice)
    del od.unknown[mark:]  # not billed here: nothing to say of its reference
    return None


def _taken(row: Any, how: _Close) -> bool:
    """A cloud life its provider took: closed ``revoked``, as its orchestrator closes one
    (review-bb F4: ``reconciled`` was counted by no revocation count). A local job's taken
    lives keep ``reconciled``: the replay's own ``revoked`` events name them."""
    return how.revoked and row.provider != "local"


def wall_now() -> float:
    """This machine's wall time (a test replaces it to run a later cancel without waiting)."""
    return time.time()


def _sum_job(store: Any, job_id: str) -> None:
    """The job's cost and on-demand figure become its records' sums (what `spotwise report`
    adds up, and what its orchestrator's own end leaves), each read as it is written (one
    statement: a bill another process closes meanwhile is never lost); its revocations and
    migrations, what its trials and `revoked` events say, when a dead orchestrator's last save
    had fewer (only ever raised)."""
    job = store.update_job_cost_to_records(job_id)
    trials = store.list_trials(job_id)
    lost = max(sum(t.revocations for t in trials), len(store.events(job_id, kind="revoked")))
    moved = sum(t.migrations for t in trials)
    counts = {
        "revocations": max(job.revocations, lost),  # review-ag F3: stayed at the last save
        "migrations": max(job.migrations, moved),
    }
    if counts != {"revocations": job.revocations, "migrations": job.migrations}:
        store.update_job(job_id, **counts)


def _rule(spec: Any, provider: str) -> Any:
    """The billing rule of a record's provider (the local provider: the cloud it replays)."""
    from spotwise.providers.billing import rule_for
    from spotwise.spec import ReplaySpec

    if provider == "local":
        return rule_for((spec.providers[0].replay or ReplaySpec()).billing)
    return rule_for(provider)


def _whole_life_cost(row: Any, extra_s: float, revoked: bool, rule: Any) -> float:
    """The bill of a whole instance life under its provider's billing rule: the part the job's
    own bill covered (``row.market_seconds`` for ``row.cost_usd``, at that bill's average price
    once its rounding and minimum are taken out) and ``extra_s`` more at the record's price.
    Adding ``extra_s`` at its price alone left out the minimum of a short life, counted a
    minimum the job's bill had already added to a running life a second time, and billed a
    life the provider took (``revoked``: free within AWS's first hour)."""
    s0 = row.market_seconds
    # the seconds the rule bills for s0 (its minimum, its rounding): $1 a second, in dollars
    billed0 = rule.charge([(s0, 3600.0)], revoked_by_provider=False) if s0 > 0 else 0.0
    p0 = row.cost_usd * 3600.0 / billed0 if billed0 and row.cost_usd else row.price_per_hour
    segments = [(s, p) for s, p in ((s0, p0), (extra_s, row.price_per_hour)) if s > 0]
    if not segments and not revoked:  # it started: at least the minimum (0 s billed nothing)
        segments = [(rule.minimum_s, row.price_per_hour)] if rule.minimum_s > 0 else []
    if not segments:
        return 0.0
    # only a spot life is refunded when taken (review-av F1: an on-demand record read as
    # revoked was billed $0 by a cancel)
    market = Market.ON_DEMAND if row.market == Market.ON_DEMAND else Market.SPOT
    return float(rule.charge(segments, revoked_by_provider=revoked, market=market))


def _resumed_since(
    store: Any, job_id: str, known: set[str] | None = None, finished: Any = None
) -> Callable[[list[Any]], set[str]]:
    """For a listing of the job's instances: those a `spotwise resume` of it launched since
    this cancel read its records (``known``; else read now): their launch records, written
    before each cloud call, are newer. They are the resumed run's, not this cancel's to
    terminate or bill. ``finished``: the finished job as the cancel read it; once a resume has
    taken it over (another state or end time), every instance is left to the resumed run,
    which sweeps the job's strays itself when it ends (a bill written here would be
    overwritten by its totals)."""
    from spotwise.providers.base import TAG_LAUNCH

    seen = known if known is not None else {r.id for r in store.list_instances(job_id)}

    def spare(found: list[Any]) -> set[str]:
        if finished is not None:
            now = store.get_job(job_id)
            if (now.state, now.ended_at) != (finished.state, finished.ended_at):
                return {i.instance_id for i in found}
        newer = {r.id for r in store.list_instances(job_id)} - seen
        return {i.instance_id for i in found if i.tags.get(TAG_LAUNCH) in newer}

    return spare
