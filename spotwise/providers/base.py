"""The narrow interfaces every provider implements, and the value types they exchange.

Two protocols, a handful of verbs each (SkyPilot's small provision API ages better than a
do-everything ``Cloud`` class):

* :class:`Catalog` — what can be bought and for how much: offers, current prices, history.
  Must work offline where the provider allows it (shipped catalogs, replayed traces).
* :class:`Provisioner` — launch, describe, terminate instances, read interruption notices and
  the progress a trial reports from its instance.

Every launch carries tags that mark the instance as ours (:data:`TAG_MANAGED` and friends);
``describe`` and ``terminate`` only ever see instances carrying them. Tags alone do not make
an instance a job's: :func:`launched_by` also asks that the cloud's own identity of it
(:attr:`Instance.launch_identity`) be the launch its tag names. An instance in a terminal
state may still hold a billed resource (a VM stopped from inside, a Spot VM preempted with
``STOP``): :meth:`Instance.holds_resource` says whether it is still there to terminate.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

TAG_MANAGED = "spotwise:managed"
TAG_JOB = "spotwise:job"
TAG_TRIAL = "spotwise:trial"
TAG_LAUNCH = "spotwise:launch"


class Market(enum.StrEnum):
    SPOT = "spot"
    ON_DEMAND = "on-demand"


class InstanceState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    TERMINATED = "terminated"  # by us
    REVOKED = "revoked"  # by the provider (spot interruption / preemption / eviction)
    FAILED = "failed"  # could not start

    def is_terminal(self) -> bool:
        return self in (InstanceState.TERMINATED, InstanceState.REVOKED, InstanceState.FAILED)


@dataclass(frozen=True)
class Offer:
    """One purchasable option: an instance type in a zone on a market, at a price now."""

    provider: str
    region: str
    zone: str
    instance_type: str
    market: Market
    price_per_hour: float
    on_demand_price_per_hour: float
    vcpus: int = 0
    memory_gb: float = 0.0
    gpus: int = 0
    gpu_name: str = ""
    available: bool = True

    @property
    def key(self) -> str:
        """Stable identity of the offer (without its price)."""
        return f"{self.provider}:{self.zone}:{self.instance_type}:{self.market.value}"

    @property
    def billable(self) -> bool:
        """Whether a bill can use its price: finite and above 0 (an on-demand life is billed its
        on-demand price; a spot offer's on-demand price may be 0, "unknown"). An offer at $0,
        below or NaN would be bought first and billed nothing, past any budget."""
        on_demand = self.market is Market.ON_DEMAND
        billed = self.on_demand_price_per_hour if on_demand else self.price_per_hour
        return min(self.price_per_hour, billed) > 0 and math.isfinite(self.price_per_hour + billed)


@dataclass(frozen=True)
class PricePoint:
    provider: str
    zone: str
    instance_type: str
    market: Market
    price_per_hour: float
    timestamp: float  # epoch seconds


@dataclass(frozen=True)
class InstanceType:
    """Catalog entry: hardware of an instance type, and its on-demand price where known."""

    provider: str
    region: str
    name: str
    vcpus: int
    memory_gb: float
    gpus: int = 0
    gpu_name: str = ""
    architecture: str = "x86_64"
    on_demand_price_per_hour: float | None = None


@dataclass(frozen=True)
class LaunchRequest:
    """Everything needed to start one trial attempt on one offer."""

    offer: Offer
    argv: tuple[str, ...]
    env: Mapping[str, str]
    tags: Mapping[str, str]
    client_token: str  # idempotency key; also the launch id recorded before the call
    workdir: str = ""


@dataclass
class Instance:
    instance_id: str
    offer: Offer
    state: InstanceState
    tags: dict[str, str] = field(default_factory=dict)
    launched_at: float = 0.0  # epoch seconds (market clock for replay)
    ended_at: float | None = None
    exit_code: int | None = None
    # Whether the provider still holds a resource for it that nobody asked to remove: True for
    # a VM the listing returns (a stopped GCE VM keeps its disk; a stopped, not deallocated,
    # Azure VM is still billed), False once it is gone or its deletion was requested; None:
    # the provider does not say (see :meth:`holds_resource`).
    exists: bool | None = None
    # The launch the cloud's own identity of this instance says made it, as its provider reads
    # it (AWS: the ``ClientToken`` of the RunInstances call that created it, which spotwise
    # sets to the launch id; GCP / Azure: the ``spotwise:launch`` tag when the instance's name
    # is the one spotwise derives from that launch id, else ""); None when the provider cannot
    # tell (an instance EC2 lists without a ClientToken).
    # Tags alone prove nothing: anyone with tag rights can set them, and EC2's "Launch more
    # like this" copies them (see :func:`launched_by`).
    launch_identity: str | None = None

    def holds_resource(self) -> bool:
        """Whether something of this instance is still there to terminate (and may be billed),
        whatever its state: ``exists`` where the provider knows, else "has not ended"."""
        return self.exists if self.exists is not None else not self.state.is_terminal()


class NoticeKind(enum.StrEnum):
    INTERRUPTION = "interruption"  # AWS spot/instance-action, GCP preempted, Azure Preempt
    REBALANCE = "rebalance"  # AWS rebalance recommendation: elevated risk, no deadline


@dataclass(frozen=True)
class Notice:
    instance_id: str
    kind: NoticeKind
    received_at: float
    deadline: float  # when the instance will be taken (same clock as received_at)


@runtime_checkable
class Catalog(Protocol):
    """What can be bought, and for how much.

    Optional: ``end_time`` (float, epoch seconds on the market's clock), where the market
    itself ends: a replayed trace has no market past its end (read it with
    :func:`market_end`; a live cloud's catalog has none, so it is not a member here: the
    protocol's ``isinstance`` check would refuse such a catalog)."""

    name: str

    def regions(self) -> list[str]: ...

    def instance_types(self, region: str | None = None) -> list[InstanceType]: ...

    def offers(
        self,
        region: str | None = None,
        instance_types: Sequence[str] | None = None,
        market: Market | None = None,
    ) -> list[Offer]: ...

    def price_history(
        self, region: str, instance_type: str, start: float, end: float
    ) -> list[PricePoint]: ...


@runtime_checkable
class Provisioner(Protocol):
    """Launch, watch and terminate instances that carry our tags."""

    name: str

    def launch(self, request: LaunchRequest) -> Instance: ...

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]: ...

    def terminate(self, instance_ids: Sequence[str]) -> None: ...

    def notices(self) -> list[Notice]: ...

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        """New events the trial reported since the last call (``spotwise.sdk`` records)."""
        ...


def our_tags(job_id: str, trial_id: str, launch_id: str) -> dict[str, str]:
    """The tags that mark an instance as launched by spotwise for this job/trial/launch."""
    return {TAG_MANAGED: "true", TAG_JOB: job_id, TAG_TRIAL: trial_id, TAG_LAUNCH: launch_id}


def is_ours(tags: Mapping[str, str]) -> bool:
    """Whether ``tags`` are spotwise's (some job's): what a launch must carry, and a listing
    filters on. Not proof that an instance is a given job's: see :func:`launched_by`."""
    return tags.get(TAG_MANAGED) == "true" and bool(tags.get(TAG_JOB))


def launched_by(
    inst: Instance,
    job_id: str,
    launch_ids: Collection[str],
    instance_ids: Collection[str] = (),
) -> bool:
    """Whether ``inst`` is an instance job ``job_id`` launched, so that it may be terminated,
    billed or adopted as the job's: it carries our tags for the job, and either the cloud's own
    identity of it (:attr:`Instance.launch_identity`) is the launch its ``spotwise:launch`` tag
    names and that launch is one of the job's (``launch_ids``), or its id is one a launch of
    the job was answered with (``instance_ids``: the provider's own answer). Tags can be copied
    (EC2's "Launch more like this"), set by anyone with tag rights, or carry a job id another
    install with its own database also drew: such an instance is left alone
    (:func:`not_ours_line`)."""
    tags = inst.tags
    if tags.get(TAG_MANAGED) != "true" or tags.get(TAG_JOB) != job_id:
        return False
    if inst.instance_id in instance_ids:
        return True
    launch = tags.get(TAG_LAUNCH, "")
    return bool(launch) and launch in launch_ids and inst.launch_identity == launch


def unconfirmed_launch(
    inst: Instance,
    job_id: str,
    launch_ids: Collection[str],
    instance_ids: Collection[str] = (),
) -> str:
    """The launch of job ``job_id`` that ``inst``'s ``spotwise:launch`` tag names when the
    cloud cannot tell whether that launch made it (:attr:`Instance.launch_identity` is None:
    an instance EC2 lists without a ClientToken), else "". :func:`launched_by` refuses such an
    instance (it is never terminated, billed or adopted on its tags alone), but it may be the
    launch's own instance: while it holds a resource, the launch's record is not closed, nor
    its cleanup confirmed, on a listing that shows it
    (:func:`~spotwise.planner.reconcile.reconcile_records`, a failed launch's cleanup). Once
    it has ended (terminated by hand as cancel advises, revoked, powered off), a record of the
    launch with no instance confirmed is closed ``ended`` on it and billed as the launch's,
    its answer saying the cloud did not confirm it; a failed launch's cleanup names it."""
    tags = inst.tags
    launch = tags.get(TAG_LAUNCH, "")
    if tags.get(TAG_MANAGED) != "true" or tags.get(TAG_JOB) != job_id:
        return ""
    if inst.launch_identity is not None or not launch or launch not in launch_ids:
        return ""
    return "" if launched_by(inst, job_id, launch_ids, instance_ids) else launch


def market_end(catalog: object) -> float | None:
    """When the market a catalog sells on ends (epoch seconds on its clock): a catalog's
    optional ``end_time`` (a replayed trace's end: :attr:`~spotwise.providers.replay.
    ReplayMarket.end_time`); None for a live cloud, whose market goes on."""
    end = getattr(catalog, "end_time", None)
    return float(end) if isinstance(end, int | float) and not isinstance(end, bool) else None


def listing_lag_s(provisioner: object) -> float:
    """Wall seconds after a create during which the provider's listing may not show the
    instance yet (EC2's API is eventually consistent): a provisioner's optional
    ``LISTING_LAG_S``, 0 for one whose listing is read-after-write."""
    return float(getattr(provisioner, "LISTING_LAG_S", 0.0))


def ended_unlisted(
    provisioner: object, instance_ids: Collection[str]
) -> dict[str, tuple[float, bool]]:
    """Of ``instance_ids`` (instances of ours the provider's listing no longer shows), when each
    ended, as far as the provider still says: instance id → ``(ended_at, revoked)``
    (``revoked``: the provider took it). A provisioner's optional ``ended_unlisted`` method
    (GCP: the zone operations GCE keeps of a preemption or a delete); ``{}`` for one without
    (AWS lists a terminated instance for about an hour; ARM keeps nothing of a deleted VM).
    An id it does not name ended at a time nobody says."""
    method = getattr(provisioner, "ended_unlisted", None)
    return dict(method(list(instance_ids))) if method is not None and instance_ids else {}


def unconfirmed_ended_line(inst: Instance, what: str) -> str:
    """A failed launch's ended instance whose cloud does not say which request made it: ``i-1
    (us-east-1) carries launch L's tag and has ended; aws does not say which request created
    it: <what>`` (what the cleanup did with it)."""
    where = f" ({inst.offer.region})" if inst.offer.region else ""
    return (
        f"{inst.instance_id}{where} carries launch {inst.tags.get(TAG_LAUNCH, '')}'s tag and has "
        f"ended; {inst.offer.provider or 'the cloud'} does not say which request created it: "
        + what
    )


def not_ours_line(inst: Instance, job_id: str, launch_ids: Collection[str]) -> str:
    """One line for an instance listed with job ``job_id``'s tags that :func:`launched_by`
    refused: ``i-1 carries job J's tags but was not launched by it: left alone (why)``; one
    whose cloud does not say which request made it (:func:`unconfirmed_launch`) is not said
    to be another's: ``i-1 carries job J's tags but aws does not confirm that the job launched
    it: left alone (aws does not say which request created it)``."""
    launch = inst.tags.get(TAG_LAUNCH, "")
    cloud = inst.offer.provider or "the cloud"
    head = "was not launched by it"
    if not launch:
        why = "it has no spotwise:launch tag"
    elif launch not in launch_ids:
        why = f"its launch tag {launch} names no launch of this job"
    elif inst.launch_identity is None:
        head = f"{cloud} does not confirm that the job launched it"
        why = f"{cloud} does not say which request created it"
    else:
        why = f"its launch tag names launch {launch}, but {cloud} says another request created it"
    where = f" ({inst.offer.region})" if inst.offer.region else ""
    return f"{inst.instance_id}{where} carries job {job_id}'s tags but {head}: left alone ({why})"
