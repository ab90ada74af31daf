"""Reconciling a job's instances by tag: what `spotwise cancel` does for a job whose orchestrator
is gone, or whose record still holds instances (its drain could not terminate them).

A launch is recorded, with its region, before the cloud call, so the job's open records say
everywhere it can have started something; a record is closed only when its instance is
confirmed gone (:func:`reconcile_records`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

from spotwise.errors import ProviderError, SpecError
from spotwise.planner.backend import _MIXED_LOCAL, provider_config
from spotwise.planner.listing_age import UNLISTED as UNLISTED  # `cancel` reads them from here
from spotwise.planner.listing_age import one_clock, too_young
from spotwise.planner.listing_age import unlisted_since as unlisted_since
from spotwise.planner.reconcile_ends import stopped_end, unlisted_ends, upper_bound_note
from spotwise.providers.base import Instance, InstanceState, Provisioner
from spotwise.providers.registry import ProviderConfig
from spotwise.spec import JobSpec, ProviderSpec


def reconcile(spec: JobSpec, job_id: str, launches: Collection[str] = ()) -> list[str]:
    """Terminate every instance each named provider still holds that one of the job's
    ``launches`` (launch ids) made (a crashed orchestrator's leftovers), whatever its state: a
    VM stopped from inside or preempted with ``STOP`` is terminal but still billed
    (:meth:`~spotwise.providers.base.Instance.holds_resource`); returns their ids. Only
    instances carrying our tags are seen, in the spec's regions (AWS: else the default region),
    and of those only the ones :func:`~spotwise.providers.base.launched_by` one of
    ``launches`` are touched. :func:`reconcile_records` also looks where the job's records say
    it launched. A local job: its pid records are reconciled (``launches`` is not used).

    Every provider is visited even if one fails (what can be terminated is); the failures are
    then raised as one :class:`ProviderError` naming each provider."""
    p = spec.providers[0]
    if p.name == "local" and len(spec.providers) == 1:
        # On Linux a local trial's first process dies with its orchestrator (PR_SET_PDEATHSIG),
        # but what it started lives on in its process group, and elsewhere nothing kills it:
        # kill what the pid records show is still ours (never a reused pid).
        from spotwise.providers.local_records import reconcile_job

        return reconcile_job(job_id)
    out = reconcile_records(spec, job_id, [], launches=launches)
    if out.errors:
        raise ProviderError(
            f"reconcile: terminated {len(out.terminated)} instance(s); failed on "
            + "; ".join(out.errors)
        )
    return out.terminated


@dataclass(frozen=True)
class Held:
    """An open instance record of the job: its launch id (the instance's ``spotwise:launch``
    tag), its provider and region, and the provider's instance id once the launch answered."""

    launch_id: str
    provider: str
    region: str
    instance_id: str | None = None
    requested_at: float | None = None  # wall time of the launch request (the record's)
    # the machine whose clock wrote ``requested_at`` when it is not this one (the job's
    # orchestrator ran there): its age is then not read against this machine's clock
    # (:func:`too_young`); "" for this machine's, or a record that does not say where
    recorded_on: str = ""
    # when a cancel on this machine (its clock) first found the launch absent from a listing
    # that succeeded, while its age could not be read: it is closed once absent that long
    unlisted_since: float | None = None
    closed: bool = False  # already closed (a finished job's sweep): none is kept open for it


#: How a record was settled by :func:`reconcile_records`. The first three close it.
TERMINATED, ENDED, NOT_FOUND, OPEN = "terminated", "ended", "not found", "open"


@dataclass(frozen=True)
class Settled:
    """What became of one record: ``terminated`` (by this call; ``ended_at``: when one found
    stopped stopped, :func:`~spotwise.planner.reconcile_ends.stopped_end`), ``ended`` (listed
    in a state that holds nothing, or gone and its provider says when it ended; ``ended_at``
    when the provider says), ``not found`` (absent from a listing of its region that
    succeeded: gone, billed up to now) or ``open`` (not confirmed: ``error`` says why; the
    record must stay open so that a later cancel retries). ``launched_at``: when the
    provider says the instance it matched was created (None: no instance matched, or the
    provider does not say), so that a record whose launch never answered is billed from then."""

    held: Held
    outcome: str
    instance_id: str  # the provider's id; the launch id when none is known
    ended_at: float | None = None
    error: str = ""
    launched_at: float | None = None
    found: bool = False  # the provider listed an instance for this record
    # ``open``: absent from a listing that succeeded, its age not readable on this machine's
    # clock and no earlier absence known (:attr:`Held.unlisted_since`): the caller keeps when
    unlisted: bool = False
    revoked: bool = False  # the provider took it (AWS: free in its first hour)
    note: str = ""  # what its bill rests on (an unconfirmed instance's, an unknown end's)


@dataclass
class Reconciled:
    terminated: list[str] = field(default_factory=list)  # every id this call terminated
    records: list[Settled] = field(default_factory=list)  # one per record given
    errors: list[str] = field(default_factory=list)  # one line per failed listing/terminate
    # every instance of the job a listing that succeeded returned (as listed, before this
    # call's terminates): its tags (``spotwise:launch``: the record it belongs to), its start
    listed: list[Instance] = field(default_factory=list)
    # instances listed with the job's tags, still holding a resource, that no launch of the job
    # made (:func:`~spotwise.providers.base.launched_by`): left alone, one line each
    not_ours: list[str] = field(default_factory=list)

    @property
    def open(self) -> list[Settled]:
        return [r for r in self.records if r.outcome == OPEN]


def reconcile_records(
    spec: JobSpec,
    job_id: str,
    held: Sequence[Held],
    spare: Callable[[list[Instance]], set[str]] | None = None,
    *,
    launches: Collection[str] | None = None,
    instance_ids: Collection[str] = (),
    now: float | None = None,
) -> Reconciled:
    """:func:`reconcile` for a cloud job, settling each of its open records ``held``.

    Each provider is listed (under the job's tag) in the spec's regions and in every region a
    record names: a launch is recorded, with its region, before the cloud call, so that is
    everywhere the job can have started something, whatever the spec or the environment's
    default region say now. Everything of the job's listed that still holds a resource is
    terminated (one refusal does not hold up the others). A record is closed only when its
    instance (found by its id, or by its launch tag if the launch never answered) is confirmed:
    terminated here, listed as ended, or not listed by a listing of its region that succeeded.
    A record whose region could not be listed, or whose terminate was refused, stays ``open``;
    so does one absent from a listing whose launch may be younger than the provider's listing
    lag (:func:`too_young`: ``unlisted`` asks the caller to keep when it was first absent).
    ``spare``: told each listing, it names instances to leave alone and unlisted (a resumed
    run's).

    The job's are the instances one of its launches made
    (:func:`~spotwise.providers.base.launched_by`): ``launches`` is every launch id of the job
    (None: those of ``held``), ``instance_ids`` the instance ids its launches were answered
    with (with those of ``held``). Anything else listed with the job's tags (a copy of one of
    its instances, tags set by hand, another install's job that drew the same id) is left
    alone: never terminated nor matched to a record, and named in ``not_ours``.

    ``now``: this machine's wall time (None: read now), against which a record absent from a
    listing is judged too young to close (:func:`too_young`)."""
    now = time.time() if now is None else now
    out = Reconciled()
    job = _Launches(
        set(launches if launches is not None else ()) | {h.launch_id for h in held},
        set(instance_ids) | {h.instance_id for h in held if h.instance_id},
    )
    named = {q.name for q in spec.providers}
    for q in spec.providers:
        if q.name == "local":
            raise SpecError(_MIXED_LOCAL)
    for h in held:
        if h.provider not in named:
            why = f"{h.provider}: not a provider of the job's spec"
            out.records.append(Settled(h, OPEN, h.instance_id or h.launch_id, error=why))
            out.errors.append(why)
    for q in spec.providers:
        mine = [h for h in held if h.provider == q.name]
        for config, rows in _scopes(q, mine):
            _settle(q.name, config, rows, job_id, job, out, now, spare)
    return out


@dataclass(frozen=True)
class _Launches:
    """What :func:`~spotwise.providers.base.launched_by` is told: the job's launch ids and the
    instance ids its launches were answered with."""

    launch_ids: set[str]
    instance_ids: set[str]


def _scopes(q: ProviderSpec, held: list[Held]) -> list[tuple[ProviderConfig, list[Held]]]:
    """The listings to make for provider ``q``, each with the records it settles. An AWS
    listing covers the regions of its config, so one listing per region (a region that fails
    holds up only its own records); a GCP listing covers the project, an Azure one the
    resource group: one for all."""
    config = provider_config(q)
    if q.name != "aws":
        return [(config, held)]
    regions = sorted(set(q.regions) | {h.region for h in held if h.region})
    scopes = [(replace(config, regions=(r,)), [h for h in held if h.region == r]) for r in regions]
    unplaced = [h for h in held if not h.region]
    if unplaced or not scopes:  # the provider's default region
        scopes.append((replace(config, regions=()), unplaced))
    return scopes


def _settle(
    name: str,
    config: ProviderConfig,
    held: list[Held],
    job_id: str,
    job: _Launches,
    out: Reconciled,
    now: float,
    spare: Callable[[list[Instance]], set[str]] | None = None,
) -> None:
    from spotwise.errors import SpotwiseError
    from spotwise.providers.base import (
        TAG_JOB,
        TAG_LAUNCH,
        launched_by,
        not_ours_line,
        unconfirmed_launch,
    )
    from spotwise.providers.registry import cloud_module

    def line(e: SpotwiseError) -> str:  # one line naming the provider (its errors mostly do)
        return str(e) if str(e).startswith(f"{name}:") else f"{name}: {e}"

    try:
        prov: Provisioner = cloud_module(name).open_provisioner(config)
        found = prov.describe({TAG_JOB: job_id})
    except SpotwiseError as e:
        out.errors.append(line(e))
        for h in held:
            out.records.append(Settled(h, OPEN, h.instance_id or h.launch_id, error=line(e)))
        return
    if spare is not None and found:
        keep = spare(found)
        found = [i for i in found if i.instance_id not in keep]
    ours = [i for i in found if launched_by(i, job_id, job.launch_ids, job.instance_ids)]
    kept = {i.instance_id for i in ours}
    out.not_ours += [
        not_ours_line(i, job_id, job.launch_ids)
        for i in found
        if i.instance_id not in kept and i.holds_resource()
    ]
    # a launch's tag on an instance whose cloud does not say which request made it: the record
    # stays open (it may be the launch's own instance; closing the record would lose it)
    doubtful = {
        launch: i.instance_id
        for i in found
        if i.holds_resource()
        and (launch := unconfirmed_launch(i, job_id, job.launch_ids, job.instance_ids))
    }
    # one that has ended (terminated by hand as advised, revoked, powered off): its record is
    # settled on it, billed as the launch's, its answer saying the cloud did not confirm it
    ended_doubt = {
        launch: i
        for i in reversed(found)  # the first listed of a launch's
        if not i.holds_resource()
        and (launch := unconfirmed_launch(i, job_id, job.launch_ids, job.instance_ids))
    }
    found = ours  # what no launch of the job made is never terminated, billed or matched
    out.listed += found
    live = [i.instance_id for i in found if i.holds_resource()]
    # a stopped one's end, read before its terminate (which marks the instance terminated now)
    stops = {i.instance_id: stopped_end(i, name) for i in found if i.holds_resource()}
    refused: dict[str, str] = {}
    if live:
        try:
            prov.terminate(live)  # ids this provider listed, each launched by the job
        except SpotwiseError:
            for iid in live:  # one refusal must not hold up the others
                try:
                    prov.terminate([iid])
                except SpotwiseError as e:
                    refused[iid] = line(e)
                    out.errors.append(line(e))
    out.terminated += [i for i in live if i not in refused]
    by_id = {i.instance_id: i for i in found}
    by_launch = {i.tags[TAG_LAUNCH]: i for i in found if i.tags.get(TAG_LAUNCH)}
    gone = [h for h in held if h.instance_id and h.instance_id not in by_id and not h.closed]
    gone = [h for h in gone if h.launch_id not in by_launch and not too_young(name, prov, h, now)]
    ends, why = unlisted_ends(prov, name, [h.instance_id or "" for h in gone])  # if it says
    for h in held:
        inst = by_id.get(h.instance_id or "") or by_launch.get(h.launch_id)
        if inst is None and h.launch_id in doubtful:
            again = ", then run the cancel again (once it has ended, it is billed as the job's)"
            why = (
                f"{name}: {doubtful[h.launch_id]} carries launch {h.launch_id}'s tag but {name} "
                "does not confirm that launch made it: left alone"
                + ("" if h.closed else " and the record kept open")
                + "; check it by hand (terminate it if it is the job's)"
                + ("" if h.closed else again)
            )
            out.errors.append(why)
            out.records.append(Settled(h, OPEN, doubtful[h.launch_id], error=why))
            continue
        note = ""
        if inst is None and h.instance_id is None and h.launch_id in ended_doubt:
            inst = ended_doubt[h.launch_id]  # no instance of the launch is confirmed: this one
            note = (
                f"{inst.instance_id} billed as the job's: it carries launch {h.launch_id}'s "
                f"tag and has ended; {name} does not say which request created it"
            )
        if inst is None:
            young = too_young(name, prov, h, now)
            if young:  # a create the listing may not show yet: not confirmed gone
                out.errors.append(young)
            first = bool(young) and h.unlisted_since is None and not one_clock(h, now)
            iid = h.instance_id or h.launch_id
            if not young and iid in ends:  # gone, and its provider says when it ended
                at, took = ends[iid]
                out.records.append(Settled(h, ENDED, iid, ended_at=at, revoked=took))
                continue
            billed = h.instance_id and not young and not h.closed
            bound = upper_bound_note(name, iid, why) if billed else ""
            outcome = OPEN if young else NOT_FOUND
            out.records.append(Settled(h, outcome, iid, error=young, unlisted=first, note=bound))
            continue
        since = inst.launched_at or None  # 0.0: the provider does not say
        if inst.instance_id in refused:
            one = Settled(h, OPEN, inst.instance_id, error=refused[inst.instance_id])
        elif inst.instance_id in live:  # a stopped one: billed to when it stopped
            one = Settled(h, TERMINATED, inst.instance_id, **stops[inst.instance_id])
        else:
            revoked = inst.state is InstanceState.REVOKED
            one = Settled(h, ENDED, inst.instance_id, ended_at=inst.ended_at, revoked=revoked)
        out.records.append(replace(one, launched_at=since, found=True, note=note or one.note))
