"""An Azure Spot VM left by an async AllocationFailed (review-ae F8; session 18, helper D).

Real ARM keeps the VM resource, provisioningState ``Failed``, power state ``deallocated``
(the fake plays it with ``keep_failed``). ``describe`` reported it as an eviction (``revoked``,
and ``notices()`` an interruption) because the Spot-deallocated mapping overrode ``Failed``:
it is ``failed`` now (Azure never allocated it), still there to delete, and no eviction.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cloudfakes import AzureCredential, azure_config, fake_arm, serve
from test_azure import LAUNCHES

from spotwise.errors import CapacityError
from spotwise.providers import azure
from spotwise.providers.base import TAG_LAUNCH, InstanceState

SECRET = "s18-azure-failed-token"


@pytest.fixture
def fake() -> Iterator[Any]:
    yield from serve(lambda: fake_arm.FakeARM(keep_failed=True))


def test_a_vm_left_failed_by_allocation_failed_is_failed_not_evicted(fake: Any) -> None:
    prov = azure.open_provisioner(azure_config(fake), credential=AzureCredential(SECRET))
    fake.fail_next_create = "AllocationFailed"
    req = LAUNCHES.request()
    with pytest.raises(CapacityError):
        prov.launch(req)
    assert [v["properties"]["provisioningState"] for v in fake.vms.values()] == ["Failed"]

    (inst,) = prov.describe({TAG_LAUNCH: req.client_token})

    assert inst.state is InstanceState.FAILED  # was REVOKED
    assert inst.holds_resource()  # the failed-launch cleanup still deletes it
    assert inst.ended_at is not None and inst.ended_at - inst.launched_at < 61  # not allocated
    assert prov.notices() == []  # no eviction to report
    prov.terminate([inst.instance_id])
    assert fake.vms == {}


def test_a_spot_vm_deallocated_without_our_asking_is_still_an_eviction(fake: Any) -> None:
    prov = azure.open_provisioner(azure_config(fake), credential=AzureCredential(SECRET))
    name = prov.launch(LAUNCHES.request()).instance_id
    fake.evict(name)

    (inst,) = prov.describe()

    assert inst.state is InstanceState.REVOKED
    assert [n.instance_id for n in prov.notices()] == [name]
