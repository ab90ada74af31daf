"""What a GCP launch sends: the instance name, requestId and the ``Instance`` resource.

Pure functions over plain data (no SDK import), so tests can read exactly what is sent. The
launch spec (:func:`spotwise.providers.channel.launch_spec`: the trial's argv/env/workdir, its
artifacts folder and attempt) travels as JSON in the ``spotwise-launch`` metadata item, where
the agent reads it and the provisioner reads the artifacts folder back after a restart; the
startup script is the same fixed text for every launch and only starts
:mod:`spotwise.providers.gcp_agent`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import uuid
from typing import Any

from spotwise.errors import ProviderError
from spotwise.providers.base import LaunchRequest, Market, Offer
from spotwise.providers.channel import launch_spec
from spotwise.providers.gcp import SCOPES, GcpSettings, tags_to_labels

META_LAUNCH = "spotwise-launch"
META_TAGS = "spotwise-tags"
META_OFFER = "spotwise-offer"
GUEST_NAMESPACE = "spotwise"
# An agent that cannot start or fails (spotwise missing from the image, an import error, a
# crash) powers the VM off (the trap; aws_agent.POWER_OFF_ON_FAILURE): nothing else would, and
# the controller deletes a stopped VM. One that ran powers off shutdown_after_s after the trial.
STARTUP_SCRIPT = """#!/bin/bash
# spotwise trial launcher (generated, identical for every launch). The trial's argv and env are
# JSON in the `spotwise-launch` metadata item; the agent reads them, the shell never does.
set -euo pipefail
trap 'rc=$?; if [ "$rc" -ne 0 ]; then echo "spotwise: the trial agent failed (exit $rc): \
powering off" >&2; shutdown -h now; fi' EXIT
# a child this script waits for (exec in a subshell): its failure reaches the trap
(exec python3 -m spotwise.providers.gcp_agent --from-metadata)
"""


def instance_name(client_token: str) -> str:
    """A valid, deterministic GCE name for a launch: ``sw-<slug>-<hash8>``."""
    slug = re.sub(r"[^a-z0-9-]+", "-", client_token.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(client_token.encode()).hexdigest()[:8]
    return f"sw-{slug}-{digest}" if slug else f"sw-{digest}"


def request_id(client_token: str, verb: str = "insert") -> str:
    """GCE ``requestId`` must be a UUID: derive one deterministically from the token."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"spotwise:gcp:{verb}:{client_token}"))


def instance_body(
    settings: GcpSettings, name: str, request: LaunchRequest, artifacts: str
) -> dict[str, Any]:
    """The ``Instance`` resource for a launch (plain data; visible in tests)."""
    s, offer = settings, request.offer
    spot = offer.market is Market.SPOT
    launch = launch_spec(request, artifacts, s.options)
    scheduling: dict[str, Any] = {
        "provisioning_model": "SPOT" if spot else "STANDARD",
        "automatic_restart": not spot,
        "on_host_maintenance": "TERMINATE" if (spot or offer.gpus) else "MIGRATE",
    }
    if spot:
        action = s.opt("termination_action", "DELETE").upper()
        if action not in ("DELETE", "STOP"):
            raise ProviderError(
                f"providers[].options.termination_action must be DELETE or STOP, got {action!r}"
            )
        scheduling["instance_termination_action"] = action
    nic: dict[str, Any] = {"network": s.opt("network", "global/networks/default")}
    if s.opt("subnetwork"):
        nic["subnetwork"] = s.opt("subnetwork")
    if s.opt("external_ip", "true").lower() == "true":
        nic["access_configs"] = [{"name": "External NAT", "type_": "ONE_TO_ONE_NAT"}]
    return {
        "name": name,
        "machine_type": f"zones/{offer.zone}/machineTypes/{offer.instance_type}",
        "labels": tags_to_labels(request.tags),
        "metadata": {
            "items": [
                {"key": "startup-script", "value": STARTUP_SCRIPT},
                {"key": META_LAUNCH, "value": json.dumps(launch, sort_keys=True)},
                {"key": META_TAGS, "value": json.dumps(dict(request.tags), sort_keys=True)},
                {"key": META_OFFER, "value": json.dumps(offer_json(offer), sort_keys=True)},
                {"key": "enable-guest-attributes", "value": "TRUE"},
            ]
        },
        "disks": [
            {
                "boot": True,
                "auto_delete": True,
                "initialize_params": {
                    "source_image": s.opt("image"),
                    "disk_size_gb": int(s.opt("disk_size_gb", "50")),
                },
            }
        ],
        "network_interfaces": [nic],
        "scheduling": scheduling,
        "service_accounts": [
            {"email": s.opt("service_account", "default"), "scopes": list(SCOPES)}
        ],
    }


def offer_json(offer: Offer) -> dict[str, Any]:
    return {**dataclasses.asdict(offer), "market": offer.market.value}


def json_dict(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def channel_of(launch_json: str | None) -> tuple[str, str] | None:
    """``(artifacts, attempt)`` of the ``spotwise-launch`` item; None without a folder."""
    launch = json_dict(launch_json)
    artifacts = launch.get("artifacts")
    if not isinstance(artifacts, str) or not artifacts:
        return None
    return artifacts, str(launch.get("attempt", 0))
