"""Azure ``options.max_price`` (review-ae F2): Spot offers priced above the cap are not offered,
and ARM's refusal of a Spot price above it (or of Spot for a size) refuses that offer
(CapacityError: the next offer is tried), not the trial (a ProviderError counts a failure)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cloudfakes import AzureCredential, Launches, azure_config, fake_arm, serve

from spotwise.errors import CapacityError, ProviderError, QuotaError, SpecError
from spotwise.providers import azure

MAX_PRICE_HINT = (
    "the Spot price is above providers[].options.max_price: spotwise tries another offer; "
    "raise max_price (or set -1: up to the on-demand price) to use this one"
)
SECRET = "eyJ0eXAiOiJKV1Qi.SPOTWISE-S18-MAX-PRICE.must-never-appear"
LAUNCHES = Launches(
    "azure",
    zone="eastus-1",
    instance_type="Standard_NC4as_T4_v3",
    price_per_hour=0.062699,
    on_demand_price_per_hour=0.526,
    vcpus=4,
    memory_gb=28.0,
    gpu_name="T4",
    job="job-a",
    argv=("python", "t.py"),
    env={"SPOTWISE_TRIAL": "t1"},
)
# ARM's answer to a Spot PUT whose maxPrice is below the market (redhat-developer/mapt#548)
BELOW_SPOT = (
    "Unable to perform operation 'Create VM' since the provided max price '0.05 USD' is lower "
    "than the current spot price '0.062699 USD' for Azure Spot Virtual Machine size "
    "'Standard_NC4as_T4_v3'."
)


@dataclass
class RefusingARM(fake_arm.FakeARM):
    """The fake, with synchronous refusals of the next PUTs queued."""

    refusals: list[tuple[int, str, str]] = field(default_factory=list)

    def _put(self, request: Any) -> tuple[int, dict[str, str], str]:
        if self.refusals:
            status, code, message = self.refusals.pop(0)
            body = json.dumps({"error": {"code": code, "message": message}})
            return status, {"Content-Type": "application/json"}, body
        return super()._put(request)


@pytest.fixture
def fake() -> Iterator[RefusingARM]:
    yield from serve(RefusingARM)


def _offers(fake: RefusingARM, **options: str) -> list[tuple[str, float]]:
    cat = azure.open_catalog(azure_config(fake, **options), credential=AzureCredential(SECRET))
    return [(o.key, o.price_per_hour) for o in cat.offers(region="eastus")]


# ---- the catalog ------------------------------------------------------------------------------
def test_spot_offers_above_max_price_are_not_offered(
    fake: RefusingARM, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="spotwise.providers.azure_catalog"):
        capped = _offers(fake, max_price="0.06")
    spot = sorted(k for k, _ in capped if k.endswith(":spot"))
    assert spot == [
        "azure:eastus-1:Standard_E8s_v5:spot",
        "azure:eastus-2:Standard_E8s_v5:spot",
        "azure:eastus-3:Standard_E8s_v5:spot",
    ]  # 0.05544 $/h; NC4as_T4_v3 (0.062699) and NV36ads_A10_v5 (0.8) are above 0.06
    assert all(p <= 0.06 for k, p in capped if k.endswith(":spot"))
    # on-demand offers are not capped (max_price is a Spot billing profile)
    uncapped = _offers(fake)
    assert [k for k, _ in capped if k.endswith(":on-demand")] == [
        k for k, _ in uncapped if k.endswith(":on-demand")
    ]
    assert ("azure:eastus-1:Standard_NC4as_T4_v3:spot", 0.062699) in uncapped
    assert "Spot offer(s) above options.max_price 0.06 $/h not offered" in caplog.text
    assert "Standard_NC4as_T4_v3 in eastus (0.062699 $/h)" in caplog.text


def test_a_spot_price_equal_to_max_price_and_minus_one_are_offered(fake: RefusingARM) -> None:
    at = _offers(fake, max_price="0.062699")
    assert ("azure:eastus-1:Standard_NC4as_T4_v3:spot", 0.062699) in at
    assert ("azure:eastus:Standard_NV36ads_A10_v5:spot", 0.8) not in at
    assert _offers(fake, max_price="-1") == _offers(fake)


def test_a_max_price_that_is_not_a_number_is_refused(fake: RefusingARM) -> None:
    with pytest.raises(SpecError, match="max_price: a number"):
        _offers(fake, max_price="cheap")


# ---- ARM's refusals -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "message", "hint"),
    [
        ("OperationNotAllowed", BELOW_SPOT, MAX_PRICE_HINT),
        ("SpotPriceGreaterThanProvidedMaxPrice", BELOW_SPOT, MAX_PRICE_HINT),
        (
            "AzureSpotIsNotSupportedForThisVMSize",
            "Azure Spot Virtual Machine is not supported for this VM size Standard_NC4as_T4_v3.",
            "this VM size has no Spot: spotwise tries another offer",
        ),
    ],
)
def test_a_spot_refusal_of_the_offer_is_a_capacity_error(
    fake: RefusingARM, code: str, message: str, hint: str
) -> None:
    prov = azure.open_provisioner(
        azure_config(fake, max_price="0.05"), credential=AzureCredential(SECRET)
    )
    fake.refusals.append((409, code, message))
    with pytest.raises(ProviderError) as e:
        prov.launch(LAUNCHES.request())
    assert type(e.value) is CapacityError  # the offer is blocked; the trial counts no failure
    assert e.value.message == (
        f"azure: launching Standard_NC4as_T4_v3 in eastus-1: {code}: {message}"
    )
    assert e.value.hint == hint
    assert not fake.vms  # nothing was created


def test_a_refusal_after_the_create_was_accepted_is_a_capacity_error(fake: RefusingARM) -> None:
    prov = azure.open_provisioner(
        azure_config(fake, max_price="0.05"), credential=AzureCredential(SECRET)
    )
    fake.fail_next_create = "SpotPriceGreaterThanProvidedMaxPrice"
    with pytest.raises(CapacityError) as e:
        prov.launch(LAUNCHES.request())
    assert "SpotPriceGreaterThanProvidedMaxPrice" in e.value.message
    assert e.value.hint == MAX_PRICE_HINT


def test_other_operation_not_allowed_refusals_keep_their_kind(fake: RefusingARM) -> None:
    prov = azure.open_provisioner(azure_config(fake), credential=AzureCredential(SECRET))
    fake.refusals += [
        (409, "OperationNotAllowed", "exceeding approved LowPriorityCores quota."),
        (409, "OperationNotAllowed", "The operation is not allowed on this resource."),
    ]
    with pytest.raises(QuotaError):
        prov.launch(LAUNCHES.request())
    with pytest.raises(ProviderError) as e:
        prov.launch(LAUNCHES.request(token="launch-0002"))
    assert type(e.value) is ProviderError


def test_the_launch_sends_the_cap(fake: RefusingARM) -> None:
    prov = azure.open_provisioner(
        azure_config(fake, max_price="0.07"), credential=AzureCredential(SECRET)
    )
    prov.launch(LAUNCHES.request())
    (vm,) = fake.vms.values()
    assert vm["properties"]["billingProfile"] == {"maxPrice": 0.07}
