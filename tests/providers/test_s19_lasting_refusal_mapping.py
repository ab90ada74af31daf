"""Refusals of an offer that do not pass within minutes are CapacityErrors marked ``lasting``
(the orchestrator then avoids the offer for a doubling backoff, not one pass): Azure's Spot
price above ``options.max_price`` and a size without Spot, EC2's ``SpotMaxPriceTooLow`` and
``Unsupported`` (a type the zone does not offer), Compute Engine's machine type the zone does
not offer. A refusal for capacity that may come back any minute stays a plain CapacityError."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cloudfakes import (
    AzureCredential,
    azure_config,
    fake_gce,
    gcp_config,
    gcp_credentials,
    gcp_provisioner,
    serve,
)
from test_gcp_errors import LAUNCHES as GCP
from test_s18_azure_max_price import BELOW_SPOT, RefusingARM
from test_s18_azure_max_price import LAUNCHES as AZURE

from spotwise.errors import CapacityError, ProviderError
from spotwise.providers import aws, azure

SECRET = "eyJ0eXAiOiJKV1Qi.SPOTWISE-S19-LASTING.must-never-appear"


# ---- Azure ------------------------------------------------------------------------------------
@pytest.fixture
def arm() -> Iterator[RefusingARM]:
    yield from serve(RefusingARM)


@pytest.mark.parametrize(
    ("code", "message", "lasting"),
    [
        ("OperationNotAllowed", BELOW_SPOT, True),
        ("SpotPriceGreaterThanProvidedMaxPrice", BELOW_SPOT, True),
        ("AzureSpotIsNotSupportedForThisVMSize", "Spot is not supported for this size.", True),
        ("SkuNotAvailable", "The requested size is currently not available.", False),
        ("AllocationFailed", "Allocation failed.", False),
        ("SpotVMCapacityNotAvailable", "No Spot capacity now.", False),
    ],
)
def test_azure_marks_the_price_cap_and_no_spot_refusals_lasting(
    arm: RefusingARM, code: str, message: str, lasting: bool
) -> None:
    prov = azure.open_provisioner(
        azure_config(arm, max_price="0.05"), credential=AzureCredential(SECRET)
    )
    arm.refusals.append((409, code, message))
    with pytest.raises(ProviderError) as e:
        prov.launch(AZURE.request())
    assert type(e.value) is CapacityError
    assert e.value.lasting is lasting
    assert e.value.message == (
        f"azure: launching Standard_NC4as_T4_v3 in eastus-1: {code}: {message}"
    )


def test_azure_a_price_refusal_after_the_create_was_accepted_is_lasting(
    arm: RefusingARM,
) -> None:
    prov = azure.open_provisioner(
        azure_config(arm, max_price="0.05"), credential=AzureCredential(SECRET)
    )
    arm.fail_next_create = "SpotPriceGreaterThanProvidedMaxPrice"
    with pytest.raises(CapacityError) as e:
        prov.launch(AZURE.request())
    assert e.value.lasting is True


# ---- AWS --------------------------------------------------------------------------------------
def _client_error(code: str, status: int, message: str) -> Any:
    from botocore.exceptions import ClientError

    body = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(body, "RunInstances")  # type: ignore[arg-type]


UNSUPPORTED_ZONE = (
    "Your requested instance type (p3.2xlarge) is not supported in your requested Availability "
    "Zone (us-east-1e). Please retry your request by not specifying an Availability Zone or "
    "choosing us-east-1a, us-east-1b, us-east-1c, us-east-1d, us-east-1f."
)


@pytest.mark.parametrize(
    ("code", "status", "message", "lasting"),
    [
        ("SpotMaxPriceTooLow", 400, "Your Spot request price is lower than the minimum.", True),
        ("Unsupported", 400, UNSUPPORTED_ZONE, True),
        (
            "InsufficientInstanceCapacity",
            500,
            "We currently do not have sufficient capacity.",
            False,
        ),
        ("InsufficientCapacity", 400, "There is not enough capacity.", False),
        ("UnfulfillableCapacity", 400, "Not enough spare capacity.", False),
    ],
)
def test_aws_marks_the_max_price_and_unsupported_refusals_lasting(
    code: str, status: int, message: str, lasting: bool
) -> None:
    err = aws.provider_error(_client_error(code, status, message), "launching p3.2xlarge")
    assert type(err) is CapacityError
    assert err.lasting is lasting
    assert code in err.message


# ---- GCP --------------------------------------------------------------------------------------
NO_TYPE = (
    "Invalid value for field 'resource.machineType': "
    "'zones/us-central1-a/machineTypes/g2-standard-4'. Machine type with name 'g2-standard-4' "
    "does not exist in zone 'us-central1-a'."
)


@dataclass
class FailingGCE(fake_gce.FakeGCE):
    """The fake, with HTTP errors queued for the next inserts."""

    failures: list[tuple[int, str, str]] = field(default_factory=list)

    def _insert(self, request: Any) -> tuple[int, dict[str, str], str]:
        if self.failures:
            return fake_gce._err(*self.failures.pop(0))
        return super()._insert(request)


@pytest.fixture
def gce() -> Iterator[FailingGCE]:
    yield from serve(FailingGCE)


def test_gcp_a_machine_type_the_zone_does_not_offer_is_a_lasting_refusal(
    gce: FailingGCE,
) -> None:
    prov = gcp_provisioner(gcp_config(), gcp_credentials(SECRET))
    gce.failures.append((400, "invalid", NO_TYPE))
    with pytest.raises(ProviderError) as e:
        prov.launch(GCP.request())
    assert type(e.value) is CapacityError  # the offer's: the trial counts no failure
    assert e.value.lasting is True
    assert e.value.message == f"gcp: launching g2-standard-4 in us-central1-a failed: 400 {NO_TYPE}"
    assert e.value.hint == "the zone does not offer this machine type: spotwise tries another offer"
    assert gce.instances == {}


def test_gcp_other_invalid_values_and_a_stockout_keep_their_kind(gce: FailingGCE) -> None:
    prov = gcp_provisioner(gcp_config(), gcp_credentials(SECRET))
    gce.failures.append((400, "invalid", "Invalid value for field 'resource.name': 'X'."))
    with pytest.raises(ProviderError) as e:
        prov.launch(GCP.request())
    assert type(e.value) is ProviderError
    gce.fail_next_insert = "ZONE_RESOURCE_POOL_EXHAUSTED"
    with pytest.raises(CapacityError) as c:
        prov.launch(GCP.request(token="launch-0002"))
    assert c.value.lasting is False
