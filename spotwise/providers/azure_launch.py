"""What an Azure launch sends: the VM name and the ``virtualMachines`` PUT body (plain JSON).

The launch spec (:func:`spotwise.providers.channel.launch_spec`: the trial's argv/env/workdir,
its artifacts folder and attempt) becomes JSON, base64-encoded into a fixed cloud-init script
(``osProfile.customData``); the only text placed into that script is the base64 alphabet inside
single quotes, checked before use, so nothing of the request reaches a shell as code. The NIC
is created with the VM (``networkInterfaceConfigurations``) and, like the OS disk, deleted with
it. Spot VMs get ``priority: Spot``, an ``evictionPolicy`` and ``billingProfile.maxPrice``.
ARM never returns ``customData``, so the artifacts folder and the attempt are also tags
(``spotwise:artifacts`` when it fits Azure's 256-character tag values, ``spotwise:attempt``):
a restarted controller reads the trial's channel from them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

from spotwise.errors import ProviderError
from spotwise.providers.azure import AzureSettings
from spotwise.providers.azure_catalog import split_zone
from spotwise.providers.base import LaunchRequest, Market
from spotwise.providers.channel import launch_spec

TAG_PRICE = "spotwise:price"  # the offer's price at launch, to rebuild the Offer in describe
TAG_ON_DEMAND = "spotwise:on-demand-price"
TAG_ARTIFACTS, TAG_ATTEMPT = "spotwise:artifacts", "spotwise:attempt"
TAG_VALUE_LIMIT = 256
_B64 = re.compile(r"^[A-Za-z0-9+/=]*$")
# When a step fails or the agent cannot start or fails (spotwise missing from the image, an
# import error, a crash), the VM powers off (the trap; aws_agent.POWER_OFF_ON_FAILURE): nothing
# else would, and the controller deletes a stopped VM (still billed until deallocated). One
# that ran powers off shutdown_after_s after the trial.
CUSTOM_DATA = """#!/bin/sh
# spotwise trial launcher (generated). The launch spec is base64 of JSON: data, never shell code.
set -eu
trap 'rc=$?; if [ "$rc" -ne 0 ]; then echo "spotwise: the launcher or the trial agent failed \
(exit $rc): powering off" >&2; shutdown -h now; fi' EXIT
mkdir -p /var/lib/spotwise
echo '{payload}' | base64 -d > /var/lib/spotwise/launch.json
# a child this script waits for (exec in a subshell): its failure reaches the trap
(exec python3 -m spotwise.providers.azure_agent --launch /var/lib/spotwise/launch.json)
"""


def vm_name(client_token: str) -> str:
    """A valid, deterministic VM name for a launch: ``sw-<slug>-<hash8>`` (≤ 52 chars)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", client_token.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(client_token.encode()).hexdigest()[:8]
    return f"sw-{slug}-{digest}" if slug else f"sw-{digest}"


def custom_data(spec: dict[str, Any]) -> str:
    """Base64 of the cloud-init script that starts the agent with this launch spec."""
    payload = base64.b64encode(json.dumps(spec, sort_keys=True).encode()).decode()
    if not _B64.match(payload):  # cannot happen; guards the one substitution into shell text
        raise ProviderError("azure: launch spec encoding produced non-base64 text")
    return base64.b64encode(CUSTOM_DATA.format(payload=payload).encode()).decode()


def image_reference(image: str) -> dict[str, str]:
    if image.startswith("/"):
        return {"id": image}
    parts = image.split(":")
    if len(parts) != 4:
        raise ProviderError(
            f"providers[].options.image: {image!r} is neither an image resource id nor a URN "
            "Publisher:Offer:Sku:Version"
        )
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))


def vm_body(
    settings: AzureSettings, name: str, request: LaunchRequest, artifacts: str
) -> dict[str, Any]:
    s, offer = settings, request.offer
    spec = launch_spec(request, artifacts, s.options)
    region, zone = split_zone(offer.zone)
    user = s.opt("admin_username", "spotwise")
    ip_config: dict[str, Any] = {"subnet": {"id": s.opt("subnet_id")}, "primary": True}
    if s.opt("public_ip", "false").lower() == "true":
        ip_config["publicIPAddressConfiguration"] = {
            "name": f"{name}-ip",
            "properties": {"deleteOption": "Delete"},
        }
    tags = dict(request.tags)
    tags[TAG_PRICE] = repr(offer.price_per_hour)
    tags[TAG_ON_DEMAND] = repr(offer.on_demand_price_per_hour)
    tags[TAG_ATTEMPT] = str(spec["attempt"])
    if artifacts and len(artifacts) <= TAG_VALUE_LIMIT:
        tags[TAG_ARTIFACTS] = artifacts
    props: dict[str, Any] = {
        "hardwareProfile": {"vmSize": offer.instance_type},
        "storageProfile": {
            "imageReference": image_reference(s.opt("image")),
            "osDisk": {
                "createOption": "FromImage",
                "deleteOption": "Delete",
                "diskSizeGB": int(s.opt("os_disk_size_gb", "64")),
                "managedDisk": {"storageAccountType": "StandardSSD_LRS"},
            },
        },
        "osProfile": {
            "computerName": name,
            "adminUsername": user,
            "customData": custom_data(spec),
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {
                    "publicKeys": [
                        {
                            "path": f"/home/{user}/.ssh/authorized_keys",
                            "keyData": s.opt("ssh_public_key"),
                        }
                    ]
                },
            },
        },
        "networkProfile": {
            "networkApiVersion": "2022-11-01",
            "networkInterfaceConfigurations": [
                {
                    "name": f"{name}-nic",
                    "properties": {
                        "primary": True,
                        "deleteOption": "Delete",
                        "ipConfigurations": [{"name": "ipconfig1", "properties": ip_config}],
                    },
                }
            ],
        },
    }
    if offer.market is Market.SPOT:
        props["priority"] = "Spot"
        props["evictionPolicy"] = s.opt("eviction_policy", "Delete")
        props["billingProfile"] = {"maxPrice": float(s.opt("max_price", "-1"))}
    body: dict[str, Any] = {"location": region, "tags": tags, "properties": props}
    if zone:
        body["zones"] = [zone]
    return body
