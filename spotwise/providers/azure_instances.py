"""How an ARM virtual machine reads as an :class:`~spotwise.providers.base.Instance`'s state:
its instance view's power state and status times, its provisioning state. Pure readers of the
SDK's objects, split from :mod:`spotwise.providers.azure_provisioner` so that each file stays
readable (as :mod:`spotwise.providers.gcp_instances` is for GCP)."""

from __future__ import annotations

from typing import Any

from spotwise.providers.base import InstanceState

POWER = {
    "running": InstanceState.RUNNING,
    "starting": InstanceState.PENDING,
    "stopping": InstanceState.STOPPING,
    "deallocating": InstanceState.STOPPING,
    "stopped": InstanceState.TERMINATED,
    "deallocated": InstanceState.TERMINATED,
}


def power_state(raw: Any) -> str:
    """The VM's power state from its instance view (``running``, ``stopped``, ...; "" if none)."""
    view = getattr(raw, "instance_view", None)
    for status in (getattr(view, "statuses", None) or []) if view else []:
        code = str(status.code or "")
        if code.startswith("PowerState/"):
            return code.split("/", 1)[1]
    return ""


def status_time(raw: Any, created: float) -> float | None:
    """When the VM's instance view says its power state, else its last provisioning operation
    (a deallocation is one), was reached: the status's ``time``; None when it gives none, or
    none after the VM's creation (``created``)."""
    view = getattr(raw, "instance_view", None)
    statuses = [s for s in (getattr(view, "statuses", None) or []) if getattr(s, "time", None)]
    for head in ("PowerState/", "ProvisioningState/"):
        for status in statuses:
            if str(status.code or "").startswith(head) and status.time.timestamp() > created:
                return float(status.time.timestamp())
    return None


def vm_state(raw: Any) -> InstanceState:
    prov = plain(raw.provisioning_state)
    if prov == "Failed":
        return InstanceState.FAILED
    if prov == "Deleting":
        return InstanceState.STOPPING
    power = power_state(raw)
    if power:
        return POWER.get(power, InstanceState.PENDING)
    return InstanceState.RUNNING if prov == "Succeeded" else InstanceState.PENDING


def plain(x: Any) -> str:
    """An SDK enum or string as its plain value (``VirtualMachinePriorityTypes.SPOT`` → Spot)."""
    return str(getattr(x, "value", x) or "")


def as_float(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None
