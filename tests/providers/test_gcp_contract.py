"""The provider contract over GCP: the real google-cloud-compute client against a stateful
Compute Engine fake served through `responses` (no network)."""

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

from spotwise.providers import gcp
from spotwise.providers.registry import ProviderConfig

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gcp"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"_spotwise_fixture_{name}", FIXTURES / f"{name}.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


fake_gce = _load("fake_gce")


class _Creds:
    """Stands in for google.auth credentials (the client only calls before_request on it)."""

    token = "ya29.contract-test-token"

    def before_request(self, request: Any, method: str, url: str, headers: dict[str, str]) -> None:
        headers["authorization"] = f"Bearer {self.token}"

    @property
    def universe_domain(self) -> str:
        return "googleapis.com"


class TestGcpContract(ProviderContract):
    @pytest.fixture
    def fake(self) -> Iterator[Any]:
        with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
            yield fake_gce.FakeGCE().install(rs)

    @pytest.fixture
    def provider(self, fake: Any) -> CatalogAndProvisioner:
        cfg = ProviderConfig(
            "gcp",
            options={
                "project": fake.project,
                "image": "projects/debian-cloud/global/images/family/debian-12",
            },
        )
        catalog = gcp.open_catalog(cfg, credentials=_Creds())
        prov = gcp.open_provisioner(cfg, credentials=_Creds())
        prov.poll_interval_s = 0.0
        return catalog, prov

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

    @pytest.fixture
    def settle_s(self) -> float:
        return 2.0
