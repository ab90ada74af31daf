"""The Azure Provisioner: Spot VMs created, watched and deleted through azure-mgmt-compute.

* ``launch`` PUTs one VM (``priority: Spot``, ``evictionPolicy``, ``billingProfile.maxPrice``;
  tags = our tags) and waits for the ARM long-running operation. The VM name derives from
  ``client_token``; a VM already carrying that launch tag is returned instead of re-created.
* ``describe`` lists the resource group's VMs with their instance view and keeps those carrying
  our tags. VMs this object saw that disappear stay listed (REVOKED for Spot: eviction with the
  ``Delete`` policy removes the VM; TERMINATED otherwise).
* ``notices``: Azure announces an eviction only inside the VM (Scheduled Events ``Preempt``,
  read by :mod:`spotwise.providers.azure_agent`), so the controller reports (a) agent records
  from an optional ``report_source`` and (b) evictions it observes itself: a Spot VM of ours
  deallocated or gone without our asking (deadline = when it was seen).
* ``progress`` returns ``report_source`` records; without an Azure Blob store (not built yet)
  it returns ``[]``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from spotwise.errors import ProviderError
from spotwise.providers.azure import NAME, AzureSettings, api_error
from spotwise.providers.azure_catalog import split_zone, zone_name
from spotwise.providers.azure_launch import TAG_ON_DEMAND, TAG_PRICE, vm_body, vm_name
from spotwise.providers.base import (
    TAG_LAUNCH,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Notice,
    NoticeKind,
    Offer,
    is_ours,
)
from spotwise.providers.gcp_prices import PriceTable

# ``report_source(instance_id)`` returns *all* records the trial has written so far (its
# SPOTWISE_EVENTS_FILE lines, e.g. synced to object storage); ``type == "notice"`` records
# are notices, the rest progress. The provisioner remembers how many it has returned.
ReportSource = Callable[[str], Iterable[Mapping[str, object]]]
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
_POWER = {
    "running": InstanceState.RUNNING,
    "starting": InstanceState.PENDING,
    "stopping": InstanceState.STOPPING,
    "deallocating": InstanceState.STOPPING,
    "stopped": InstanceState.TERMINATED,
    "deallocated": InstanceState.TERMINATED,
}


class AzureProvisioner:
    name = NAME

    def __init__(
        self,
        settings: AzureSettings,
        client: Any,
        prices: PriceTable,
        *,
        report_source: ReportSource | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.client = client
        self.prices = prices
        self.report_source = report_source
        self.clock = clock
        self.group = settings.opt("resource_group")
        self._known: dict[str, Instance] = {}
        self._terminated: set[str] = set()
        self._evicted: dict[str, float] = {}
        self._noticed: set[str] = set()
        self._progress_seen: dict[str, int] = {}

    def _lro_kwargs(self) -> dict[str, Any]:
        return {"polling_interval": float(self.settings.opt("polling_interval", "5"))}

    # ---- launch ---------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        if not is_ours(request.tags):
            raise ProviderError("azure: refusing to launch a VM without spotwise tags")
        offer = request.offer
        if offer.provider != NAME:
            raise ProviderError(f"azure: cannot launch a {offer.provider!r} offer")
        name = vm_name(request.client_token)
        existing = self._get(name)
        if existing is not None and existing.tags.get(TAG_LAUNCH) == request.client_token:
            self._known[name] = existing
            return existing  # the same launch, retried
        what = f"launching {offer.instance_type} in {offer.zone}"
        try:
            poller = self.client.virtual_machines.begin_create_or_update(
                self.group, name, vm_body(self.settings, name, request), **self._lro_kwargs()
            )
            raw = poller.result()
        except Exception as e:
            raise api_error(f"azure: {what}", e) from None
        inst = self._to_instance(raw)
        if inst.state is InstanceState.PENDING and _v(raw.provisioning_state) == "Succeeded":
            inst.state = InstanceState.RUNNING
        self._known[name] = inst
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

    def _list(self) -> dict[str, Instance]:
        try:
            raws = list(self.client.virtual_machines.list(self.group, expand="instanceView"))
        except Exception as e:
            raise api_error(f"azure: listing VMs in {self.group}", e) from None
        out = {}
        for raw in raws:
            inst = self._to_instance(raw)
            if is_ours(inst.tags):
                out[inst.instance_id] = inst
        return out

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        want = dict(tags or {})
        live = self._list()
        now = self.clock()
        for iid, inst in live.items():
            spot = inst.offer.market is Market.SPOT
            if iid in self._terminated:
                inst.state = InstanceState.TERMINATED
            elif inst.state is InstanceState.TERMINATED and spot:
                inst.state = InstanceState.REVOKED  # deallocated by eviction, not by us
                self._evicted.setdefault(iid, now)
            elif inst.state is InstanceState.STOPPING and spot:
                self._evicted.setdefault(iid, now)
            if inst.state.is_terminal():
                inst.ended_at = inst.ended_at or self._evicted.get(iid, now)
            self._known[iid] = inst
        for iid, inst in self._known.items():
            if iid in live or inst.state.is_terminal():
                continue
            if inst.offer.market is Market.SPOT and iid not in self._terminated:
                inst.state = InstanceState.REVOKED  # Delete eviction policy: the VM is gone
                self._evicted.setdefault(iid, now)
            else:
                inst.state = InstanceState.TERMINATED
            inst.ended_at = now
        return [i for i in self._known.values() if all(i.tags.get(k) == v for k, v in want.items())]

    def _to_instance(self, raw: Any) -> Instance:
        tags = dict(raw.tags or {})
        price, od = _float(tags.pop(TAG_PRICE, None)), _float(tags.pop(TAG_ON_DEMAND, None))
        size = _v(raw.hardware_profile.vm_size) if raw.hardware_profile else ""
        zones = list(raw.zones or [])
        region = raw.location
        market = Market.SPOT if _v(raw.priority) == "Spot" else Market.ON_DEMAND
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
        return Instance(
            instance_id=raw.name,
            offer=offer,
            state=_state(raw),
            tags={str(k): str(v) for k, v in tags.items()},
            launched_at=created.timestamp() if created else 0.0,
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
        for iid in targets:
            try:  # start the deletion; NIC and OS disk go with the VM (deleteOption: Delete)
                self.client.virtual_machines.begin_delete(self.group, iid, polling=False)
            except Exception as e:
                if getattr(e, "status_code", None) != 404:
                    raise api_error(f"azure: deleting VM {iid}", e) from None
            self._terminated.add(iid)
            known = self._known.get(iid)
            if known is not None and not known.state.is_terminal():
                known.state, known.ended_at = InstanceState.TERMINATED, now

    # ---- notices / progress ----------------------------------------------------------------
    def _reported(self, iid: str) -> list[dict[str, object]]:
        return [dict(r) for r in self.report_source(iid)] if self.report_source else []

    def notices(self) -> list[Notice]:
        ours = {i.instance_id: i for i in self.describe()}
        out = []
        for iid in ours:
            if iid in self._noticed or iid in self._terminated:
                continue
            rec = next((r for r in self._reported(iid) if r.get("type") == "notice"), None)
            if rec is not None:
                at = float(rec.get("received_at") or self.clock())  # type: ignore[arg-type]
                deadline = float(rec.get("deadline") or at)  # type: ignore[arg-type]
            elif iid in self._evicted:
                at = deadline = self._evicted[iid]
            else:
                continue
            out.append(Notice(iid, NoticeKind.INTERRUPTION, at, max(at, deadline)))
            self._noticed.add(iid)
        return out

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        recs = [r for r in self._reported(instance_id) if r.get("type") != "notice"]
        seen = self._progress_seen.get(instance_id, 0)
        self._progress_seen[instance_id] = len(recs)
        return recs[seen:]


def _state(raw: Any) -> InstanceState:
    prov = _v(raw.provisioning_state)
    if prov == "Failed":
        return InstanceState.FAILED
    if prov == "Deleting":
        return InstanceState.STOPPING
    view = getattr(raw, "instance_view", None)
    for status in (getattr(view, "statuses", None) or []) if view else []:
        code = str(status.code or "")
        if code.startswith("PowerState/"):
            return _POWER.get(code.split("/", 1)[1], InstanceState.PENDING)
    return InstanceState.RUNNING if prov == "Succeeded" else InstanceState.PENDING


def _v(x: Any) -> str:
    """An SDK enum or string as its plain value (``VirtualMachinePriorityTypes.SPOT`` → Spot)."""
    return str(getattr(x, "value", x) or "")


def _float(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


__all__ = ["AzureProvisioner", "split_zone"]
