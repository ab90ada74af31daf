"""Scaffolding shared by the GCP and Azure provider tests (test_gcp.py, test_azure.py and their
contract suites).

Those tests drive the real ``google-cloud-compute`` and ``azure-mgmt-compute`` clients: both
send their REST calls through ``requests``, and ``responses`` answers each one from a stateful
fake of the cloud's API (``tests/fixtures/gcp/fake_gce.py``, ``tests/fixtures/azure/fake_arm.py``),
so nothing leaves the process. This module holds what the two clouds do alike: loading and
serving the fakes, credentials that hold a known token, provider configs, the offers and
launch requests the tests send, and checks that differ between the clouds only by names.

Import it as ``cloudfakes``, as the tests import ``contract`` (pytest puts this folder on
``sys.path``).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, TypeVar

import pytest
import responses
from contract import ProviderContract

from spotwise.providers import gcp
from spotwise.providers.base import LaunchRequest, Market, Offer, our_tags
from spotwise.providers.registry import ProviderConfig, cloud_module

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GCP_FIXTURES = FIXTURES / "gcp"
AZURE_FIXTURES = FIXTURES / "azure"
for _folder in (GCP_FIXTURES, AZURE_FIXTURES):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

import fake_arm  # noqa: E402 (needs the path above)
import fake_gce  # noqa: E402 (needs the path above)

__all__ = [
    "ARTIFACTS",
    "AZURE_FIXTURES",
    "GCP_FIXTURES",
    "AzureCredential",
    "FakeCloudContract",
    "Launches",
    "assert_import_loads_no_sdk",
    "assert_registry_finds",
    "azure_config",
    "fake_arm",
    "fake_gce",
    "gcp_config",
    "gcp_credentials",
    "gcp_provisioner",
    "serve",
]

F = TypeVar("F")


# ---- the fakes ----------------------------------------------------------------------------------
def serve(make_fake: Callable[[], F]) -> Iterator[F]:
    """The body of a ``fake`` fixture: a new fake (``fake_gce.FakeGCE`` or ``fake_arm.FakeARM``)
    answers every HTTP request until the test ends. Unused routes are fine; a request that no
    route matches fails the call that sent it."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        yield make_fake().install(rs)  # type: ignore[attr-defined]


# ---- credentials --------------------------------------------------------------------------------
def gcp_credentials(token: str) -> Any:
    """google.auth credentials that always hold ``token`` and never refresh from anywhere; the
    client sends the token as the bearer header of every request."""
    from google.auth import credentials as ga

    class FixedToken(ga.Credentials):  # type: ignore[misc]
        def refresh(self, request: Any) -> None:
            self.token = token

        @property
        def expired(self) -> bool:
            return False

        @property
        def valid(self) -> bool:
            return True

    creds = FixedToken()
    creds.token = token
    return creds


class AzureCredential:
    """Anything with ``get_token`` serves azure-core's bearer-token policy; this one hands out
    ``token`` and counts how often it was asked."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.calls = 0

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        self.calls += 1
        return AccessToken(self.token, 4_102_444_800)


# ---- configs ------------------------------------------------------------------------------------
GCP_IMAGE = "projects/debian-cloud/global/images/family/debian-12"
# Every launch needs a trial channel folder an instance can reach. The requests these tests send
# name no checkpoint location, so the configs name this shared folder (nothing is written there
# unless a test relays a stop or control file; tests of the channel pass their own folder).
ARTIFACTS = (Path(tempfile.gettempdir()) / "spotwise-cloudfakes-artifacts").as_uri()


def gcp_config(project: str = "proj-1", **options: str) -> ProviderConfig:
    """A GCP provider config for the fake's project (``FakeGCE.project`` is ``proj-1``); every
    read is fresh (``poll_s`` 0)."""
    opts = {"project": project, "image": GCP_IMAGE, "artifacts": ARTIFACTS, "poll_s": "0"}
    return ProviderConfig("gcp", options={**opts, **options})


def gcp_provisioner(config: ProviderConfig, credentials: Any) -> Any:
    """A GCP provisioner that polls the fake's operations without sleeping in between."""
    prov = gcp.open_provisioner(config, credentials=credentials)
    prov.poll_interval_s = 0.0
    return prov


