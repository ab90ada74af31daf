"""A delete the cloud accepted whose operation then failed (review-ae F7; session 18, helper D).

GCP ``terminate`` does not wait on the delete operation, Azure's ``begin_delete`` does not poll:
both remembered the id as terminated, and every later ``describe`` said it was being deleted
while the API listed it running, billed, and nothing of the job looked at it again. Now a VM
listed running (GCP: its delete operation ended in an error; Azure: not ``Deleting``) is
deleted again, a few times at most; GCP then shows it as it is listed (running, still there).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cloudfakes import (
    AzureCredential,
    azure_config,
    fake_arm,
    fake_gce,
    gcp_config,
    gcp_credentials,
    gcp_provisioner,
    serve,
)
from test_azure import LAUNCHES as AZURE_LAUNCHES
from test_gcp import LAUNCHES as GCP_LAUNCHES

from spotwise.providers import azure
from spotwise.providers.base import InstanceState

TOKEN = "s18-failed-delete-token"


@pytest.fixture
def gce() -> Iterator[Any]:
    yield from serve(fake_gce.FakeGCE)


@pytest.fixture
def arm() -> Iterator[Any]:
    yield from serve(fake_arm.FakeARM)


def test_a_gcp_vm_whose_delete_failed_is_deleted_again(gce: Any) -> None:
    prov = gcp_provisioner(gcp_config(), gcp_credentials(TOKEN))
    iid = prov.launch(GCP_LAUNCHES.request()).instance_id
    gce.fail_deletes = 1  # accepted, then its operation fails: the VM runs on

    prov.terminate([iid])
    assert gce.instances[tuple(iid.split("/"))]["status"] == "RUNNING"
    (seen,) = prov.describe()  # the listing shows it running: its delete failed: sent again

    assert gce.instances == {}  # deleted by the second delete (a new requestId)
    assert (seen.state, seen.holds_resource()) == (InstanceState.TERMINATED, False)
    (gone,) = prov.describe()
    assert gone.state is InstanceState.TERMINATED and not gone.holds_resource()


def test_a_gcp_vm_that_cannot_be_deleted_is_shown_running(gce: Any) -> None:
    """After a few deletes that all failed, describe shows what is there: still running,
    still billed (for the orchestrator's, or a cancel's, next terminate)."""
    prov = gcp_provisioner(gcp_config(), gcp_credentials(TOKEN))
    iid = prov.launch(GCP_LAUNCHES.request()).instance_id
    gce.fail_deletes = 100

    prov.terminate([iid])
    states = [prov.describe()[0].state for _ in range(5)]

    assert states[:3] == [InstanceState.TERMINATED] * 3  # deleted again each time
    assert states[-1] is InstanceState.RUNNING and prov.describe()[0].holds_resource()
    deletes = [op for op in gce.operations.values() if op["operationType"] == "delete"]
    assert len(deletes) == 4  # the first, then 3 more: no endless loop
    assert tuple(iid.split("/")) in gce.instances


def test_an_azure_vm_whose_delete_failed_is_deleted_again(arm: Any) -> None:
    prov = azure.open_provisioner(azure_config(arm), credential=AzureCredential(TOKEN))
    name = prov.launch(AZURE_LAUNCHES.request()).instance_id
    arm.fail_deletes = 1  # ARM answers 202, then the deletion fails: provisioningState Failed

    prov.terminate([name])
    assert name in arm.vms
    (seen,) = prov.describe()

    assert arm.vms == {} and arm.deletes == 2
    assert (seen.state, seen.holds_resource()) == (InstanceState.TERMINATED, False)
    prov.describe()
    assert arm.deletes == 2  # gone: nothing sent again
