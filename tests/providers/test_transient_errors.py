"""A brief hiccup of a cloud API (HTTP 5xx, EC2 ``InternalError``/``Unavailable``, a timeout, a
dropped connection) is a :class:`~spotwise.errors.TransientError`: the planner pauses the
provider and tries again instead of counting a trial failure. Before, each became a plain
ProviderError. Throttling stays a ThrottledError (itself a TransientError), and a refusal
(HTTP 400) stays a plain ProviderError.

AWS: botocore's own exceptions, built here, through ``aws.provider_error``. GCP and Azure:
through the real clients over the ``responses`` fakes that ``test_gcp_errors.py`` and
``test_azure_errors.py`` use."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
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
from test_gcp_errors import LAUNCHES as GCP_LAUNCHES

from spotwise.errors import ProviderError, ThrottledError, TransientError
from spotwise.providers import aws, azure
from spotwise.providers.base import TAG_JOB

AWS_HINT = (
    "nothing to fix if it passes: spotwise pauses the provider and tries again; if it lasts, "
    "see https://health.aws.amazon.com"
)
NETWORK_HINT = (
    "nothing to fix if it passes: spotwise pauses the provider and tries again; if it lasts, "
    "check this machine's network"
)
GCP_HINT = (
    "nothing to fix if it passes: spotwise pauses the provider and tries again; if it lasts, "
    "see https://status.cloud.google.com"
)
AZURE_HINT = (
    "nothing to fix if it passes: spotwise pauses the provider and tries again; if it lasts, "
    "see https://azure.status.microsoft"
)
THROTTLED_HINT = "nothing to fix: spotwise backs off and retries the call later"
ACTION = "describing instances in us-east-1"
SECRET_KEY = "AKIAIOSFODNN7EXAMPLE"


# ---- AWS ----------------------------------------------------------------------------------------
def client_error(code: str, status: int, message: str = "An internal error occurred.") -> Any:
    from botocore.exceptions import ClientError

    body = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(body, "DescribeInstances")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "status", "why"),
    [
        ("InternalError", 500, "InternalError, HTTP 500"),
        ("InternalFailure", 500, "InternalFailure, HTTP 500"),
        ("Unavailable", 503, "Unavailable, HTTP 503"),
        ("ServiceUnavailable", 503, "ServiceUnavailable, HTTP 503"),
        ("ServiceUnavailableException", 503, "ServiceUnavailableException, HTTP 503"),
        ("RequestTimeout", 400, "RequestTimeout, HTTP 400"),  # S3 answers it with 400
        ("RequestTimeoutException", 408, "RequestTimeoutException, HTTP 408"),
        ("SomethingNew", 502, "SomethingNew, HTTP 502"),  # any 5xx
    ],
)
def test_an_aws_server_error_is_a_transient_error(code: str, status: int, why: str) -> None:
    err = aws.provider_error(client_error(code, status), ACTION)
    assert type(err) is TransientError
    assert err.message == f"aws: a passing failure of the AWS API ({why}) while {ACTION}"
    assert err.hint == AWS_HINT


@pytest.mark.parametrize(
    ("make", "text"),
    [
        (
            lambda b: b.EndpointConnectionError(
                endpoint_url="https://ec2.us-east-1.amazonaws.com/"
            ),
            'Could not connect to the endpoint URL: "https://ec2.us-east-1.amazonaws.com/"',
        ),
        (
            lambda b: b.ConnectTimeoutError(endpoint_url="https://ec2.us-east-1.amazonaws.com/"),
            'Connect timeout on endpoint URL: "https://ec2.us-east-1.amazonaws.com/"',
        ),
        (
            lambda b: b.ReadTimeoutError(
                endpoint_url="https://b.s3.amazonaws.com/ckpt?X-Amz-Signature=s3cr3t"
            ),
            'Read timeout on endpoint URL: "https://b.s3.amazonaws.com/ckpt"',
        ),
        (
            lambda b: b.ConnectionClosedError(endpoint_url="https://ec2.us-east-1.amazonaws.com/"),
            "Connection was closed before we received a valid response from endpoint URL: "
            '"https://ec2.us-east-1.amazonaws.com/"',
        ),
    ],
)
def test_a_failure_to_reach_aws_is_a_transient_error(
    make: Any, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import botocore.exceptions as b

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    exc = make(b)
    assert aws.is_sdk_error(exc)  # callers map it (rather than let it escape as a traceback)
    err = aws.provider_error(exc, ACTION)
    assert type(err) is TransientError
    assert err.message == f"aws: a passing failure of the AWS API ({text}) while {ACTION}"
    assert "s3cr3t" not in err.message
    assert err.hint == NETWORK_HINT


def test_an_unreachable_custom_endpoint_is_named_in_the_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import botocore.exceptions as b

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    err = aws.provider_error(b.EndpointConnectionError(endpoint_url="http://127.0.0.1:9/"), ACTION)
    assert type(err) is TransientError
    assert err.hint == f"{NETWORK_HINT} and AWS_ENDPOINT_URL (http://127.0.0.1:9)"


def test_throttling_capacity_quota_and_refusals_keep_their_classes() -> None:
    """Throttling stays a ThrottledError even when S3 answers it with 503 (SlowDown); EC2
    answers InsufficientInstanceCapacity with 500, and it stays a CapacityError; a 400 is the
    caller's fault and stays a plain ProviderError."""
    from spotwise.errors import CapacityError, QuotaError

    slow = aws.provider_error(client_error("SlowDown", 503), ACTION)
    assert type(slow) is ThrottledError and slow.hint == THROTTLED_HINT
    limit = aws.provider_error(client_error("RequestLimitExceeded", 503), ACTION)
    assert type(limit) is ThrottledError
    capacity = aws.provider_error(client_error("InsufficientInstanceCapacity", 500), ACTION)
    assert type(capacity) is CapacityError
    quota = aws.provider_error(client_error("VcpuLimitExceeded", 400), ACTION)
    assert type(quota) is QuotaError
    bad = aws.provider_error(client_error("InvalidParameterValue", 400, SECRET_KEY), ACTION)
    assert type(bad) is ProviderError
    assert bad.message == (
        f"aws: {ACTION} failed: An error occurred (InvalidParameterValue) when calling the "
        "DescribeInstances operation: <redacted>"
    )


