"""How the Azure adapter reports ARM's refusals, through the real azure-mgmt-compute pipeline
over the fake: quota (the quota to raise, not a role), throttling after azure-core's own
retries (ThrottledError: the planner backs off and retries), credentials (``az login``), and
AuthorizationFailed (the role to grant)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cloudfakes import AzureCredential, Launches, azure_config, fake_arm, serve

from spotwise.errors import ProviderError, ProviderUnavailable, QuotaError, ThrottledError
from spotwise.providers import azure
from spotwise.providers.azure_provisioner import AzureProvisioner
from spotwise.providers.base import TAG_JOB

SECRET = "eyJ0eXAiOiJKV1Qi.SPOTWISE-AZURE-ERRORS-TOKEN.must-never-appear"
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
    argv=("python", "train.py"),
    env={"SPOTWISE_TRIAL": "t1"},
)
request = LAUNCHES.request
LAUNCHING = "azure: launching Standard_NC4as_T4_v3 in eastus-1"
LOGIN_HINT = "run `az login` (or set AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET)"
ROLE_HINT = "grant the identity the Virtual Machine Contributor role on the group"
THROTTLED_HINT = "nothing to fix: spotwise backs off and retries the call later"
T4_QUOTA = (
    "Operation could not be completed as it results in exceeding approved "
    "standardNCASv3_T4Family Cores quota. Additional details - Deployment Model: Resource "
    "Manager, Location: eastus, Current Limit: 0, Current Usage: 0, Additional Required: 4, "
    "(Minimum) New Limit Required: 4."
)


@dataclass
class FailingARM(fake_arm.FakeARM):
    """The fake, with errors queued per route (``put``, ``get``, ``list``, ``delete``): each
    call answers the next queued error, then the fake answers again."""

    failures: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)

    def fail(self, route: str, status: int, code: str, message: str, times: int = 1) -> None:
        self.failures.setdefault(route, []).extend([(status, code, message)] * times)

    def _queued(self, route: str) -> tuple[int, dict[str, str], str] | None:
        queue = self.failures.get(route)
        if not queue:
            return None
        status, code, message = queue.pop(0)
        headers = {"Content-Type": "application/json"}
        if status == 429:
            headers["Retry-After"] = "0.01"  # azure-core honours it between its retries
        return status, headers, json.dumps({"error": {"code": code, "message": message}})

    def _put(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("put") or super()._put(request)

    def _get(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("get") or super()._get(request)

    def _list(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("list") or super()._list(request)

    def _delete(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("delete") or super()._delete(request)

    def calls(self, method: str) -> int:
        return sum(c.request.method == method for c in self.rs.calls)


@pytest.fixture
def fake() -> Iterator[FailingARM]:
    yield from serve(FailingARM)


@pytest.fixture
def prov(fake: FailingARM) -> AzureProvisioner:
    return azure.open_provisioner(azure_config(fake), credential=AzureCredential(SECRET))


# ---- quota ------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", [403, 409])
def test_quota_exceeded_names_the_quota_to_raise_not_a_role(
    prov: AzureProvisioner, fake: FailingARM, status: int
) -> None:
    fake.fail("put", status, "QuotaExceeded", T4_QUOTA)
    with pytest.raises(ProviderError) as e:
        prov.launch(request())
    assert type(e.value) is QuotaError  # not ProviderUnavailable: the identity is fine
    assert e.value.message == f"{LAUNCHING}: QuotaExceeded: {T4_QUOTA}"
    assert e.value.hint == (
        "request a quota increase for standardNCASv3_T4Family Cores in eastus "
        "(portal: Subscriptions > Usage + quotas), or choose another region"
    )


def test_an_operation_not_allowed_quota_keeps_the_quota_hint(
    prov: AzureProvisioner, fake: FailingARM
) -> None:
    spot = (
        "Operation could not be completed as it results in exceeding approved LowPriorityCores "
        "quota."
    )
    fake.fail("put", 409, "OperationNotAllowed", spot)
    with pytest.raises(ProviderError) as e:
        prov.launch(request())
    assert type(e.value) is QuotaError
    assert e.value.hint == (
        "request a quota increase for LowPriorityCores "
        "(portal: Subscriptions > Usage + quotas), or choose another region"
    )


# ---- throttling -------------------------------------------------------------------------------
def test_throttling_after_azure_cores_retries_is_a_throttled_error(
    prov: AzureProvisioner, fake: FailingARM
) -> None:
    fake.fail("put", 429, "TooManyRequests", "The request is being throttled.", times=30)
    with pytest.raises(ThrottledError) as e:
        prov.launch(request())
    assert e.value.message == (
        f"{LAUNCHING}: the Azure API is throttling requests (429 TooManyRequests)"
    )
    assert e.value.hint == THROTTLED_HINT
    assert fake.calls("PUT") > 1  # azure-core retried before giving up
    fake.failures.clear()
    assert prov.launch(request()).state.value == "running"  # the same call, later, succeeds


def test_throttled_describe_and_terminate_are_throttled_errors(
    prov: AzureProvisioner, fake: FailingARM
) -> None:
    inst = prov.launch(request())
    fake.fail("list", 429, "TooManyRequests", "The request is being throttled.", times=30)
    with pytest.raises(ThrottledError) as e:
        prov.describe({TAG_JOB: "job-a"})
    assert e.value.message == (
        "azure: listing VMs in spotwise-rg: the Azure API is throttling requests "
        "(429 TooManyRequests)"
    )
    fake.failures.clear()
    fake.fail("delete", 429, "TooManyRequests", "The request is being throttled.", times=30)
    with pytest.raises(ThrottledError) as e:
        prov.terminate([inst.instance_id])
    assert e.value.message == (
        f"azure: deleting VM {inst.instance_id}: the Azure API is throttling requests "
        "(429 TooManyRequests)"
    )
    assert e.value.hint == THROTTLED_HINT
    assert list(fake.vms) == [inst.instance_id]  # nothing deleted; the retry does it
    fake.failures.clear()
    prov.terminate([inst.instance_id])
    assert fake.vms == {}


# ---- credentials and roles ----------------------------------------------------------------------
class Expired:
    """A credential whose ``az login`` has expired: get_token raises."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.exceptions import ClientAuthenticationError

        raise ClientAuthenticationError(
            "DefaultAzureCredential failed to retrieve a token from the included credentials.\n"
            "Attempted credentials:\n\tAzureCliCredential: AADSTS700082: The refresh token has "
            "expired due to inactivity.\nTo mitigate this issue, please refer to the "
            "troubleshooting guidelines here at https://aka.ms/azsdk/python/identity/"
            "defaultazurecredential/troubleshoot."
        )


