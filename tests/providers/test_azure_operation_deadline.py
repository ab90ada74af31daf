"""An Azure launch waits for its ARM long-running operation at most ``operation_timeout_s``
(default 600 s, as on GCP); an operation ARM still reports ``InProgress`` then is a plain
ProviderError (not a CapacityError: the VM may exist), which the orchestrator handles as a
failed launch: it looks the VM up by its launch tag, deletes it and bills it.

Before, ``launch`` called ``poller.result()`` with no limit: each poll was bounded by
``api_deadline_s``, but an operation that stayed ``InProgress`` held the orchestrator's loop
forever while the VM could be billing.

The real azure-mgmt-compute client runs over the ``responses`` fake of
``tests/fixtures/azure/fake_arm.py``, whose operation here answers ``InProgress`` for
``STUCK_S`` (forever, as far as a 0.3 s deadline is concerned; bounded so that the old code
returns instead of hanging)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from cloudfakes import AzureCredential, azure_config, fake_arm, serve
from test_azure_errors import LAUNCHES, LAUNCHING
from unit.test_provider_options import error, spec_on

from spotwise.errors import CapacityError, ProviderError, SpecError
from spotwise.providers import azure
from spotwise.providers.azure_launch import vm_name
from spotwise.providers.azure_provisioner import AzureProvisioner
from spotwise.providers.base import TAG_JOB, TAG_LAUNCH, InstanceState

DEADLINE = 0.3
MARGIN = 5.0  # slack on a busy machine (1.6 s seen under load); the old code waited STUCK_S
STUCK_S = 12.0
POLL = 0.02  # seconds between the poller's GETs of the operation


@dataclass
class SlowARM(fake_arm.FakeARM):
    """The fake, whose create operations answer ``InProgress`` for ``busy_s`` after their PUT
    (then as the fake does: ``Succeeded``, or the queued failure)."""

    busy_s: float = STUCK_S
    polls: int = 0  # GETs of an operation
    _until: dict[str, float] | None = None

    def _put(self, request: Any) -> tuple[int, dict[str, str], str]:
        out = super()._put(request)
        op_id = out[1]["Azure-AsyncOperation"].split("/operations/")[1].split("?")[0]
        self._until = {**(self._until or {}), op_id: time.monotonic() + self.busy_s}
        return out

    def _op(self, request: Any) -> tuple[int, dict[str, str], str]:
        self.polls += 1
        op_id = request.url.split("/operations/")[1].split("?")[0]
        if time.monotonic() < (self._until or {}).get(op_id, 0.0):
            self.ops[op_id]["polls"] = max(self.ops[op_id]["polls"], 1)  # InProgress again
        return super()._op(request)


@pytest.fixture
def arm() -> Iterator[SlowARM]:
    yield from serve(SlowARM)


def _azure(fake: SlowARM, **options: str) -> AzureProvisioner:
    opts = {"operation_timeout_s": str(DEADLINE), "polling_interval": str(POLL), **options}
    return azure.open_provisioner(azure_config(fake, **opts), credential=AzureCredential("t0k"))


def _pollers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("LROPoller(")]


@pytest.mark.timeout(30)
def test_an_operation_stuck_in_progress_fails_the_launch_at_the_deadline(arm: SlowARM) -> None:
    prov = _azure(arm)
    name = vm_name("launch-0001")
    start = time.monotonic()
    with pytest.raises(ProviderError) as info:
        prov.launch(LAUNCHES.request())
    took = time.monotonic() - start
    assert DEADLINE <= took < DEADLINE + MARGIN  # before: STUCK_S, and no error
    err = info.value
    assert type(err) is ProviderError and not isinstance(err, CapacityError)
    assert err.message == (
        f"{LAUNCHING}: VM {name} still being created at the 0.3 s deadline "
        "(operation_timeout_s); it may exist: spotwise looks for it by its spotwise:launch tag "
        "and deletes it"
    )
    assert err.hint is not None and "operation_timeout_s" in err.hint
    assert arm.polls >= 2  # it did poll, InProgress each time
    # the abandoned poller stops at its next pause instead of polling ARM on
    for _ in range(100):
        if not _pollers():
            break
        time.sleep(0.01)
    assert _pollers() == []
    polls = arm.polls
    time.sleep(5 * POLL)
    assert arm.polls == polls
    # what the orchestrator's failed-launch cleanup then does (launch_cleanup._discard_launch):
    # the VM is listed under the launch's tag, still holding a resource, and can be deleted
    (left,) = prov.describe({TAG_JOB: "job-a", TAG_LAUNCH: "launch-0001"})
    assert left.instance_id == name and left.holds_resource()
    assert left.state is InstanceState.PENDING  # provisioningState Creating
    prov.terminate([left.instance_id])
    assert arm.vms == {}
    assert prov.describe({TAG_JOB: "job-a", TAG_LAUNCH: "launch-0001"})[0].exists is False


@pytest.mark.timeout(30)
def test_an_operation_that_ends_before_the_deadline_gives_the_running_vm(arm: SlowARM) -> None:
    arm.busy_s = 0.2  # several polls InProgress, then Succeeded
    prov = _azure(arm, operation_timeout_s="5")
    start = time.monotonic()
    inst = prov.launch(LAUNCHES.request())
    assert 0.2 <= time.monotonic() - start < 5
    assert inst.instance_id == vm_name("launch-0001") and inst.state is InstanceState.RUNNING
    assert arm.polls >= 3


@pytest.mark.timeout(30)
def test_a_deadline_beyond_what_a_thread_join_takes_still_launches(arm: SlowARM) -> None:
    """1e10 s passes the option's check, but Thread.join(1e10) raises OverflowError: the VM
    was asked for, then the launch failed."""
    arm.busy_s = 0.05
    inst = _azure(arm, operation_timeout_s="1e10").launch(LAUNCHES.request())
    assert inst.state is InstanceState.RUNNING and list(arm.vms) == [inst.instance_id]


@pytest.mark.timeout(30)
def test_an_operation_that_fails_before_the_deadline_keeps_its_error(arm: SlowARM) -> None:
    arm.busy_s = 0.1
    arm.fail_next_create = "AllocationFailed"
    prov = _azure(arm, operation_timeout_s="5")
    with pytest.raises(CapacityError, match=f"^{LAUNCHING}: AllocationFailed: "):
        prov.launch(LAUNCHES.request())


def test_the_deadline_defaults_to_600_seconds_as_on_gcp(arm: SlowARM) -> None:
    prov = azure.open_provisioner(azure_config(arm), credential=AzureCredential("t0k"))
    assert prov.operation_timeout_s == 600.0
    assert _azure(arm, operation_timeout_s="2.5").operation_timeout_s == 2.5


@pytest.mark.parametrize("value", ["0", "-1", "abc", "", "inf"])
def test_an_operation_timeout_that_is_not_a_number_above_0_is_refused(
    arm: SlowARM, value: str
) -> None:
    with pytest.raises(SpecError) as info:
        _azure(arm, operation_timeout_s=value)
    assert info.value.message == (
        f"providers[].options.operation_timeout_s: {value!r} is not a number > 0"
    )


@pytest.mark.parametrize("value", ["0", "-5", "soon", ""])
def test_a_spec_with_a_bad_azure_operation_timeout_is_one_line_naming_the_field(
    value: str,
) -> None:
    assert error(spec_on("azure", operation_timeout_s=value)) == (
        f"job.yaml: spec field 'providers.0.options.operation_timeout_s': {value!r} is not "
        "a number > 0"
    )


def test_a_spec_with_an_azure_operation_timeout_is_accepted() -> None:
    from spotwise.spec import parse_spec

    spec = parse_spec(spec_on("azure", operation_timeout_s="900"))
    assert dict(spec.providers[0].options) == {"operation_timeout_s": "900"}