def test_a_certificate_failure_is_not_taken_for_a_passing_one() -> None:
    import botocore.exceptions as b

    exc = b.SSLError(endpoint_url="https://ec2.us-east-1.amazonaws.com/", error="bad cert")
    assert type(aws.provider_error(exc, ACTION)) is ProviderError


# ---- GCP: google-cloud-compute over the fake --------------------------------------------------


@dataclass
class FlakyGCE(fake_gce.FakeGCE):
    """The fake, with failures queued for ``list``, ``get`` and ``delete``: an HTTP error
    (status, reason, message) or an exception raised in place of an answer. (The client
    retries a 503 of ``list`` and ``get`` itself, until ``api_deadline_s``; ``delete`` it does
    not.)"""

    failures: dict[str, list[tuple[int, str, str] | Exception]] = field(default_factory=dict)

    def fail(self, route: str, *failure: Any) -> None:
        one = failure[0] if isinstance(failure[0], Exception) else tuple(failure)
        self.failures.setdefault(route, []).append(one)

    def _queued(self, route: str) -> tuple[int, dict[str, str], str] | None:
        queue = self.failures.get(route)
        if not queue:
            return None
        failure = queue.pop(0)
        if isinstance(failure, Exception):
            raise failure
        return fake_gce._err(*failure)

    def _list_instances(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("list") or super()._list_instances(request)

    def _get(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("get") or super()._get(request)

    def _delete(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("delete") or super()._delete(request)


@pytest.fixture
def gce() -> Iterator[FlakyGCE]:
    yield from serve(FlakyGCE)


@pytest.mark.parametrize(
    ("status", "reason", "message"),
    [
        (500, "backendError", "Internal error. Please try again."),
        (502, "badGateway", "Bad Gateway"),
        (503, "backendError", "The service is currently unavailable."),
        (504, "deadlineExceeded", "Gateway Timeout"),
    ],
)
def test_a_gcp_server_error_is_a_transient_error(
    gce: FlakyGCE, status: int, reason: str, message: str
) -> None:
    prov = gcp_provisioner(gcp_config(), gcp_credentials("ya29.transient-test"))
    inst = prov.launch(GCP_LAUNCHES.request())
    gce.fail("delete", status, reason, message)
    with pytest.raises(ProviderError) as e:
        prov.terminate([inst.instance_id])
    assert type(e.value) is TransientError
    assert e.value.message == (
        f"gcp: deleting {inst.instance_id} failed: a passing failure of the Compute Engine "
        f"API ({status} {message})"
    )
    assert e.value.hint == GCP_HINT
    assert len(gce.instances) == 1
    prov.terminate([inst.instance_id])  # the same call, later, succeeds
    assert gce.instances == {}


def test_a_gcp_503_the_client_gave_up_retrying_is_a_transient_error() -> None:
    """``list`` and ``get`` retry a 503 until ``api_deadline_s``; then api_core raises a RetryError
    whose cause is the last 503."""
    from google.api_core.exceptions import RetryError, ServiceUnavailable

    from spotwise.providers import gcp_errors

    last = ServiceUnavailable("GET https://compute.googleapis.com/x: Backend Error")
    err = gcp_errors.api_error("gcp: listing instances failed", RetryError("Timeout of 600s", last))
    assert type(err) is TransientError
    assert err.message == (
        "gcp: listing instances failed: a passing failure of the Compute Engine API "
        "(503 Backend Error)"
    )


def test_a_gcp_429_stays_throttled_and_a_400_a_plain_provider_error(gce: FlakyGCE) -> None:
    prov = gcp_provisioner(gcp_config(), gcp_credentials("ya29.transient-test"))
    gce.fail("list", 429, "rateLimitExceeded", "Too many requests")
    with pytest.raises(ThrottledError) as e:
        prov.describe({TAG_JOB: "Job-A"})
    assert type(e.value) is ThrottledError and e.value.hint == THROTTLED_HINT
    gce.fail("list", 400, "invalid", "Invalid value for field 'filter'")
    with pytest.raises(ProviderError) as e:
        prov.describe({TAG_JOB: "Job-A"})
    assert type(e.value) is ProviderError
    assert e.value.message == "gcp: listing instances failed: 400 Invalid value for field 'filter'"


def test_a_dropped_connection_or_timeout_to_gcp_is_a_transient_error(gce: FlakyGCE) -> None:
    import requests

    prov = gcp_provisioner(gcp_config(), gcp_credentials("ya29.transient-test"))
    inst = prov.launch(GCP_LAUNCHES.request())
    gce.fail("list", requests.ConnectionError("Connection aborted: RemoteDisconnected"))
    with pytest.raises(ProviderError) as e:
        prov.describe({TAG_JOB: "Job-A"})
    assert type(e.value) is TransientError
    assert e.value.message == (
        "gcp: listing instances failed: a passing failure of the Compute Engine API "
        "(could not connect)"
    )
    gce.fail(
        "get",
        requests.ReadTimeout(
            "HTTPSConnectionPool(host='compute.googleapis.com', port=443): Read timed out."
        ),
    )
    with pytest.raises(ProviderError) as e:
        prov.terminate([inst.instance_id])
    assert type(e.value) is TransientError
    assert e.value.message == (
        f"gcp: reading instance {inst.instance_id} failed: a passing failure of the Compute "
        "Engine API (timed out talking to compute.googleapis.com)"
    )
    assert "ya29" not in e.value.message


# ---- Azure: azure-mgmt-compute over the fake --------------------------------------------------
@dataclass
class FlakyARM(fake_arm.FakeARM):
    """The fake, with failures queued for ``list``: an HTTP error (status, code, message;
    ``Retry-After`` short, so azure-core's own retries take no time) or an exception raised in
    place of an answer."""

    failures: list[tuple[int, str, str] | Exception] = field(default_factory=list)

    def _list(self, request: Any) -> tuple[int, dict[str, str], str]:
        if not self.failures:
            return super()._list(request)
        failure = self.failures.pop(0)
        if isinstance(failure, Exception):
            raise failure
        status, code, message = failure
        headers = {"Content-Type": "application/json"}
        if status >= 429:  # azure-core would retry even a 400 that carried one
            headers["Retry-After"] = "0.01"
        return status, headers, json.dumps({"error": {"code": code, "message": message}})

    def calls(self, method: str) -> int:
        return sum(c.request.method == method for c in self.rs.calls)


@pytest.fixture
def arm() -> Iterator[FlakyARM]:
    yield from serve(FlakyARM)


@pytest.mark.parametrize(
    ("status", "code"), [(500, "InternalServerError"), (503, "ServiceUnavailable"), (504, "")]
)
def test_an_azure_server_error_after_azure_cores_retries_is_a_transient_error(
    arm: FlakyARM, status: int, code: str
) -> None:
    prov = azure.open_provisioner(azure_config(arm), credential=AzureCredential("t0ken"))
    arm.failures = [(status, code, "The server had an error.")] * 30
    with pytest.raises(ProviderError) as e:
        prov.describe({TAG_JOB: "job-a"})
    assert type(e.value) is TransientError
    why = f"{status} {code}".strip()
    assert e.value.message == (
        f"azure: listing VMs in spotwise-rg: a passing failure of the Azure API ({why})"
    )
    assert e.value.hint == AZURE_HINT
    assert arm.calls("GET") > 1  # azure-core retried before giving up
    arm.failures = []
    assert prov.describe({TAG_JOB: "job-a"}) == []  # the same call, later, succeeds


def test_an_azure_429_stays_throttled_and_a_400_a_plain_provider_error(arm: FlakyARM) -> None:
    prov = azure.open_provisioner(azure_config(arm), credential=AzureCredential("t0ken"))
    arm.failures = [(429, "TooManyRequests", "The request is being throttled.")] * 30
    with pytest.raises(ThrottledError) as e:
        prov.describe({TAG_JOB: "job-a"})
    assert type(e.value) is ThrottledError and e.value.hint == THROTTLED_HINT
    arm.failures = [(400, "InvalidParameter", "The value of parameter expand is invalid.")]
    with pytest.raises(ProviderError) as e:
        prov.describe({TAG_JOB: "job-a"})
    assert type(e.value) is ProviderError
    assert e.value.message == (
        "azure: listing VMs in spotwise-rg: InvalidParameter: The value of parameter expand "
        "is invalid."
    )


def test_a_dropped_connection_to_azure_is_a_transient_error(arm: FlakyARM) -> None:
    import requests

    prov = azure.open_provisioner(azure_config(arm), credential=AzureCredential("t0ken"))
    arm.failures = [requests.ConnectionError("Connection aborted: RemoteDisconnected")] * 30
    with pytest.raises(ProviderError) as e:
        prov.describe({TAG_JOB: "job-a"})
    assert type(e.value) is TransientError
    assert e.value.message.startswith(
        "azure: listing VMs in spotwise-rg: a passing failure of the Azure API ("
    )
    assert e.value.hint == AZURE_HINT
    assert "t0ken" not in e.value.message


# ---- object storage: GCS and Azure Blob -------------------------------------------------------
def test_gcs_server_errors_and_dropped_connections_are_transient_errors() -> None:
    """The message stays what it was; the class says the failure passes (a 429: throttled)."""
    import requests
    from google.api_core import exceptions as g

    from spotwise.providers.gcs_blobs import GcsBlobs

    blobs = GcsBlobs("bkt", "ckpt", client=object())
    err = blobs.error(g.ServiceUnavailable("Backend Error"), "writing", "a.pt")
    assert type(err) is TransientError
    assert err.message == (
        "GCS gs://bkt/ckpt: writing a.pt failed (503 ServiceUnavailable: Backend Error)"
    )
    dropped = requests.ConnectionError("Connection aborted.")
    assert type(blobs.error(dropped, "listing")) is TransientError
    gave_up = g.RetryError("Timeout of 120.0s exceeded", g.InternalServerError("oops"))
    assert type(blobs.error(gave_up, "listing")) is TransientError
    assert type(blobs.error(g.TooManyRequests("slow down"), "listing")) is ThrottledError
    assert type(blobs.error(g.BadRequest("bad"), "listing")) is ProviderError


def test_azure_blob_server_errors_and_timeouts_are_transient_errors() -> None:
    from azure.core.exceptions import (
        HttpResponseError,
        ServiceRequestError,
        ServiceResponseError,
    )

    from spotwise.providers.azure_blobs import blob_error

    def http(status: int, code: str) -> HttpResponseError:
        e = HttpResponseError(message=f"{code} happened")
        e.status_code, e.error_code = status, code
        return e

    where = "az://acct/ckpt/t"
    err = blob_error(http(500, "InternalError"), "acct", "ckpt", where, "listing")
    assert type(err) is TransientError
    assert err.message == (
        "azure: listing az://acct/ckpt/t failed: InternalError (HTTP 500): InternalError happened"
    )
    busy = blob_error(http(503, "ServerBusy"), "acct", "ckpt", where, "listing")
    assert type(busy) is ThrottledError
    timeout = blob_error(ServiceResponseError("read timed out"), "acct", "ckpt", where, "listing")
    assert type(timeout) is TransientError
    assert timeout.message == (
        "azure: listing az://acct/ckpt/t failed: no answer from the Blob service "
        "(ServiceResponseError)"
    )
    # could not send at all: a misspelt account does not resolve; not taken for a hiccup
    unsent = blob_error(ServiceRequestError("no such host"), "acct", "ckpt", where, "listing")
    assert type(unsent) is ProviderError
    denied = blob_error(http(403, "AuthorizationPermissionMismatch"), "acct", "ckpt", where, "x")
    assert type(denied) is ProviderError
