"""EC2 throttling (``RequestLimitExceeded`` and friends) after botocore's own retries give up is
a ThrottledError (the planner backs off and retries), on launch, describe and terminate; moto
answers every other call."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from spotwise.errors import ThrottledError
from spotwise.providers.aws import open_provisioner
from spotwise.providers.base import LaunchRequest, Market, Offer, our_tags
from spotwise.providers.registry import ProviderConfig

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HINT = "nothing to fix: spotwise backs off and retries the call later"


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **kwargs: Any) -> Any:
        yield self.body


class Throttle:
    """A ``before-send`` handler answering the named EC2 operations with HTTP 503 and an error
    code until ``times`` answers are used; counts the attempts botocore made."""

    def __init__(self, code: str, operations: set[str], times: int = 100) -> None:
        self.code, self.operations, self.times, self.sent = code, operations, times, 0

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        sent = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        if not self.times or parse_qs(sent).get("Action", [""])[0] not in self.operations:
            return None  # moto answers
        self.times -= 1
        self.sent += 1
        body = (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error>'
            f"<Code>{self.code}</Code><Message>Request limit exceeded.</Message>"
            "</Error></Errors><RequestID>r-1</RequestID></Response>"
        ).encode()
        return AWSResponse(request.url, 503, {}, _Raw(body))


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore still retries, without sleeping in between."""
    monkeypatch.setattr(
        "botocore.retries.standard.ExponentialBackoff.delay_amount", lambda self, ctx: 0.0
    )


def _prov(bucket: str) -> Any:
    opts = {"image": "ami-12c6146b", "artifacts": f"s3://{bucket}/runs", "poll_s": "0"}
    return open_provisioner(ProviderConfig(name="aws", regions=("us-east-1",), options=opts))


def _request(tmp_path: Path) -> LaunchRequest:
    offer = Offer("aws", "us-east-1", "us-east-1b", "c5.xlarge", Market.SPOT, 0.0824, 0.17, 4, 8.0)
    launch = uuid.uuid4().hex[:16]
    env = {"SPOTWISE_JOB_ID": "job-1", "SPOTWISE_TRIAL_ID": "t1", "SPOTWISE_ATTEMPT": "1"}
    return LaunchRequest(
        offer, (sys.executable, "-c", "pass"), env, our_tags("job-1", "t1", launch), launch
    )


def _throttle(prov: Any, code: str, *operations: str) -> Throttle:
    handler = Throttle(code, set(operations))
    prov._ec2("us-east-1").meta.events.register_first("before-send.ec2", handler)
    return handler


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "Throttling", "ThrottlingException"])
def test_a_throttled_launch_is_a_throttled_error(bucket: str, tmp_path: Path, code: str) -> None:
    prov = _prov(bucket)
    throttle = _throttle(prov, code, "RunInstances")
    with pytest.raises(ThrottledError) as e:
        prov.launch(_request(tmp_path))
    assert e.value.message == (
        f"aws: the AWS API is throttling requests ({code}) while launching c5.xlarge (spot) "
        "in us-east-1b"
    )
    assert e.value.hint == HINT
    assert throttle.sent == 4  # attempts=4 in all: the first try and 3 retries


def test_throttled_describe_and_terminate_are_throttled_errors(bucket: str, tmp_path: Path) -> None:
    prov = _prov(bucket)
    inst = prov.launch(_request(tmp_path))
    throttle = _throttle(prov, "RequestLimitExceeded", "DescribeInstances")
    with pytest.raises(ThrottledError) as e:
        prov.describe()
    assert e.value.message == (
        "aws: the AWS API is throttling requests (RequestLimitExceeded) while describing "
        "instances in us-east-1"
    )
    throttle.operations = {"TerminateInstances"}
    with pytest.raises(ThrottledError) as e:
        prov.terminate([inst.instance_id])
    assert e.value.message == (
        "aws: the AWS API is throttling requests (RequestLimitExceeded) while terminating "
        f"['{inst.instance_id}']"
    )
    assert e.value.hint == HINT
    throttle.times = 0  # the API calms down: the same call succeeds
    prov.terminate([inst.instance_id])
    (gone,) = prov.describe()
    assert gone.state.value in ("stopping", "terminated")


@pytest.mark.parametrize(
    "code", ["VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded"]
)
def test_an_account_limit_is_a_quota_error_naming_the_fix(
    bucket: str, tmp_path: Path, code: str
) -> None:
    """MaxSpotInstanceCountExceeded was taken for a lack of capacity: the job retried the zone
    each tick, never failing, while no capacity would come until the quota was raised."""
    from spotwise.errors import CapacityError, QuotaError

    prov = _prov(bucket)
    handler = Throttle(code, {"RunInstances"})
    prov._ec2("us-east-1").meta.events.register_first("before-send.ec2", handler)
    with pytest.raises(QuotaError) as e:
        prov.launch(_request(tmp_path))
    assert not isinstance(e.value, CapacityError)
    assert e.value.message.startswith(
        f"aws: quota reached while launching c5.xlarge (spot) in us-east-1b ({code}): "
    )
    assert e.value.hint is not None and "Service Quotas" in e.value.hint
