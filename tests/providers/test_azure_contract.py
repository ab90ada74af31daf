"""The provider contract over Azure: the real azure-mgmt-compute pipeline against a stateful
Resource Manager fake and the Retail Prices API, served through `responses` (no network)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import responses
from contract import CatalogAndProvisioner, ProviderContract

from spotwise.providers import azure
from spotwise.providers.registry import ProviderConfig

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "azure"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"_spotwise_fixture_{name}", FIXTURES / f"{name}.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


fake_arm = _load("fake_arm")


class _Credential:
    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken("contract-test-token", 4_102_444_800)


class TestAzureContract(ProviderContract):
    @pytest.fixture
    def fake(self) -> Iterator[Any]:
        with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
            yield fake_arm.FakeARM().install(rs)

    @pytest.fixture
    def provider(self, fake: Any) -> CatalogAndProvisioner:
        subnet = (
            f"/subscriptions/{fake.subscription}/resourceGroups/{fake.group}/providers/"
            "Microsoft.Network/virtualNetworks/vnet/subnets/default"
        )
        cfg = ProviderConfig(
            "azure",
            regions=("eastus",),
            options={
                "subscription_id": fake.subscription,
                "resource_group": fake.group,
                "subnet_id": subnet,
                "image": "Canonical:ubuntu-24_04-lts:server:latest",
                "ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAITEST you@host",
                "polling_interval": "0",
            },
        )
        return (
            azure.open_catalog(cfg, credential=_Credential()),
            azure.open_provisioner(cfg, credential=_Credential()),
        )

    @pytest.fixture
    def foreign_instance_id(self, fake: Any) -> str:
        fake.add_foreign("not-ours-1", {"owner": "someone"})
        return "not-ours-1"

    @pytest.fixture
    def inject_notice(self, fake: Any) -> Callable[[str], None]:
        return fake.evict

    @pytest.fixture
    def settle_s(self) -> float:
        return 2.0
