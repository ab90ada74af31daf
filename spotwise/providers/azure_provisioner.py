"""The Azure Provisioner: Spot VMs created, watched and deleted through azure-mgmt-compute.

* ``launch`` PUTs one VM (``priority: Spot``, ``evictionPolicy``, ``billingProfile.maxPrice``;
  tags = our tags) and waits for the ARM long-running operation, at most
  ``operation_timeout_s`` (option, default 600 s): an operation ARM still reports in progress
  then is a ProviderError (not a CapacityError: the VM may exist, and the orchestrator's
  failed-launch cleanup finds it by its launch tag and deletes it); a stop signal ends the wait
  within a fraction of a second, as a refused launch (a CapacityError) whose VM that cleanup
  deletes the same way (:mod:`spotwise.providers.stopping`). The VM name derives from
  ``client_token``; a VM already carrying that launch tag is returned instead of re-created.
  The launch spec (the trial's argv/env, its artifacts folder and attempt) goes into the VM's
  custom data for :mod:`spotwise.providers.azure_agent`; a launch whose checkpoint location a
  VM cannot reach (``az://`` or a shared ``file://`` folder), or whose trial has no channel
  folder (option ``artifacts``, else that location; :mod:`spotwise.providers.channel`), is
  refused before anything is created.
* ``describe`` lists the resource group's VMs with their instance view and keeps those carrying
  our tags. VMs this object saw that disappear stay listed (REVOKED for Spot: eviction with the
  ``Delete`` policy removes the VM; TERMINATED otherwise). A listed VM that is ``stopped`` (powered
  off from inside: still allocated and billed) or ``deallocated`` is terminal but still
  ``exists`` until deleted; only a Spot VM deallocated without our asking is an eviction (an
  eviction deallocates or deletes, it never merely stops); a deallocated VM ended when its
  instance view's status ``time`` says (else when this object saw it down; a stopped one is
  billed: no end), and one left ``Failed`` (an async AllocationFailed) stays ``failed``, no
  eviction. A VM listed not ``Deleting`` after ARM accepted our delete (its operation failed)
  is deleted again, a few times at most. Each VM's ``exit_code`` is the one
  its agent wrote to the artifacts folder (:class:`~spotwise.providers.trialfiles.TrialFiles`;
  the folder and the attempt are read back from the ``spotwise:artifacts`` /
  ``spotwise:attempt`` tags after a restart: for the VMs of the job a describe filters by
  ``spotwise:job``, never for other jobs' VMs in the resource group). Each VM's
  ``launch_identity`` is its ``spotwise:launch`` tag only when its name is the one
  :func:`~spotwise.providers.azure_launch.vm_name` gives that launch: a VM someone else made
  and tagged as ours is never taken for one of the job's.
* ``notices``: Azure announces an eviction only inside the VM (Scheduled Events ``Preempt``,
  read by the agent, which writes it to its status in the artifacts folder with the event's
  ``NotBefore`` as deadline); the controller also reports evictions it observes itself: a Spot
  VM of ours deallocated or gone without our asking (deadline = when it was seen). Each VM's
  eviction is reported once.
* ``progress`` returns the trial's new events from the artifacts folder. A stop request (the
  trial's local stop file) and the local control file are relayed there, as on AWS.

Reads (the listing, each trial's files) happen at most once per ``poll_s`` (option, default
``$SPOTWISE_AZURE_POLL_S`` or 2 s); our own launches and deletions refresh the listing at once.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spotwise.errors import CapacityError, ProviderError
from spotwise.providers import stopping
from spotwise.providers.azure import NAME, AzureSettings, api_error
from spotwise.providers.azure_catalog import split_zone, zone_name
from spotwise.providers.azure_instances import as_float, plain, power_state, status_time, vm_state
from spotwise.providers.azure_launch import (
    TAG_ARTIFACTS,
    TAG_ATTEMPT,
    TAG_ON_DEMAND,
    TAG_PRICE,
    vm_body,
    vm_name,
)
from spotwise.providers.azure_lro import stop_polling, wait_or_stop
from spotwise.providers.base import (
    TAG_JOB,
    TAG_LAUNCH,
    TAG_TRIAL,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Notice,
    NoticeKind,
    Offer,
    is_ours,
)
from spotwise.providers.channel import artifacts_uri, attempt_of
from spotwise.providers.gcp_prices import PriceTable
from spotwise.providers.trialfiles import Tracks

DEFAULT_OPERATION_TIMEOUT_S = 600.0  # as GCP's operation_timeout_s
REDELETES = 3  # deletes sent again for a VM whose accepted delete failed
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")


class AzureProvisioner:
    name = NAME

    def __init__(
        self,
        settings: AzureSettings,
        client: Any,
        prices: PriceTable,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.client = client
        self.prices = prices
        self.clock = clock
        self.group = settings.opt("resource_group")
        self.poll_s = float(
            settings.opt("poll_s") or os.environ.get("SPOTWISE_AZURE_POLL_S") or 2.0
        )
        self.operation_timeout_s = settings.seconds(
            "operation_timeout_s", DEFAULT_OPERATION_TIMEOUT_S
        )
        self.tracks = Tracks(self.poll_s, clock)
        self._known: dict[str, Instance] = {}
        self._terminated: set[str] = set()
        self._evicted: dict[str, float] = {}
        self._redeletes: dict[str, int] = {}  # deletes sent again (:meth:`_redelete`)
        self._noticed: set[str] = set()
        self._cache: dict[tuple[tuple[str, str], ...], tuple[float, list[Instance]]] = {}

    def _lro_kwargs(self) -> dict[str, Any]:
        return {"polling_interval": float(self.settings.opt("polling_interval", "5"))}

    # ---- launch ---------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        if not is_ours(request.tags):
            raise ProviderError("azure: refusing to launch a VM without spotwise tags")
        offer = request.offer
        if offer.provider != NAME:
            raise ProviderError(f"azure: cannot launch a {offer.provider!r} offer")
        ckpt = request.env.get("SPOTWISE_CHECKPOINT_URI", "")
        job, trial = request.tags[TAG_JOB], request.tags[TAG_TRIAL]
        artifacts = artifacts_uri(NAME, self.settings.options, ckpt, job, trial)
        attempt = str(attempt_of(request.env))
        name = vm_name(request.client_token)
        self._cache.clear()
        existing = self._get(name)
        if existing is not None and existing.tags.get(TAG_LAUNCH) == request.client_token:
            self._known[name] = existing
            self.tracks.add(name, artifacts, attempt, request.env)
            return existing  # the same launch, retried
        what = f"launching {offer.instance_type} in {offer.zone}"
        if stopping.requested():  # asked before anything is bought: nothing to delete
            raise _stopped(what, "not sent", name)
        body = vm_body(self.settings, name, request, artifacts)
        raw: Any
        try:
            poller = self.client.virtual_machines.begin_create_or_update(
                self.group, name, body, **self._lro_kwargs()
            )
            stopped = wait_or_stop(poller, self.operation_timeout_s)
            done = poller.done()
            raw = poller.result() if done else None  # result() before done: a half-parsed poll
        except Exception as e:
            raise api_error(f"azure: {what}", e) from None
        if stopped and not done:
            stop_polling(poller)
            raise _stopped(what, "stopped waiting for the create", name)
        if not done:
            stop_polling(poller)
            raise ProviderError(
                f"azure: {what}: VM {name} still being created at the "
                f"{self.operation_timeout_s:g} s deadline (operation_timeout_s); it may exist: "
                f"spotwise looks for it by its {TAG_LAUNCH} tag and deletes it",
                hint="nothing to fix if it passes; if Azure is slow to create VMs here, raise "
                "the azure provider's operation_timeout_s",
            )
        inst = self._to_instance(raw)
        if inst.state is InstanceState.PENDING and plain(raw.provisioning_state) == "Succeeded":
            inst.state = InstanceState.RUNNING
        self._known[name] = inst
        self.tracks.add(name, artifacts, attempt, request.env)
        return inst

    # ---- describe -------------------------------------------------------------------------
    def _get(self, name: str) -> Instance | None:
        try:
            raw = self.client.virtual_machines.get(self.group, name, expand="instanceView")
        except Exception as e:
            if getattr(e, "status_code", None) == 404:
                return None
            raise api_error(f"azure: reading VM {name}", e) from None
        return self._to_instance(raw)

    def _list(self) -> dict[str, tuple[Instance, str, float | None]]:
        """Our VMs in the resource group: id → (instance, power state: ``stopped``, ...,
        :func:`~spotwise.providers.azure_instances.status_time`)."""
        try:
            raws = list(self.client.virtual_machines.list(self.group, expand="instanceView"))
        except Exception as e:
            raise api_error(f"azure: listing VMs in {self.group}", e) from None
        out = {}
        for raw in raws:
            inst = self._to_instance(raw)
            if is_ours(inst.tags):
                out[inst.instance_id] = (inst, power_state(raw), status_time(raw, inst.launched_at))
        return out

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        want = dict(tags or {})
        key = tuple(sorted(want.items()))
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.poll_s:
            return hit[1]
        live = self._list()
        now = self.clock()
        for iid, (inst, power, stamp) in live.items():
            spot = inst.offer.market is Market.SPOT
            if iid in self._terminated:
                if inst.state is not InstanceState.STOPPING:  # not Deleting: its delete failed
                    self._redelete(iid)
                inst.state = InstanceState.TERMINATED
                inst.exists = False  # its deletion, asked by us, is under way
            elif inst.state is InstanceState.FAILED:
                pass  # provisioningState Failed (an async AllocationFailed left it): no eviction
            elif spot and power == "deallocated":
                inst.state = InstanceState.REVOKED  # deallocated by eviction, not by us
                self._evicted.setdefault(iid, now)
            elif spot and power == "deallocating":
                self._evicted.setdefault(iid, now)
            # "stopped" / "stopping": powered off from inside (the agent's fallback shutdown, a
            # user), not evicted; still allocated and billed: TERMINATED, and it still exists
            if inst.state.is_terminal():
                inst.ended_at = self._stopped_at(iid, power, stamp, now)
            self._known[iid] = inst
        for iid, inst in self._known.items():
            if iid in live:
                continue
            inst.exists = False
            if inst.state.is_terminal():
                continue
            if inst.offer.market is Market.SPOT and iid not in self._terminated:
                inst.state = InstanceState.REVOKED  # Delete eviction policy: the VM is gone
                self._evicted.setdefault(iid, now)
            else:
                inst.state = InstanceState.TERMINATED
            inst.ended_at = now
        out = [i for i in self._known.values() if all(i.tags.get(k) == v for k, v in want.items())]
        own_job = TAG_JOB in want  # never follow (read the folders of) other jobs' VMs
        for inst in out:
            if own_job:
                self._follow(inst)
            self.tracks.observe(inst)
        self._cache[key] = (time.monotonic(), out)
        return out

    def _redelete(self, iid: str) -> None:
        """Send the delete again (idempotent) of a VM ARM lists as not being deleted after it
        accepted our delete (its operation failed), at most :data:`REDELETES` times."""
        n = self._redeletes.get(iid, 0)
        if n < REDELETES:
            self._redeletes[iid] = n + 1
            with contextlib.suppress(Exception):  # tried again at the next listing
                self.client.virtual_machines.begin_delete(self.group, iid, polling=False)

    def _stopped_at(self, iid: str, power: str, stamp: float | None, now: float) -> float | None:
        """When a listed VM in a terminal state stopped being billed for compute (None: not
        known). Being deleted by us: now (its eviction's time if it was evicted first). Still
        allocated (``stopped``): None, billed while it exists. Deallocated (evicted, or
        ``Failed`` and never allocated): its instance view's time, else when this object first
        saw it down after seeing it up, else None (a fresh process, e.g. a cancel's)."""
        if iid in self._terminated:
            return self._evicted.get(iid, now)
        if power not in ("deallocated", ""):
            return None
        seen = self._known.get(iid)
        if stamp is not None or seen is None:
            return stamp
        return seen.ended_at if seen.state.is_terminal() else self._evicted.get(iid, now)

    def _follow(self, inst: Instance) -> None:
        """Track a VM's trial from its tags (after a restart); only for a VM the caller names
        or whose job it describes."""
        uri = inst.tags.get(TAG_ARTIFACTS)
        if uri and inst.instance_id not in self.tracks.by_id:
            self.tracks.add(inst.instance_id, uri, inst.tags.get(TAG_ATTEMPT, "0"))

    def _to_instance(self, raw: Any) -> Instance:
        tags = dict(raw.tags or {})
        price, od = as_float(tags.pop(TAG_PRICE, None)), as_float(tags.pop(TAG_ON_DEMAND, None))
        size = plain(raw.hardware_profile.vm_size) if raw.hardware_profile else ""
        zones = list(raw.zones or [])
        region = raw.location
        market = Market.SPOT if plain(raw.priority) == "Spot" else Market.ON_DEMAND
        if price is None:
            row = self.prices.lookup(size, region)
            price = (row.price(market) or 0.0) if row else 0.0
            od = row.on_demand if row else 0.0
        offer = Offer(
            NAME,
            region,
            zone_name(region, zones[0] if zones else ""),
            size,
            market,
            price,
            od or 0.0,
        )
        created = getattr(raw, "time_created", None)
        launch = str(tags.get(TAG_LAUNCH) or "")
        return Instance(
            instance_id=raw.name,
            offer=offer,
            state=vm_state(raw),
            tags={str(k): str(v) for k, v in tags.items()},
            launched_at=created.timestamp() if created else 0.0,
            exists=True,  # listed: even a stopped or deallocated VM holds billed resources
            # the launch that made it by ARM's own identity of it: its launch tag when its name
            # is the one spotwise gives that launch's VM (a name is set at create and unique in
            # the resource group; tags can be copied or set by anyone with tag rights)
            launch_identity=launch if launch and raw.name == vm_name(launch) else "",
        )

    # ---- terminate ------------------------------------------------------------------------
    def terminate(self, instance_ids: Sequence[str]) -> None:
        refused, targets = [], []
        for iid in instance_ids:
            if not _NAME_OK.match(iid):
                refused.append(iid)
                continue
            inst = self._get(iid)
            if inst is None:
                if iid not in self._known:
                    refused.append(iid)
                continue
            if not is_ours(inst.tags):
                refused.append(iid)
                continue
            targets.append(iid)
        if refused:
            raise ProviderError(
                f"azure: refusing to terminate {refused}: not VMs launched by spotwise "
                f"(no spotwise tags) in resource group {self.group}"
            )
        now = self.clock()
        self._cache.clear()
        for iid in targets:
            try:  # start the deletion; NIC and OS disk go with the VM (deleteOption: Delete)
                self.client.virtual_machines.begin_delete(self.group, iid, polling=False)
            except Exception as e:
                if getattr(e, "status_code", None) != 404:
                    raise api_error(f"azure: deleting VM {iid}", e) from None
            self._terminated.add(iid)
            known = self._known.get(iid)
            if known is not None:
                known.exists = False
                if not known.state.is_terminal():
                    known.state, known.ended_at = InstanceState.TERMINATED, now

    # ---- notices / progress ----------------------------------------------------------------
    def notices(self) -> list[Notice]:
        out: list[Notice] = []
        for n in self.tracks.notices():  # the agent's Preempt, with its NotBefore
            if n.instance_id in self._noticed or n.instance_id in self._terminated:
                continue
            self._noticed.add(n.instance_id)
            out.append(n)
        for iid in {i.instance_id for i in self.describe()}:
            if iid in self._noticed or iid in self._terminated or iid not in self._evicted:
                continue
            at = self._evicted[iid]
            out.append(Notice(iid, NoticeKind.INTERRUPTION, at, at))
            self._noticed.add(iid)
        return out

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        """The trial's events written to its artifacts folder since the last call."""
        known = self._known.get(instance_id)
        if known is not None:
            self._follow(known)
        return self.tracks.progress(instance_id)

    def agent_heard(self, instance_id: str) -> bool:
        """Whether its agent's status has been read (:mod:`spotwise.planner.no_word`)."""
        return self.tracks.heard(instance_id)


def _stopped(what: str, done: str, name: str) -> CapacityError:
    """A launch ended by a stop signal: refused (no failure of the trial); its VM, if the PUT
    made one, is the failed launch's to delete (ARM deletes a VM still being created: the
    create's operation ends ``Canceled``, OperationPreempted)."""
    return CapacityError(
        f"azure: {what}: {done}: the job is stopping (a signal); VM {name}, if the create made "
        f"it, is looked up by its {TAG_LAUNCH} tag and deleted",
        hint="nothing to fix: the job was asked to stop",
    )


__all__ = ["AzureProvisioner", "split_zone"]
