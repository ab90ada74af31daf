"""The provider contract over GCP: the real google-cloud-compute client against a stateful
Compute Engine fake served through `responses` (no network)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cloudfakes import FakeCloudContract, fake_gce, gcp_config, gcp_credentials, gcp_provisioner
from contract import CatalogAndProvisioner

from spotwise.providers import gcp

TOKEN = "ya29.contract-test-token"


class TestGcpContract(FakeCloudContract):
    fake_class = fake_gce.FakeGCE

    @pytest.fixture
    def provider(self, fake: Any) -> CatalogAndProvisioner:
        cfg = gcp_config(fake.project)
        catalog = gcp.open_catalog(cfg, credentials=gcp_credentials(TOKEN))
        return catalog, gcp_provisioner(cfg, gcp_credentials(TOKEN))

    @pytest.fixture
    def foreign_instance_id(self, fake: Any) -> str:
        fake.add_foreign("us-central1-a", "not-ours-1", labels={"owner": "someone"})
        return "us-central1-a/not-ours-1"

    @pytest.fixture
    def inject_notice(self, fake: Any) -> Callable[[str], None]:
        def preempt(instance_id: str) -> None:
            zone, name = instance_id.split("/")
            fake.preempt(zone, name)

        return preempt
