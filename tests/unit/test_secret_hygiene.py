"""Secrets in a job spec are named, never shown (review-z F3, F6).

* One deny-list of cloud credential variables (``channel.SECRET_ENV``), used by every
  provisioner: AWS refused only its own four names, so an ``AZURE_CLIENT_SECRET`` went into EC2
  user-data. A cloud job naming one in ``env`` is refused before it starts.
* An ``env`` entry that looks like a secret (its name, or a URL with a password) is not refused
  but warned about at `tune`/`resume` time, one line naming the key and never the value.
* A checkpoint location or an ``artifacts`` folder carrying a credential (``key:secret@``, a SAS
  ``?query``, a ``#fragment``) is refused with a line that names the field and does not echo it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spotwise.errors import ProviderError, SpecError
from spotwise.spec import JobSpec, parse_spec

SECRET = "wJalrXUtnFEMI-SECRET"


def _spec(providers: list[dict[str, Any]] | None = None, **changes: Any) -> JobSpec:
    data: dict[str, Any] = {
        "name": "hygiene",
        "command": ["python", "train.py"],
        "metric": {"name": "score"},
        "steps": 2,
        "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
        "providers": providers or [{"name": "local"}],
    }
    data.update(changes)
    return parse_spec(data)


AWS = [{"name": "aws", "regions": ["us-east-1"], "options": {"image": "ami-12c6146b"}}]
S3 = {"location": "s3://spotwise-bucket/ckpt"}


# ---- F3: one deny-list ------------------------------------------------------------------------
def test_the_deny_list_is_one_list_used_by_every_cloud() -> None:
    from spotwise.providers import aws_provisioner, channel

    assert aws_provisioner.SECRET_ENV is channel.SECRET_ENV
    assert {
        "AWS_SECRET_ACCESS_KEY",
        "AZURE_CLIENT_SECRET",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_CONNECTION_STRING",
        "GOOGLE_OAUTH_ACCESS_TOKEN",
    } <= channel.SECRET_ENV
    assert "GOOGLE_APPLICATION_CREDENTIALS" not in channel.SECRET_ENV  # a path, not a secret


@pytest.mark.parametrize("name", ["AZURE_CLIENT_SECRET", "GOOGLE_OAUTH_ACCESS_TOKEN"])
def test_aws_refuses_another_clouds_credential_before_calling_aws(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: AWS's list held only the four AWS_* names, so these went into user-data."""
    from spotwise.providers.aws_provisioner import AwsProvisioner
    from spotwise.providers.base import LaunchRequest, Market, Offer, our_tags
    from spotwise.providers.registry import ProviderConfig

    def no_aws(*_: Any) -> None:
        raise AssertionError("the launch reached AWS")

    monkeypatch.setattr(AwsProvisioner, "_find_launch", no_aws)
    prov = AwsProvisioner(
        ProviderConfig(name="aws", regions=("us-east-1",), options={"image": "ami-12c6146b"})
    )
    offer = Offer("aws", "us-east-1", "us-east-1b", "c5.xlarge", Market.SPOT, 0.08, 0.17)
    env = {"SPOTWISE_ATTEMPT": "0", name: SECRET}
    req = LaunchRequest(offer, ("python", "t.py"), env, our_tags("j-1", "t-1", "l-1"), "l-1")
    with pytest.raises(ProviderError, match="refusing to put") as err:
        prov.launch(req)
    assert name in str(err.value) and SECRET not in str(err.value)


def test_a_cloud_job_naming_a_credential_variable_is_refused_before_it_starts(
    tmp_path: Path,
) -> None:
    from spotwise.planner.preflight import preflight

    spec = _spec(AWS, checkpoint=S3, env={"AZURE_CLIENT_SECRET": SECRET, "A": "1"})
    with pytest.raises(SpecError) as err:
        preflight(spec, SimpleNamespace(), str(tmp_path / "j-1"))  # type: ignore[arg-type]
    msg = str(err.value)
    assert msg.startswith("spec field 'env.AZURE_CLIENT_SECRET': ")
    assert SECRET not in msg and "\n" not in msg and "identity" in msg


# ---- F3: warnings for what looks like a secret --------------------------------------------------
ENV = {
    "HF_TOKEN": "hf_" + SECRET,
    "WANDB_API_KEY": SECRET,
    "DB_PASSWORD": SECRET,
    "DATABASE_URL": f"postgresql://u:{SECRET}@db/x",
    "TOKENIZERS_PARALLELISM": "false",  # "token" inside a word: not a secret
    "MAX_TOKENS": "512",
    "DATA_URL": "https://example.com/data.csv",  # a URL without a password
    "GIT_REMOTE": "ssh://git@github.com/me/repo",  # a user, no password
    "GOOGLE_APPLICATION_CREDENTIALS": "/etc/gcp/key.json",  # where a key is, not the key
    "AZURE_FEDERATED_TOKEN_FILE": "/var/run/token",
}


