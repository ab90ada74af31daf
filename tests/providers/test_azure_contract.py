"""The provider contract over Azure: the real azure-mgmt-compute pipeline against a stateful
Resource Manager fake and the Retail Prices API, served through `responses` (no network)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cloudfakes import AzureCredential, FakeCloudContract, azure_config, fake_arm
from contract import CatalogAndProvisioner

from spotwise.providers import azure

TOKEN = "contract-test-token"


class TestAzureContract(FakeCloudContract):
    fake_class = fake_arm.FakeARM

    @pytest.fixture
    def provider(self, fake: Any) -> CatalogAndProvisioner:
        cfg = azure_config(fake)
        return (
            azure.open_catalog(cfg, credential=AzureCredential(TOKEN)),
            azure.open_provisioner(cfg, credential=AzureCredential(TOKEN)),
        )

    @pytest.fixture
    def foreign_instance_id(self, fake: Any) -> str:
        fake.add_foreign("not-ours-1", {"owner": "someone"})
        return "not-ours-1"

    @pytest.fixture
    def inject_notice(self, fake: Any) -> Callable[[str], None]:
        return fake.evict