def azure_config(fake: Any, **options: str) -> ProviderConfig:
    """An Azure provider config (eastus) for the fake's subscription and resource group; the
    long-running operations are polled without a pause and every read is fresh."""
    opts = {
        "subscription_id": fake.subscription,
        "resource_group": fake.group,
        "subnet_id": f"/subscriptions/{fake.subscription}/resourceGroups/{fake.group}/providers/"
        "Microsoft.Network/virtualNetworks/vnet/subnets/default",
        "image": "Canonical:ubuntu-24_04-lts:server:latest",
        "ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITEST you@host",
        "polling_interval": "0",
        "artifacts": ARTIFACTS,
        "poll_s": "0",
    }
    opts.update(options)
    return ProviderConfig("azure", regions=("eastus",), options=opts)


# ---- what the tests launch ----------------------------------------------------------------------
@dataclass(frozen=True)
class Launches:
    """The offer and the launch request one cloud's tests send: a one-GPU instance type in a
    zone at fixed prices, and a request whose argv and env carry shell metacharacters (they
    must reach the instance as data, never as part of a script)."""

    cloud: str
    zone: str
    instance_type: str
    price_per_hour: float
    on_demand_price_per_hour: float
    vcpus: int
    memory_gb: float
    gpu_name: str
    job: str
    argv: tuple[str, ...]
    env: Mapping[str, str]

    def offer(
        self,
        zone: str | None = None,
        instance_type: str | None = None,
        market: Market = Market.SPOT,
    ) -> Offer:
        zone = zone or self.zone
        return Offer(
            self.cloud,
            zone.rsplit("-", 1)[0],  # us-central1-a → us-central1, eastus-1 → eastus
            zone,
            instance_type or self.instance_type,
            market,
            self.price_per_hour,
            self.on_demand_price_per_hour,
            self.vcpus,
            self.memory_gb,
            1,
            self.gpu_name,
        )

    def request(
        self, token: str = "launch-0001", market: Market = Market.SPOT, **offer: Any
    ) -> LaunchRequest:
        return LaunchRequest(
            offer=self.offer(market=market, **offer),
            argv=self.argv,
            env=dict(self.env),
            tags=our_tags(self.job, "t1", token),
            client_token=token,
        )


# ---- checks that differ only by the cloud's name -------------------------------------------------
def assert_registry_finds(cloud: str, adapter: ModuleType) -> None:
    """``cloud_module(cloud)`` is the adapter module itself."""
    mod = cloud_module(cloud)
    assert mod.open_catalog is adapter.open_catalog
    assert mod.open_provisioner is adapter.open_provisioner
    assert mod.check is adapter.check


ADAPTER_MODULES = ("", "_catalog", "_provisioner", "_agent", "_prices", "_launch")


def assert_import_loads_no_sdk(cloud: str, sdk: tuple[str, ...]) -> None:
    """A fresh interpreter imports every ``spotwise.providers.<cloud>*`` module without loading
    any module whose name starts with one of ``sdk``."""
    code = "\n".join(
        [
            "import sys",
            *(f"import spotwise.providers.{cloud}{part}" for part in ADAPTER_MODULES),
            f"bad = [m for m in sys.modules if m.startswith({sdk!r})]",
            "assert not bad, bad",
        ]
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- the contract suite over a fake -------------------------------------------------------------
class FakeCloudContract(ProviderContract):
    """The provider contract against a cloud fake. A subclass names the fake in ``fake_class``
    and gives ``provider``, ``foreign_instance_id`` and ``inject_notice``; the fakes change
    state at once, so a short ``settle_s`` suffices."""

    fake_class: ClassVar[Callable[[], Any]]

    @pytest.fixture
    def fake(self) -> Iterator[Any]:
        yield from serve(self.fake_class)

    @pytest.fixture
    def settle_s(self) -> float:
        return 2.0