def test_a_cloud_spec_warns_once_per_secret_looking_entry_naming_only_the_key() -> None:
    from spotwise.planner.preflight import secret_env_warnings

    lines = secret_env_warnings(_spec(AWS, checkpoint=S3, env=ENV))
    keys = ["DATABASE_URL", "DB_PASSWORD", "HF_TOKEN", "WANDB_API_KEY"]
    assert [line.split("'")[1] for line in lines] == [f"env.{k}" for k in keys]
    for line in lines:
        assert SECRET not in line and "\n" not in line
        assert line.startswith("warning: spec field 'env.")
        assert "user-data/metadata" in line and "job's database" in line
        assert "identity" in line and "secret manager" in line
    assert "holds a URL with a password" in lines[0]
    assert "looks like a secret" in lines[2]


def test_an_aws_setup_with_a_password_in_a_url_is_warned_about() -> None:
    """`options.setup` is shell text put in the instance's user-data: a `git clone
    https://user:TOKEN@...` there is as readable as an `env` entry."""
    from spotwise.planner.preflight import secret_env_warnings

    setup = f"git clone https://me:{SECRET}@github.com/me/repo && pip install -e repo"
    aws = [{**AWS[0], "options": {**AWS[0]["options"], "setup": setup}}]
    (line,) = secret_env_warnings(_spec(aws, checkpoint=S3))
    assert line.startswith(
        "warning: spec field 'providers.0.options.setup' holds a URL with a password: it is "
        "readable from the instance's user-data/metadata"
    )
    assert SECRET not in line
    plain = [{**AWS[0], "options": {**AWS[0]["options"], "setup": "pip install torch"}}]
    assert secret_env_warnings(_spec(plain, checkpoint=S3)) == []


def test_a_local_spec_warns_of_the_database_only() -> None:
    from spotwise.planner.preflight import secret_env_warnings

    (line,) = secret_env_warnings(_spec(env={"HF_TOKEN": SECRET, "SEED": "1"}))
    assert line.startswith("warning: spec field 'env.HF_TOKEN' looks like a secret: ")
    assert "job's database" in line and "user-data" not in line and SECRET not in line


def test_preflight_logs_the_warnings_and_lets_the_job_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from spotwise.planner.preflight import preflight

    spec = _spec(env={"HF_TOKEN": SECRET}, checkpoint={"location": str(tmp_path / "ck")})
    backend = SimpleNamespace(catalog=object(), provider="local")
    with caplog.at_level(logging.WARNING):
        preflight(spec, backend, str(tmp_path / "ck" / "j-1"))  # type: ignore[arg-type]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith("warning: spec field 'env.HF_TOKEN' ")
    assert SECRET not in caplog.text


# ---- F6: credentials in a location ------------------------------------------------------------
CARRYING = [
    f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/ck",
    f"s3:/AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/ck",  # pathlib's collapsed form
    f"gs://bucket/ck?access_token={SECRET}",
    f"az://acct/container/ck?sv=2024-01-01&sig={SECRET}",
    f"az://acct/container/ck#{SECRET}",
    f"file://user:{SECRET}@host/ck",
]


@pytest.mark.parametrize("location", CARRYING)
def test_a_checkpoint_location_with_a_credential_is_refused_without_echo(location: str) -> None:
    with pytest.raises(SpecError) as err:
        _spec(checkpoint={"location": location})
    msg = str(err.value)
    assert "spec field 'checkpoint.location': " in msg
    assert SECRET not in msg and "AKIA" not in msg and "\n" not in msg
    assert "standard chain" in msg


@pytest.mark.parametrize(
    ("cloud", "artifacts", "location"),
    [
        ("aws", f"s3://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/events", "s3://bucket/ck"),
        ("azure", f"az://acct/container/events?sv=1&sig={SECRET}", "az://acct/container/ck"),
        ("gcp", f"gs://bucket/events?access_token={SECRET}", "gs://bucket/ck"),
    ],
)
def test_an_artifacts_folder_with_a_credential_is_refused_without_echo(
    cloud: str, artifacts: str, location: str
) -> None:
    from spotwise.providers.channel import artifacts_uri, check_reachable

    with pytest.raises(SpecError) as err:
        check_reachable(cloud, {"artifacts": artifacts}, location, 1)
    msg = str(err.value)
    assert msg.startswith("spec field 'providers.1.options.artifacts': ")
    assert SECRET not in msg and "AKIA" not in msg and "standard chain" in msg
    with pytest.raises(ProviderError) as at_launch:  # and at launch, for a stored spec
        artifacts_uri(cloud, {"artifacts": artifacts}, location, "j-1", "t-1")
    assert SECRET not in str(at_launch.value)


@pytest.mark.parametrize(
    "location",
    [
        "ck@home/run?1#2",  # a plain folder: '@', '?' and '#' are part of its name
        "file:///home/me@work/ck",
        "s3://bucket/runs@2024/ck",  # '@' in the prefix, not the authority
        "az://acct/container/me@x",
    ],
)
def test_locations_without_a_credential_are_accepted(location: str) -> None:
    assert _spec(checkpoint={"location": location}).checkpoint.location == location
