"""A stop signal ends a pending cloud create's wait at once (review-bb F1).

SIGTERM, SIGINT and SIGHUP only set the orchestrator's flag, read between its passes; a stop
that landed while ``launch`` waited for a GCE zone operation or an ARM long-running operation
waited it out: up to ``operation_timeout_s`` (600 s), 74-193 s in the review's runs, under the
stderr line's "~70 s", and a supervisor's SIGKILL 90 s after SIGTERM then left every VM of the
job billed until `spotwise cancel`. Now the signal's handler also sets
:mod:`spotwise.providers.stopping`, which the providers look at every
``HEAR_EVERY_S`` while they wait: the launch ends as a refused one (a CapacityError: no failure
of the trial), and the failed-launch cleanup finds the VM by its launch tag and deletes it (as
below: what ``launch_cleanup._discard`` calls). GCE and ARM both take a delete of a VM still
being created (its create then ends in an error: GCE a 409 on the insert operation, ARM
``Canceled``/OperationPreempted).

The real clients run over the ``responses`` fakes; the signal is a real SIGTERM this process
sends itself from a timer thread, handled by :func:`spotwise.planner.signals.on_signals`."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
from test_azure_errors import LAUNCHES as AZURE_LAUNCHES
from test_azure_operation_deadline import SlowARM
from test_gcp_errors import LAUNCHES as GCP_LAUNCHES

from spotwise.errors import CapacityError
from spotwise.planner.signals import on_signals
from spotwise.providers import azure
from spotwise.providers.azure_launch import vm_name
from spotwise.providers.base import TAG_JOB, TAG_LAUNCH, InstanceState
from spotwise.providers.gcp_launch import instance_name

DELAY = 0.2  # the signal comes this long after the launch began
HEARD = 1.5  # HEAR_EVERY_S (0.25 s) and a busy machine's slack; before: the whole create
GCP_WHAT = "gcp: launching g2-standard-4 in us-central1-a"
AZURE_WHAT = "azure: launching Standard_NC4as_T4_v3 in eastus-1"
STOPPING = "the job is stopping (a signal)"


class _Job:
    """Stands in for the orchestrator: its bound ``_request_cancel`` is what signals route."""

    job_id = "j-s24j"

    def __init__(self) -> None:
        self.cancels = 0

    def _request_cancel(self) -> None:
        self.cancels += 1


@contextmanager
def _sigterm_after(delay: float) -> Iterator[_Job]:
    """The job's signal handlers installed, and SIGTERM sent to this process ``delay`` s on."""
    job = _Job()
    restore = on_signals(job._request_cancel)
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        yield job
    finally:
        timer.cancel()
        timer.join()
        restore()


def _launch_stopped(launch: Any) -> tuple[CapacityError, float]:
    start = time.monotonic()
    with pytest.raises(CapacityError) as info:
        launch()
    return info.value, time.monotonic() - start


# ---- GCP ----------------------------------------------------------------------------------------
@dataclass
class HoldingGCE(fake_gce.FakeGCE):
    """The fake, whose ``wait`` on an operation is held up to ``hold_s`` (GCE holds it up to 2
    minutes, until the operation ends) unless ``released``."""

    hold_s: float = 0.0
    released: threading.Event = field(default_factory=threading.Event)

    def _wait(self, request: Any) -> tuple[int, dict[str, str], str]:
        if self.hold_s:
            self.released.wait(self.hold_s)
        return super()._wait(request)

    def sent(self, part: str, method: str) -> int:
        return sum(c.request.method == method and part in c.request.url for c in self.rs.calls)


@pytest.fixture
def gce() -> Iterator[HoldingGCE]:
    for fake in serve(HoldingGCE):
        try:
            yield fake
        finally:
            fake.released.set()


def _gcp(poll_interval_s: float = 0.0) -> Any:
    prov = gcp_provisioner(gcp_config(), gcp_credentials("ya29.s24j"))
    prov.poll_interval_s = poll_interval_s
    for client in ("InstancesClient", "ZoneOperationsClient"):  # built (imports: seconds) now
        prov.clients.get(client)
    return prov


def _gcp_vm_deleted_by_the_cleanup(prov: Any, gce: HoldingGCE) -> None:
    """What the orchestrator's failed-launch cleanup does: the VM is listed under the
    launch's tag, still holding a resource, and is deleted."""
    name = instance_name("launch-0001")
    (left,) = prov.describe({TAG_JOB: "Job-A", TAG_LAUNCH: "launch-0001"})
    assert left.instance_id == f"us-central1-a/{name}" and left.holds_resource()
    prov.terminate([left.instance_id])
    assert gce.instances == {}
    assert gce.sent(f"/instances/{name}", "DELETE") == 1


@pytest.mark.timeout(60)
def test_gcp_a_stop_signal_ends_the_wait_for_a_running_insert_operation(
    gce: HoldingGCE,
) -> None:
    """The insert's zone operation answers RUNNING to each wait (a slow Spot GPU create);
    before, the launch waited the 80 polls out and returned the instance."""
    gce.insert_polls = 80
    prov = _gcp(poll_interval_s=0.05)
    with _sigterm_after(DELAY) as job:
        err, took = _launch_stopped(lambda: prov.launch(GCP_LAUNCHES.request()))
    assert job.cancels == 1
    assert DELAY <= took < DELAY + HEARD
    assert type(err) is CapacityError and not err.lasting  # refused: no failure of the trial
    (op,) = gce.operations
    assert err.message == (
        f"{GCP_WHAT}: stopped waiting for operation {op}: {STOPPING}; an instance the insert "
        "made is looked up by its spotwise:launch tag and deleted"
    )
    assert err.hint == "nothing to fix: the job was asked to stop"
    waits = gce.sent("/wait", "POST")
    assert 1 <= waits < 40  # it polled until the stop, then no more
    time.sleep(0.3)
    assert gce.sent("/wait", "POST") == waits
    _gcp_vm_deleted_by_the_cleanup(prov, gce)