def test_an_expired_login_says_az_login_on_every_path(fake: FailingARM) -> None:
    prov = azure.open_provisioner(azure_config(fake), credential=Expired())
    calls = {
        "azure: reading VM sw-launch-0001-b0f65f77": lambda: prov.launch(request()),
        "azure: listing VMs in spotwise-rg": prov.describe,
        "azure: reading VM sw-x": lambda: prov.terminate(["sw-x"]),
    }
    for prefix, call in calls.items():
        with pytest.raises(ProviderUnavailable) as e:
            call()
        assert e.value.message == f"{prefix}: no usable Azure credential (AADSTS700082)"
        assert e.value.hint == LOGIN_HINT
    assert len(fake.rs.calls) == 0


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("InvalidAuthenticationToken", "The access token is invalid."),
        ("ExpiredAuthenticationToken", "The access token expiry UTC time is earlier than now."),
    ],
)
def test_a_401_says_az_login(
    prov: AzureProvisioner, fake: FailingARM, code: str, message: str
) -> None:
    fake.fail("put", 401, code, message, times=5)
    with pytest.raises(ProviderUnavailable) as e:
        prov.launch(request())
    assert e.value.message == f"{LAUNCHING}: the credentials were rejected (401 {code}): {message}"
    assert e.value.hint == LOGIN_HINT
    assert SECRET not in f"{e.value.message} {e.value.hint}"


def test_authorization_failed_keeps_the_role_hint(prov: AzureProvisioner, fake: FailingARM) -> None:
    denied = (
        "The client 'abc' with object id 'abc' does not have authorization to perform action "
        "'Microsoft.Compute/virtualMachines/write'"
    )
    fake.fail("put", 403, "AuthorizationFailed", denied)
    with pytest.raises(ProviderUnavailable) as e:
        prov.launch(request())
    assert e.value.message == f"{LAUNCHING}: AuthorizationFailed: {denied}"
    assert e.value.hint == ROLE_HINT


def test_the_credential_chain_does_not_print_a_page_before_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """azure-identity warned 13 lines (one per credential source tried) on stderr before
    spotwise's one-line error; SPOTWISE_DEBUG=1 keeps them."""
    import logging

    quiet = logging.getLogger("azure.identity")
    before = quiet.level
    try:
        quiet.setLevel(logging.NOTSET)
        monkeypatch.delenv("SPOTWISE_DEBUG", raising=False)
        azure.default_credential()
        assert not quiet.isEnabledFor(logging.WARNING)
        quiet.setLevel(logging.NOTSET)
        monkeypatch.setenv("SPOTWISE_DEBUG", "1")
        azure.default_credential()
        assert quiet.isEnabledFor(logging.WARNING)
    finally:
        quiet.setLevel(before)
