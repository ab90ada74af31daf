"""What a listed GCP instance means to spotwise: its ``Instance`` state, offer, tags and channel.

The read-side counterpart of :mod:`spotwise.providers.gcp_launch` (what a launch sends):
functions that turn a ``compute_v1.Instance`` as ``get``/``aggregated_list`` return it into a
:class:`~spotwise.providers.base.Instance`. Exact tags come back from the ``spotwise-tags``
metadata item (else from the labels; ``spotwise:managed`` only from the ``spotwise-managed``
label, which metadata cannot forge; the launch that made it only from its name:
:func:`launch_identity`), the offer from ``spotwise-offer`` (else rebuilt from the machine type,
the scheduling model and the price table), the trial's channel (artifacts folder, attempt) from
``spotwise-launch``. They only read attributes of the object given (no
SDK import, no API call), so they sit apart from the provisioner's launch/watch/delete logic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from spotwise.providers.base import TAG_LAUNCH, TAG_MANAGED, Instance, InstanceState, Market, Offer
from spotwise.providers.gcp import NAME, label_key, labels_to_tags, zone_region
from spotwise.providers.gcp_launch import (
    META_LAUNCH,
    META_OFFER,
    META_TAGS,
    channel_of,
    instance_name,
    json_dict,
)
from spotwise.providers.gcp_prices import PriceTable

_P, _R, _S, _T = (
    InstanceState.PENDING, InstanceState.RUNNING, InstanceState.STOPPING, InstanceState.TERMINATED,
)  # fmt: skip
_STATE = {
    "PROVISIONING": _P, "STAGING": _P, "PENDING": _P, "REPAIRING": _P, "RUNNING": _R,
    "STOPPING": _S, "SUSPENDING": _S, "PENDING_STOP": _S, "DEPROVISIONING": _S,
    "STOPPED": _T, "SUSPENDED": _T, "TERMINATED": _T,
}  # fmt: skip


def rfc3339_ts(rfc3339: str) -> float:
    """Epoch seconds of a GCE RFC 3339 timestamp; ``0.0`` for an empty one."""
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() if rfc3339 else 0.0


def operation_times(ops: Iterable[Any], default: float, *, end: bool = False) -> dict[str, float]:
    """Instance id (``zone/name``) → the time of the operation of ``ops`` (zone operations as
    ``aggregated_list`` returns them) that targets it: its start (else insert) time, or with
    ``end`` its end time where it has one (a delete has stopped the VM by then); ``default``
    for an operation that gives none. The latest one where several target the same instance."""
    out: dict[str, float] = {}
    for op in ops:
        parts = op.target_link.split("/")
        if "zones" in parts and "instances" in parts:
            zone, name = parts[parts.index("zones") + 1], parts[parts.index("instances") + 1]
            stamp = (op.end_time if end else "") or op.start_time or op.insert_time
            at = rfc3339_ts(stamp) or default
            out[f"{zone}/{name}"] = max(out.get(f"{zone}/{name}", at), at)
    return out


def read_instance(raw: Any, prices: PriceTable) -> tuple[Instance, tuple[str, str] | None]:
    """The ``Instance`` a listed VM is, and its ``(artifacts, attempt)`` channel if it has one."""
    zone = raw.zone.rsplit("/", 1)[-1]
    meta = {item.key: item.value for item in raw.metadata.items}
    tags = json_dict(meta.get(META_TAGS)) or labels_to_tags(dict(raw.labels))
    if raw.labels.get(label_key(TAG_MANAGED)) != "true":
        tags.pop(TAG_MANAGED, None)  # metadata anyone can write never makes a VM ours: the label
    offer = offer_of(raw, zone, json_dict(meta.get(META_OFFER)), prices)
    state = _STATE.get(raw.status, InstanceState.PENDING)
    channel = channel_of(meta.get(META_LAUNCH))
    launch = str(tags.get(TAG_LAUNCH) or "")
    inst = Instance(
        instance_id=f"{zone}/{raw.name}",
        offer=offer,
        state=state,
        tags={str(k): str(v) for k, v in tags.items()},
        launched_at=rfc3339_ts(raw.creation_timestamp),
        ended_at=rfc3339_ts(raw.last_stop_timestamp)
        if state.is_terminal() and raw.last_stop_timestamp
        else None,
        exists=True,  # listed: even a TERMINATED (stopped) VM keeps its disk until deleted
        launch_identity=launch_identity(raw.name, launch),
    )
    return inst, channel


def launch_identity(name: str, launch: str) -> str | None:
    """The launch a VM named ``name`` is, by GCE's own identity of it: ``launch`` (its
    ``spotwise:launch`` tag) when the name is the one spotwise gives that launch's instance
    (:func:`~spotwise.providers.gcp_launch.instance_name`; a name is set at insert and unique
    in its zone), else "" (GCE says: no launch of ours; None would be "cannot tell"): labels
    and metadata can be copied or set by anyone with the rights to, a name spotwise derived
    cannot be chosen by accident."""
    return launch if launch and name == instance_name(launch) else ""


def offer_of(raw: Any, zone: str, saved: Mapping[str, Any], prices: PriceTable) -> Offer:
    """The offer saved at launch, else one rebuilt from the VM and the price table."""
    if saved:
        try:
            return Offer(**{**saved, "market": Market(saved["market"])})
        except (TypeError, ValueError, KeyError):
            pass
    itype = raw.machine_type.rsplit("/", 1)[-1]
    spot = raw.scheduling.provisioning_model == "SPOT" or bool(raw.scheduling.preemptible)
    market = Market.SPOT if spot else Market.ON_DEMAND
    row = prices.lookup(itype, zone_region(zone), zone)
    price = (row.price(market) or 0.0) if row else 0.0
    return Offer(NAME, zone_region(zone), zone, itype, market, price, row.on_demand if row else 0.0)
