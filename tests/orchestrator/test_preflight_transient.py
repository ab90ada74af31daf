"""A checkpoint location that could not be checked for a reason that passes (S3 answered 500
``InternalError``, a read timed out, requests were throttled, the endpoint did not answer) is
no fault of the spec: the job is refused with the provider's error (exit 1), naming
``checkpoint.location`` and saying to try again. Before, it was a SpecError (exit 2) telling
the user to "choose a location this machine can write, or fix its permissions". A location
that really cannot be written (access denied, no such bucket) stays a SpecError.

S3 answers through a stub client (``spotwise.providers.aws.s3_client`` patched), so each
answer is exact and nothing waits for botocore's retries; the CLI case uses an endpoint where
nothing listens."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import preflight_spec, run_cli, tune_refused, write_job_yaml

from spotwise.errors import ProviderError, SpecError, ThrottledError, TransientError
from spotwise.planner.checkpoint_probe import probe_checkpoint_root
from spotwise.store import Store

pytest.importorskip("botocore", reason="boto3 is not installed (spotwise[aws])")

BUCKET = "spotwise-preflight"
LOCATION = f"s3://{BUCKET}/ckpt"
AGAIN_HINT = "nothing to fix if it passes: run the same command again"


def client_error(code: str, status: int, message: str) -> Exception:
    from botocore.exceptions import ClientError

    body = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(body, "PutObject")  # type: ignore[arg-type]


class FailingS3:
    """An S3 client whose every ``put_object`` raises ``error``; counts the writes."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.puts = 0

    def put_object(self, **kwargs: Any) -> None:
        self.puts += 1
        raise self.error


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``s3(error)``: every S3 client spotwise makes is a FailingS3 raising ``error``."""
    from spotwise.providers import aws

    def use(error: Exception) -> FailingS3:
        client = FailingS3(error)
        monkeypatch.setattr(aws, "s3_client", lambda *a, **k: client)
        return client

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return use


def tune_fails(tmp_path: Path) -> ProviderError:
    """Run `tune` (the core call) on a replayed job checkpointed at LOCATION; the
    ProviderError it raises, once checked that it is one line and that nothing was recorded."""
    from spotwise import jobs

    path = write_job_yaml(tmp_path, preflight_spec(tmp_path, checkpoint={"location": LOCATION}))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with pytest.raises(ProviderError) as info:
        jobs.tune(path, db=db, run_root=tmp_path / "runs")
    assert "\n" not in str(info.value)
    with Store.open(db) as store:
        assert store.list_jobs() == []
    assert not (tmp_path / "runs").exists()
    return info.value


def test_a_server_error_of_s3_is_not_a_spec_error(tmp_path: Path, s3: Any) -> None:
    client = s3(client_error("InternalError", 500, "We encountered an internal error."))
    err = tune_fails(tmp_path)
    assert type(err) is TransientError and err.exit_code == 1
    assert str(err).startswith(
        f"checkpoint.location: could not reach '{LOCATION}' to check that spotwise can write "
        "checkpoints there (aws: a passing failure of the AWS API (InternalError, HTTP 500) "
        f"while writing .spotwise-probe-"
    )
    assert str(err).endswith("): try again")
    assert err.hint == f"{AGAIN_HINT}; if it lasts, see https://health.aws.amazon.com"
    assert client.puts == 1


def test_a_read_timeout_of_s3_is_not_a_spec_error(tmp_path: Path, s3: Any) -> None:
    from botocore.exceptions import ReadTimeoutError

    s3(ReadTimeoutError(endpoint_url=f"https://{BUCKET}.s3.amazonaws.com/ckpt/probe"))
    root = f"{LOCATION}/j-1"
    with pytest.raises(ProviderError) as info:
        probe_checkpoint_root(root, LOCATION)
    assert type(info.value) is TransientError
    message = str(info.value)
    assert message.startswith(
        f"checkpoint.location: could not reach '{LOCATION}' to check that spotwise can write "
        "checkpoints there (aws: a passing failure of the AWS API (Read timeout on endpoint "
        f'URL: "https://{BUCKET}.s3.amazonaws.com/ckpt/probe") while writing .spotwise-probe-'
    )
    assert message.endswith(f" to {root}): try again")
    assert info.value.hint == f"{AGAIN_HINT}; if it lasts, check this machine's network"


def test_throttled_s3_is_a_throttled_error_naming_the_field(tmp_path: Path, s3: Any) -> None:
    s3(client_error("SlowDown", 503, "Please reduce your request rate."))
    err = tune_fails(tmp_path)
    assert type(err) is ThrottledError and err.exit_code == 1
    assert str(err).startswith(
        f"checkpoint.location: could not reach '{LOCATION}' to check that spotwise can write "
        "checkpoints there (aws: the AWS API is throttling requests (SlowDown) while writing "
    )
    assert str(err).endswith("): try again")
    assert err.hint == AGAIN_HINT


def test_access_denied_is_still_a_spec_error(tmp_path: Path, s3: Any) -> None:
    s3(client_error("AccessDenied", 403, "Access Denied"))
    path = write_job_yaml(tmp_path, preflight_spec(tmp_path, checkpoint={"location": LOCATION}))
    message = tune_refused(tmp_path, path)  # SpecError, exit 2, nothing recorded
    assert message.startswith(
        f"{path}: spec field 'checkpoint.location': spotwise cannot write checkpoints under "
        f"'{LOCATION}' (aws: writing .spotwise-probe-"
    )
    assert "AccessDenied" in message


def test_a_missing_bucket_is_still_a_spec_error_with_its_fix(s3: Any) -> None:
    s3(client_error("NoSuchBucket", 404, "The specified bucket does not exist"))
    with pytest.raises(SpecError) as info:
        probe_checkpoint_root(f"{LOCATION}/j-1", LOCATION)
    assert str(info.value).startswith(
        f"spec field 'checkpoint.location': spotwise cannot write checkpoints under "
        f"'{LOCATION}' (aws: writing .spotwise-probe-"
    )
    assert info.value.hint == f"create it: aws s3 mb s3://{BUCKET}"


def test_the_cli_exits_1_with_one_line_when_s3_cannot_be_reached(tmp_path: Path) -> None:
    """The whole command, against an endpoint where nothing listens: `error:` naming the
    field and the endpoint, a `hint:` line, exit 1 (not 2: the spec is fine)."""
    # a small trace: the job is refused before its market runs, and a subprocess would parse
    # the shipped 181,000-row one again (~2.5 s; its cache is per SPOTWISE_HOME)
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "timestamp,availability_zone,instance_type,spot_available,spot_price_usd_per_hour,"
        "on_demand_price_usd_per_hour\n"
        + "".join(f"2023-03-01 00:{m:02d}:00,us-east-1a,p3.2xlarge,1,1.0,5.0\n" for m in range(60))
    )
    replay = {"trace": str(trace), "speedup": 600}
    spec = preflight_spec(
        tmp_path, checkpoint={"location": LOCATION}, providers=[{"name": "local", "replay": replay}]
    )
    path = write_job_yaml(tmp_path, spec)
    env = {
        **os.environ,
        "SPOTWISE_DB": f"sqlite:///{tmp_path / 'spotwise.db'}",
        "SPOTWISE_HOME": str(tmp_path),
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "AKIAPREFLIGHTFAKE0001",
        "AWS_SECRET_ACCESS_KEY": "preflight-fake-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }
    env.pop("AWS_PROFILE", None)
    res = run_cli("tune", str(path), env=env)
    assert res.returncode == 1, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 2, res.stderr
    assert lines[1] == (
        f"hint: {AGAIN_HINT}; if it lasts, check this machine's network and AWS_ENDPOINT_URL "
        "(http://127.0.0.1:9)"
    )
    assert lines[0].startswith(
        f"error: checkpoint.location: could not reach '{LOCATION}' to check that spotwise can "
        "write checkpoints there (aws: a passing failure of the AWS API (Could not connect to "
        'the endpoint URL: "http://127.0.0.1:9/'
    )
    assert lines[0].endswith("): try again")
    assert "preflight-fake-secret" not in res.stderr
