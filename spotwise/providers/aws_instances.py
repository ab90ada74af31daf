"""An EC2 ``DescribeInstances`` entry as spotwise's :class:`~spotwise.providers.base.Instance`
(split out of :mod:`spotwise.providers.aws_provisioner`, which tags its launches with the
prices read back here)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from spotwise.providers.aws_catalog import zone_region
from spotwise.providers.base import Instance, InstanceState, Market, Offer

TAG_MARKET, TAG_PRICE, TAG_OD_PRICE = "spotwise:market", "spotwise:price", "spotwise:od-price"
_STATES = {
    "pending": InstanceState.PENDING, "running": InstanceState.RUNNING,
    "shutting-down": InstanceState.STOPPING, "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPING, "terminated": InstanceState.TERMINATED,
}  # fmt: skip
_REVOKED_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")


def ec2_instance(raw: dict[str, Any], region: str, *, noticed: bool, now: float) -> Instance:
    """``raw`` (one instance of a ``DescribeInstances`` reservation, in ``region``) as an
    :class:`Instance`. A terminated instance is ``REVOKED`` when EC2 says the spot market took
    it, or when its trial was noticed of an interruption and we did not terminate it
    (``noticed``); it ended at its state transition's time, else ``now``."""
    tags = ec2_tags(raw)
    zone = raw.get("Placement", {}).get("AvailabilityZone", "")
    market = Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND
    od = _float(tags.get(TAG_OD_PRICE))
    price = _float(tags.get(TAG_PRICE)) or od
    offer = Offer(
        provider="aws",
        region=zone_region(zone) if zone else region,
        zone=zone,
        instance_type=raw.get("InstanceType", ""),
        market=market,
        price_per_hour=price,
        on_demand_price_per_hour=od,
    )
    name = raw.get("State", {}).get("Name", "pending")
    state = _STATES.get(name, InstanceState.PENDING)
    ended_at = None
    if state is InstanceState.TERMINATED:
        reason = raw.get("StateReason", {}).get("Code", "")
        if reason in _REVOKED_REASONS or noticed:
            state = InstanceState.REVOKED
        ended_at = _transition_time(raw.get("StateTransitionReason", "")) or now
    launched = raw.get("LaunchTime")
    t0 = launched.timestamp() if isinstance(launched, datetime) else float(now)
    return Instance(
        instance_id=raw["InstanceId"],
        offer=offer,
        state=state,
        tags=tags,
        launched_at=t0,
        ended_at=ended_at,
        launch_identity=raw.get("ClientToken") or None,  # the launch id spotwise sent
    )


def ec2_tags(raw: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}


def _float(text: str | None) -> float:
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def _transition_time(reason: str) -> float | None:
    """``"User initiated (2026-11-22 22:23:37 GMT)"`` → epoch seconds."""
    m = re.search(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:GMT|UTC)\)", reason)
    if m is None:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
