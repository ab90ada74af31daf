"""How the GCP adapter reports the API's refusals, through the real google-cloud-compute client
over the fake: quota (the quota to raise, not an IAM role), throttling (ThrottledError: the
planner backs off and retries), credentials (ProviderUnavailable with the login command), and
a VM that only claims our tags in its metadata (never ours to delete)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cloudfakes import Launches, fake_gce, gcp_config, gcp_credentials, gcp_provisioner, serve

from spotwise.errors import ProviderError, ProviderUnavailable, QuotaError, ThrottledError
from spotwise.providers.base import TAG_JOB, our_tags
from spotwise.providers.gcp_provisioner import GcpProvisioner

SECRET = "ya29.SPOTWISE-GCP-ERRORS-TOKEN-must-never-appear"
LAUNCHES = Launches(
    "gcp",
    zone="us-central1-a",
    instance_type="g2-standard-4",
    price_per_hour=0.28184,
    on_demand_price_per_hour=0.70683,
    vcpus=4,
    memory_gb=16.0,
    gpu_name="L4",
    job="Job-A",
    argv=("python", "train.py"),
    env={"SPOTWISE_TRIAL": "t1"},
)
request = LAUNCHES.request
LAUNCHING = "gcp: launching g2-standard-4 in us-central1-a failed"
QUOTA_HINT = (
    "request a quota increase for PREEMPTIBLE_NVIDIA_L4_GPUS in us-central1 "
    "(console: IAM & Admin > Quotas), or choose another region"
)
THROTTLED_HINT = "nothing to fix: spotwise backs off and retries the call later"
LOGIN_HINT = (
    "run `gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a "
    "service-account key file)"
)
IAM_HINT = (
    "check the account in `gcloud auth application-default print-access-token` has "
    "roles/compute.instanceAdmin.v1 on the project"
)
L4_QUOTA = "Quota 'PREEMPTIBLE_NVIDIA_L4_GPUS' exceeded.  Limit: 0.0 in region us-central1."


@dataclass
class FailingGCE(fake_gce.FakeGCE):
    """The fake, with HTTP errors queued per route (``insert``, ``get``, ``list``, ``delete``:
    each call answers the next queued error, then the fake answers again) and operation errors
    shaped like the real ones (``op_errors``: code → the error entry's fields)."""

    failures: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    op_errors: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fail(self, route: str, status: int, reason: str, message: str, times: int = 1) -> None:
        self.failures.setdefault(route, []).extend([(status, reason, message)] * times)

    def _queued(self, route: str) -> tuple[int, dict[str, str], str] | None:
        queue = self.failures.get(route)
        return fake_gce._err(*queue.pop(0)) if queue else None

    def _insert(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("insert") or super()._insert(request)

    def _get(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("get") or super()._get(request)

    def _list_instances(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("list") or super()._list_instances(request)

    def _delete(self, request: Any) -> tuple[int, dict[str, str], str]:
        return self._queued("delete") or super()._delete(request)

    def _op(
        self, zone: str, name: str, kind: str, *, done: bool, error: str = ""
    ) -> dict[str, Any]:
        op = super()._op(zone, name, kind, done=done, error=error)
        if error in self.op_errors:
            op["error"]["errors"][0].update(self.op_errors[error])
        return op


@pytest.fixture
def fake() -> Iterator[FailingGCE]:
    yield from serve(FailingGCE)


@pytest.fixture
def prov(fake: FailingGCE) -> GcpProvisioner:
    return gcp_provisioner(gcp_config(), gcp_credentials(SECRET))


def _posts(fake: FailingGCE) -> int:
    return sum(c.request.method == "POST" and "/instances?" in c.request.url for c in fake.rs.calls)


# ---- quota ------------------------------------------------------------------------------------
def test_a_403_quota_exceeded_names_the_quota_to_raise_not_an_iam_role(
    prov: GcpProvisioner, fake: FailingGCE
) -> None:
    fake.fail("insert", 403, "quotaExceeded", L4_QUOTA)
    with pytest.raises(ProviderError) as e:
        prov.launch(request())
    assert type(e.value) is QuotaError  # not ProviderUnavailable: the credentials are fine
    assert e.value.message == (
        f"{LAUNCHING}: quota PREEMPTIBLE_NVIDIA_L4_GPUS exceeded in us-central1 (limit 0)"
    )
    assert e.value.hint == QUOTA_HINT
    assert fake.instances == {}


@pytest.mark.parametrize(
    "entry",
    [
        {"message": L4_QUOTA},  # what GCE writes
        {  # only the structured details: the metric and the region still come through
            "errorDetails": [
                {
                    "quotaInfo": {
                        "metricName": "compute.googleapis.com/preemptible_nvidia_l4_gpus",
                        "limitName": "PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region",
                        "dimensions": {"region": "us-central1"},
                    }
                }
            ]
        },
    ],
    ids=["message", "quota-info"],
)
def test_a_quota_exceeded_operation_names_the_quota_to_raise(
    prov: GcpProvisioner, fake: FailingGCE, entry: dict[str, Any]
) -> None:
    fake.op_errors["QUOTA_EXCEEDED"] = entry
    fake.fail_next_insert = "QUOTA_EXCEEDED"
    with pytest.raises(ProviderError) as e:
        prov.launch(request())
    assert type(e.value) is QuotaError
    assert e.value.message.startswith(
        f"{LAUNCHING}: quota PREEMPTIBLE_NVIDIA_L4_GPUS exceeded in us-central1"
    )
    assert e.value.hint == QUOTA_HINT


def test_a_quota_without_a_metric_still_says_quota_and_a_global_one_no_other_region(
    prov: GcpProvisioner, fake: FailingGCE
) -> None:
    fake.fail_next_insert = "QUOTA_EXCEEDED"  # the fake's message names no quota
    with pytest.raises(ProviderError) as e:
        prov.launch(request("a"))
    assert e.value.message == (
        f"{LAUNCHING}: quota exceeded: The zone does not have enough resources (QUOTA_EXCEEDED)."
    )
    assert e.value.hint == (
        "request a quota increase (console: IAM & Admin > Quotas), or choose another region"
    )
    fake.fail(
        "insert", 403, "quotaExceeded", "Quota 'CPUS_ALL_REGIONS' exceeded.  Limit: 32.0 globally."
    )
    with pytest.raises(ProviderError) as e:
        prov.launch(request("b"))
    assert e.value.message == f"{LAUNCHING}: quota CPUS_ALL_REGIONS exceeded globally (limit 32)"
    assert e.value.hint == (
        "request a quota increase for CPUS_ALL_REGIONS (console: IAM & Admin > Quotas)"
    )


# ---- throttling ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "reason"),
    [(429, "rateLimitExceeded"), (403, "rateLimitExceeded"), (403, "userRateLimitExceeded")],
)
def test_a_throttled_insert_is_a_throttled_error(
    prov: GcpProvisioner, fake: FailingGCE, status: int, reason: str
) -> None:
    fake.fail("insert", status, reason, "Rate Limit Exceeded")
    with pytest.raises(ThrottledError) as e:
        prov.launch(request())
    assert e.value.message == (
        f"{LAUNCHING}: the Compute Engine API is throttling requests ({status} {reason})"
    )
    assert e.value.hint == THROTTLED_HINT
    assert prov.launch(request()).state.value == "running"  # the same call, later, succeeds


def test_an_operation_rate_exceeded_is_a_throttled_error(
    prov: GcpProvisioner, fake: FailingGCE
) -> None:
    fake.fail_next_insert = "RESOURCE_OPERATION_RATE_EXCEEDED"
    with pytest.raises(ThrottledError) as e:
        prov.launch(request())
    assert e.value.message == (
        f"{LAUNCHING}: the Compute Engine API is throttling requests "
        "(RESOURCE_OPERATION_RATE_EXCEEDED)"
    )
    assert e.value.hint == THROTTLED_HINT


def test_throttled_describe_and_terminate_are_throttled_errors(
    prov: GcpProvisioner, fake: FailingGCE
) -> None:
    inst = prov.launch(request())
    fake.fail("list", 429, "rateLimitExceeded", "Too many requests")
    with pytest.raises(ThrottledError) as e:
        prov.describe({TAG_JOB: "Job-A"})
    assert e.value.message == (
        "gcp: listing instances failed: the Compute Engine API is throttling requests "
        "(429 rateLimitExceeded)"
    )
    fake.fail("get", 429, "rateLimitExceeded", "Too many requests")
    with pytest.raises(ThrottledError, match=r"^gcp: reading instance us-central1-a/sw-"):
        prov.terminate([inst.instance_id])
    fake.fail("delete", 403, "userRateLimitExceeded", "User Rate Limit Exceeded")
    with pytest.raises(ThrottledError) as e:
        prov.terminate([inst.instance_id])
    assert e.value.message == (
        f"gcp: deleting {inst.instance_id} failed: the Compute Engine API is throttling "
        "requests (403 userRateLimitExceeded)"
    )
    assert len(fake.instances) == 1  # nothing was deleted; the retry does it
    prov.terminate([inst.instance_id])
    assert fake.instances == {}


# ---- credentials ------------------------------------------------------------------------------
def _revoked() -> Any:
    """Credentials whose refresh fails the way a revoked gcloud login does."""
    from google.auth import credentials as ga
    from google.auth.exceptions import RefreshError

    class Revoked(ga.Credentials):  # type: ignore[misc]
        def refresh(self, request: Any) -> None:
            raise RefreshError(
                "invalid_grant: Token has been expired or revoked.",
                {
                    "error": "invalid_grant",
                    "error_description": "Token has been expired or revoked.",
                },
            )

        @property
        def expired(self) -> bool:
            return True

        @property
        def valid(self) -> bool:
            return False

    return Revoked()


def test_expired_credentials_say_how_to_log_in_again(fake: FailingGCE) -> None:
    prov = gcp_provisioner(gcp_config(), _revoked())
    calls = {
        f"{LAUNCHING}": lambda: prov.launch(request()),
        "gcp: listing instances failed": prov.describe,
        "gcp: reading instance us-central1-a/sw-x failed": lambda: prov.terminate(
            ["us-central1-a/sw-x"]
        ),
    }
    for prefix, call in calls.items():
        with pytest.raises(ProviderUnavailable) as e:
            call()
        assert e.value.message == (
            f"{prefix}: the Google credentials could not be refreshed (invalid_grant)"
        )
        assert e.value.hint == LOGIN_HINT
    assert len(fake.rs.calls) == 0  # nothing reached the API


def test_a_401_says_how_to_log_in_and_a_403_keeps_the_iam_role_hint(
    prov: GcpProvisioner, fake: FailingGCE
) -> None:
    # google-auth refreshes and resends twice after a 401; the third one is the answer
    fake.fail("insert", 401, "authError", "Request had invalid authentication credentials.", 3)
    with pytest.raises(ProviderUnavailable) as e:
        prov.launch(request())
    assert e.value.message == (
        f"{LAUNCHING}: the credentials were rejected (401): "
        "Request had invalid authentication credentials."
    )
    assert e.value.hint == LOGIN_HINT
    assert _posts(fake) == 3
    denied = "Required 'compute.instances.create' permission for 'projects/proj-1'"
    fake.fail("insert", 403, "forbidden", denied)
    with pytest.raises(ProviderUnavailable) as e:
        prov.launch(request())
    assert e.value.message == f"{LAUNCHING}: permission denied (403): {denied}"
    assert e.value.hint == IAM_HINT
    assert SECRET not in f"{e.value.message} {e.value.hint}"


# ---- terminate: the label, not the metadata, makes a VM ours -------------------------------------
def test_terminate_refuses_a_vm_whose_only_claim_is_our_metadata(
    prov: GcpProvisioner, fake: FailingGCE
) -> None:
    ours = prov.launch(request())
    fake.add_foreign("us-central1-a", "not-ours")
    forged = json.dumps(our_tags("Job-A", "t1", "launch-0001"))
    fake.instances[("us-central1-a", "not-ours")]["metadata"] = {
        "items": [{"key": "spotwise-tags", "value": forged}]
    }
    with pytest.raises(ProviderError) as e:
        prov.terminate([ours.instance_id, "us-central1-a/not-ours"])
    assert e.value.message == (
        "gcp: refusing to terminate ['us-central1-a/not-ours']: not instances launched by "
        "spotwise (no spotwise labels) in this project"
    )
    assert len(fake.instances) == 2  # nothing deleted when any id is refused
    prov.terminate([ours.instance_id])
    assert list(fake.instances) == [("us-central1-a", "not-ours")]
