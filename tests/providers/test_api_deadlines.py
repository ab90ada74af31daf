"""In a cloud API outage, one call gives up after the provider's ``api_deadline_s`` (default 60 s)
with a TransientError naming the action, instead of holding the orchestrator: no budget
enforced, no trial stopped, ``spotwise cancel`` hanging.

Before, google-cloud-compute's own defaults retried a 503 of a read for up to 600 s and gave
every request 600 s (compute_v1/services/*/transports/base.py), and azure-core's retried an
unanswered request 3 times after 300 s each, and slept any ``Retry-After`` 3 times over.

The real clients run over the ``responses`` fakes of ``test_gcp_errors.py`` and
``test_azure_errors.py``, with ``api_deadline_s`` 0.5 s; an outage is a fake that answers 503
every time, or a request that gets no answer until its timeout (the fake sleeps that long, at
most ``HANG_S``, then raises requests' ReadTimeout, as requests would)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from cloudfakes import AzureCredential, azure_config, gcp_config, gcp_credentials, serve
from test_azure_errors import LAUNCHES as AZURE_LAUNCHES
from test_azure_errors import FailingARM
from test_gcp_errors import LAUNCHES, FailingGCE

from spotwise.errors import CapacityError, ProviderError, SpecError, ThrottledError, TransientError
from spotwise.providers import azure, gcp
from spotwise.providers.base import TAG_JOB

DEADLINE = 0.5
MARGIN = 1.0  # scheduling slack on a busy machine; the old code took minutes
HANG_S = 5.0  # how long a hung request lasts at most when its timeout is longer
FOREVER = 10_000
UNAVAILABLE = "The service is currently unavailable."
GCP_503 = f"a passing failure of the Compute Engine API (503 {UNAVAILABLE})"
LAUNCHING = "gcp: launching g2-standard-4 in us-central1-a failed"


def _hang(request: Any) -> None:
    """A request that gets no answer: it lasts its read timeout (at most HANG_S)."""
    timeout = request.req_kwargs.get("timeout")
    read = timeout[1] if isinstance(timeout, tuple) else timeout
    time.sleep(min(float(read or HANG_S), HANG_S))
    raise requests.ReadTimeout("HTTPSConnectionPool(host='x', port=443): Read timed out.")


def _timeouts(rs: Any) -> set[Any]:
    """The ``timeout`` every request was sent with."""
    return {c.request.req_kwargs.get("timeout") for c in rs.calls}


# ---- GCP ----------------------------------------------------------------------------------------
@dataclass
class OutageGCE(FailingGCE):
    """FailingGCE with two more routes that fail: ``wait`` (a zone operation's) and
    ``machine_types``; ``hangs`` names routes whose next request gets no answer."""

    hangs: list[str] = field(default_factory=list)

    def _wait(self, request: Any) -> tuple[int, dict[str, str], str]:
        if "wait" in self.hangs:
            self.hangs.remove("wait")
            _hang(request)
        return self._queued("wait") or super()._wait(request)

    def _machine_types(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("machine_types") or super()._machine_types(request)

    def count(self, part: str, method: str = "GET") -> int:
        return sum(c.request.method == method and part in c.request.url for c in self.rs.calls)


@pytest.fixture
def gce() -> Iterator[OutageGCE]:
    yield from serve(OutageGCE)


def _gcp(**options: str) -> Any:
    prov = gcp.open_provisioner(
        gcp_config(**{"api_deadline_s": str(DEADLINE), **options}),
        credentials=gcp_credentials("ya29.deadline-test"),
    )
    prov.poll_interval_s = 0.0
    for client in ("InstancesClient", "ZoneOperationsClient"):  # built (and timed) apart
        prov.clients.get(client)
    return prov


def _gives_up(call: Any) -> tuple[ProviderError, float]:
    start = time.monotonic()
    with pytest.raises(ProviderError) as e:
        call()
    return e.value, time.monotonic() - start


def test_a_gcp_listing_that_answers_503_forever_gives_up_at_the_deadline(gce: OutageGCE) -> None:
    """Before: the client retried for 600 s."""
    prov = _gcp()
    gce.fail("list", 503, "backendError", UNAVAILABLE, FOREVER)
    err, took = _gives_up(lambda: prov.describe({TAG_JOB: "Job-A"}))
    assert type(err) is TransientError
    assert err.message == f"gcp: listing instances failed: {GCP_503}"
    assert DEADLINE / 2 < took < DEADLINE + MARGIN  # it kept trying, then stopped
    assert gce.count("/aggregated/instances") > 2  # it retried until the deadline


def test_a_gcp_read_that_answers_503_forever_gives_up_at_the_deadline(gce: OutageGCE) -> None:
    """What `spotwise cancel` calls first (the instance, to check it is ours). Before: 600 s."""
    prov = _gcp()
    gce.fail("get", 503, "backendError", UNAVAILABLE, FOREVER)
    err, took = _gives_up(lambda: prov.terminate(["us-central1-a/sw-x"]))
    assert type(err) is TransientError
    assert err.message == f"gcp: reading instance us-central1-a/sw-x failed: {GCP_503}"
    assert took < DEADLINE + MARGIN
    assert gce.count("/instances/sw-x") > 2


def test_the_gcp_machine_type_listing_gives_up_at_the_deadline(gce: OutageGCE) -> None:
    catalog = gcp.open_catalog(
        gcp_config(api_deadline_s=str(DEADLINE)), credentials=gcp_credentials("ya29.x")
    )
    catalog.clients.get("MachineTypesClient")
    gce.fail("machine_types", 503, "backendError", UNAVAILABLE, FOREVER)
    err, took = _gives_up(catalog.instance_types)
    assert type(err) is TransientError
    assert err.message == f"gcp: listing machine types failed: {GCP_503}"
    assert took < DEADLINE + MARGIN
    assert gce.count("/aggregated/machineTypes") > 2


@pytest.mark.parametrize(
    ("route", "part", "method"), [("insert", "/instances?", "POST"), ("wait", "/wait", "POST")]
)
def test_a_gcp_launch_whose_api_answers_503_forever_gives_up_at_the_deadline(
    gce: OutageGCE, route: str, part: str, method: str
) -> None:
    """Before, a 503 of the insert or of the operation's wait was taken for a shortage of
    capacity at once (CapacityError: the planner learnt a stockout from an outage)."""
    prov = _gcp()
    gce.fail(route, 503, "backendError", UNAVAILABLE, FOREVER)
    err, took = _gives_up(lambda: prov.launch(LAUNCHES.request()))
    assert type(err) is TransientError
    assert err.message == f"{LAUNCHING}: {GCP_503}"
    assert took < DEADLINE + MARGIN
    assert gce.count(part, method) > 2


def test_a_gcp_503_that_passes_is_retried_within_the_call(gce: OutageGCE) -> None:
    prov = _gcp()
    gce.fail("insert", 503, "backendError", UNAVAILABLE)
    gce.fail("list", 503, "backendError", UNAVAILABLE)
    inst = prov.launch(LAUNCHES.request())
    assert inst.state.value == "running"
    assert gce.count("/instances?", "POST") == 2 and len(gce.instances) == 1  # one requestId
    assert [i.instance_id for i in prov.describe({TAG_JOB: "Job-A"})] == [inst.instance_id]
    assert gce.count("/aggregated/instances") == 2


def test_a_stockout_throttling_a_500_and_a_delete_are_not_retried(gce: OutageGCE) -> None:
    """A 503 naming a stockout goes to the planner at once; a 429 is the planner's to back off
    from; a 500 (INTERNAL) is no failure to repeat at once; a delete fails at once, for its
    caller (``spotwise cancel``) to call again."""
    prov = _gcp()
    stockout = "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS: The zone does not have enough resources"
    gce.fail("insert", 503, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", stockout, FOREVER)
    with pytest.raises(CapacityError):
        prov.launch(LAUNCHES.request())
    assert gce.count("/instances?", "POST") == 1
    gce.failures.clear()
    inst = prov.launch(LAUNCHES.request("b"))
    gce.fail("list", 429, "rateLimitExceeded", "Too many requests", FOREVER)
    with pytest.raises(ThrottledError):
        prov.describe({TAG_JOB: "Job-A"})
    assert gce.count("/aggregated/instances") == 1
    gce.failures.clear()
    gce.fail("list", 500, "backendError", "Internal error. Please try again.", FOREVER)
    with pytest.raises(TransientError):
        prov.describe({TAG_JOB: "Job-A"})
    assert gce.count("/aggregated/instances") == 2
    gce.fail("delete", 503, "backendError", UNAVAILABLE, FOREVER)
    with pytest.raises(TransientError):
        prov.terminate([inst.instance_id])
    assert gce.count("/instances/", "DELETE") == 1


def test_a_wait_that_outlasts_its_timeout_reads_the_operation_instead(gce: OutageGCE) -> None:
    """The server holds a wait until the operation is done (up to 2 minutes): no answer within
    the per-request timeout, while the API still answers a read, is a slow operation, not a
    failure. Before: the launch failed (and the wait could take 600 s)."""
    prov = _gcp()
    gce.hangs.append("wait")
    start = time.monotonic()
    inst = prov.launch(LAUNCHES.request())
    assert time.monotonic() - start < DEADLINE + MARGIN
    assert inst.state.value == "running"
    assert gce.count("/operations/", "GET") == 1  # the read in place of the wait


def test_every_gcp_request_is_sent_with_the_timeout_from_api_deadline_s(gce: OutageGCE) -> None:
    """Half of ``api_deadline_s`` per request (default 60 s); before: 600 s."""
    prov = _gcp(api_deadline_s="7")
    inst = prov.launch(LAUNCHES.request())  # insert, wait (twice), get
    prov.notices()  # list, operations list, guest attributes
    prov.terminate([inst.instance_id])  # get, delete
    sent = [f"{c.request.method} {c.request.url.split('?')[0]}" for c in gce.rs.calls]
    assert len(sent) == 9
    for part in ("POST", "/wait", "/aggregated/instances", "/aggregated/operations"):
        assert any(part in x for x in sent), part
    assert any(x.endswith("/getGuestAttributes") for x in sent)
    assert any(x.startswith("DELETE") for x in sent)
    timeouts = _timeouts(gce.rs)
    assert all(3.4 < t <= 3.5 for t in timeouts), timeouts
    assert gcp.api_deadline_s(prov.settings) == 7.0
    default = gcp.open_provisioner(gcp_config(), credentials=gcp_credentials("t"))
    assert default.clients.bounds["timeout"] == 30.0


@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf"])
def test_a_gcp_api_deadline_that_is_not_a_positive_number_is_a_spec_error(value: str) -> None:
    with pytest.raises(SpecError, match=r"^providers\[\]\.options\.api_deadline_s: "):
        gcp.open_provisioner(gcp_config(api_deadline_s=value), credentials=gcp_credentials("t"))


# ---- Azure --------------------------------------------------------------------------------------
@dataclass
class OutageARM(FailingARM):
    """FailingARM whose queued errors carry ``retry_after`` (when set) and whose
    listing, while ``hang`` is set, gets no answer."""

    retry_after: str = ""
    hang: bool = False

    def _queued(self, route: str) -> tuple[int, dict[str, str], str] | None:
        answer = super()._queued(route)
        if answer is not None and self.retry_after:
            answer[1]["Retry-After"] = self.retry_after
        return answer

    def _list(self, request: Any) -> tuple[int, dict[str, str], str]:
        if self.hang:
            _hang(request)
        return super()._list(request)


@pytest.fixture
def arm() -> Iterator[OutageARM]:
    yield from serve(OutageARM)


def _azure(fake: OutageARM, **options: str) -> Any:
    config = azure_config(fake, **{"api_deadline_s": str(DEADLINE), **options})
    return azure.open_provisioner(config, credential=AzureCredential("t0ken"))


LISTING = "azure: listing VMs in spotwise-rg"


def test_an_azure_listing_that_gets_no_answer_gives_up_at_the_deadline(arm: OutageARM) -> None:
    """Before: 4 tries of 300 s each (here HANG_S each, and 4.8 s of backoff)."""
    prov = _azure(arm)
    arm.hang = True
    err, took = _gives_up(lambda: prov.describe({TAG_JOB: "job-a"}))
    assert type(err) is TransientError
    assert err.message.startswith(f"{LISTING}: a passing failure of the Azure API (no answer")
    assert took < DEADLINE + MARGIN
    assert arm.calls("GET") > 1  # azure-core retried before giving up


def test_an_azure_503_with_a_long_retry_after_is_the_answer_at_once(arm: OutageARM) -> None:
    """Before: azure-core slept the Retry-After 3 times (here 90 s)."""
    prov = _azure(arm)
    arm.retry_after = "30"
    arm.fail("list", 503, "ServiceUnavailable", "The server is busy.", FOREVER)
    err, took = _gives_up(lambda: prov.describe({TAG_JOB: "job-a"}))
    assert type(err) is TransientError
    assert err.message == f"{LISTING}: a passing failure of the Azure API (503 ServiceUnavailable)"
    assert took < DEADLINE + MARGIN
    arm.failures.clear()
    arm.fail("list", 429, "TooManyRequests", "The request is being throttled.", FOREVER)
    err, took = _gives_up(lambda: prov.describe({TAG_JOB: "job-a"}))
    assert type(err) is ThrottledError and took < DEADLINE + MARGIN
    assert arm.calls("GET") == 2  # one each: neither was retried


def test_an_azure_503_forever_is_retried_then_given_up_within_the_deadline(arm: OutageARM) -> None:
    """Before: 4.8 s of backoff between 4 tries; now each sleep is at most a quarter of the
    deadline."""
    prov = _azure(arm)
    arm.fail("list", 503, "ServiceUnavailable", "The server is busy.", FOREVER)
    err, took = _gives_up(lambda: prov.describe({TAG_JOB: "job-a"}))
    assert type(err) is TransientError
    assert err.message == f"{LISTING}: a passing failure of the Azure API (503 ServiceUnavailable)"
    assert took < DEADLINE + MARGIN
    assert arm.calls("GET") == 4  # azure-core's 3 retries of a status
    arm.failures.clear()
    arm.fail("list", 503, "ServiceUnavailable", "The server is busy.")
    assert prov.describe({TAG_JOB: "job-a"}) == []  # one retry, and it passed
    assert arm.calls("GET") == 6


def test_every_azure_request_is_sent_with_the_timeouts_from_api_deadline_s(
    arm: OutageARM,
) -> None:
    """Half of ``api_deadline_s`` to connect and per read (default 60 s); before: 300 s each."""
    prov = _azure(arm, api_deadline_s="7")
    inst = prov.launch(AZURE_LAUNCHES.request())  # get, put, the operation, get
    prov.describe({TAG_JOB: "job-a"})
    prov.terminate([inst.instance_id])  # get, delete
    assert len(arm.rs.calls) >= 6
    assert _timeouts(arm.rs) == {(3.5, 3.5)}
    assert azure.api_deadline_s(prov.settings) == 7.0
    with pytest.raises(SpecError, match=r"^providers\[\]\.options\.api_deadline_s: "):
        _azure(arm, api_deadline_s="0")