@pytest.mark.timeout(60)
def test_gcp_a_stop_signal_ends_a_wait_the_server_holds(gce: HoldingGCE) -> None:
    """GCE holds a ``wait`` until the operation ends (up to 2 minutes; the client gives up
    after half of ``api_deadline_s``, 30 s by default): the stop is heard inside the held
    wait, not after it. Before, the launch returned the instance when the wait answered."""
    gce.insert_polls, gce.hold_s = 0, 4.0
    prov = _gcp()
    with _sigterm_after(DELAY):
        err, took = _launch_stopped(lambda: prov.launch(GCP_LAUNCHES.request()))
    assert DELAY <= took < DELAY + HEARD
    assert err.message.startswith(f"{GCP_WHAT}: stopped waiting for operation ")
    gce.released.set()  # the abandoned wait ends (a read: nothing comes of it)
    _gcp_vm_deleted_by_the_cleanup(prov, gce)


def test_gcp_a_launch_after_the_stop_inserts_nothing(gce: HoldingGCE) -> None:
    """The loop may call a launch in the pass the signal landed in: nothing is bought."""
    prov = _gcp()
    job = _Job()
    restore = on_signals(job._request_cancel)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(CapacityError) as info:
            prov.launch(GCP_LAUNCHES.request())
    finally:
        restore()
    assert info.value.message.startswith(f"{GCP_WHAT}: not sent: {STOPPING}; ")
    assert gce.sent("/instances", "POST") == 0 and gce.instances == {}
    assert prov.describe({TAG_JOB: "Job-A", TAG_LAUNCH: "launch-0001"}) == []


def test_gcp_the_next_job_of_the_process_launches_after_a_stopped_one(gce: HoldingGCE) -> None:
    """The stop is the stopped job's: its restore clears it (a later job, or `resume`, in the
    same process launches)."""
    restore = on_signals(_Job()._request_cancel)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        restore()
    inst = _gcp().launch(GCP_LAUNCHES.request())
    assert inst.instance_id == f"us-central1-a/{instance_name('launch-0001')}"
    assert inst.state is InstanceState.RUNNING


# ---- Azure --------------------------------------------------------------------------------------
@pytest.fixture
def arm() -> Iterator[SlowARM]:
    yield from serve(SlowARM)


def _azure(fake: SlowARM) -> Any:
    opts = {"operation_timeout_s": "30", "polling_interval": "0.02"}
    return azure.open_provisioner(azure_config(fake, **opts), credential=AzureCredential("t0k"))


def _pollers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("LROPoller(")]


@pytest.mark.timeout(60)
def test_azure_a_stop_signal_ends_the_wait_for_a_create_in_progress(arm: SlowARM) -> None:
    """The ARM operation answers InProgress for 4 s; before, the launch waited it out (up to
    ``operation_timeout_s``) and returned the VM."""
    arm.busy_s = 4.0
    prov = _azure(arm)
    name = vm_name("launch-0001")
    with _sigterm_after(DELAY) as job:
        err, took = _launch_stopped(lambda: prov.launch(AZURE_LAUNCHES.request()))
    assert job.cancels == 1
    assert DELAY <= took < DELAY + HEARD
    assert type(err) is CapacityError and not err.lasting
    assert err.message == (
        f"{AZURE_WHAT}: stopped waiting for the create: {STOPPING}; VM {name}, if the create "
        "made it, is looked up by its spotwise:launch tag and deleted"
    )
    assert err.hint == "nothing to fix: the job was asked to stop"
    # the abandoned poller stops at its next pause instead of polling ARM on
    for _ in range(100):
        if not _pollers():
            break
        time.sleep(0.01)
    assert _pollers() == []
    polls = arm.polls
    time.sleep(0.1)
    assert arm.polls == polls
    # the failed-launch cleanup: the VM (still Creating) is listed under its launch tag, deleted
    (left,) = prov.describe({TAG_JOB: "job-a", TAG_LAUNCH: "launch-0001"})
    assert left.instance_id == name and left.holds_resource()
    assert left.state is InstanceState.PENDING
    prov.terminate([left.instance_id])
    assert arm.vms == {}


def test_azure_a_launch_after_the_stop_creates_nothing(arm: SlowARM) -> None:
    prov = _azure(arm)
    restore = on_signals(_Job()._request_cancel)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(CapacityError) as info:
            prov.launch(AZURE_LAUNCHES.request())
    finally:
        restore()
    assert info.value.message.startswith(f"{AZURE_WHAT}: not sent: {STOPPING}; ")
    assert arm.vms == {} and arm.polls == 0


@pytest.mark.timeout(60)
def test_azure_a_create_that_ends_before_any_stop_gives_the_running_vm(arm: SlowARM) -> None:
    """The wait in short slices changes nothing else: the operation's end is heard, and its
    result is the VM."""
    arm.busy_s = 0.3
    prov = _azure(arm)
    restore = on_signals(_Job()._request_cancel)
    try:
        inst = prov.launch(AZURE_LAUNCHES.request())
    finally:
        restore()
    assert inst.instance_id == vm_name("launch-0001") and inst.state is InstanceState.RUNNING
