"""The cloud examples with no account (review-ab F6): `tune examples/digits/job-aws.yaml`
exits 1, refused before anything is recorded, a case the documented exit codes did not name;
and AWS's one line led with the instance type ("cannot check instance type 'm5.xlarge' … EC2
cannot be reached …") when the cause was that no credentials were found. It leads with that
cause and its fix now, on one line and with no credential in it."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_helpers import no_aws_credentials
from typer.testing import CliRunner

from spotwise.cli.app import app
from spotwise.errors import ProviderUnavailable
from spotwise.providers.aws_catalog import AwsCatalog
from spotwise.providers.registry import ProviderConfig

pytest.importorskip("botocore")

ROOT = Path(__file__).resolve().parents[2]
LEAD = (
    "aws: no AWS credentials found: configure them through the standard chain (AWS_PROFILE, "
    "`aws configure`, SSO or an instance role); without them EC2 cannot check instance type "
    "'m5.xlarge' in us-east-1, which the offline catalog (2017) does not list"
)
KEY_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example id, set without its secret


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    no_aws_credentials(monkeypatch, tmp_path)
    return f"sqlite:///{tmp_path / 'spotwise.db'}"


def _catalog() -> AwsCatalog:
    return AwsCatalog(ProviderConfig(name="aws", regions=("us-east-1",)))


def test_no_credentials_lead_the_refusal_with_their_fix(no_credentials: str) -> None:
    with pytest.raises(ProviderUnavailable) as e:
        _catalog().check_instance_type("m5.xlarge", "us-east-1")
    assert e.value.message == LEAD
    assert e.value.hint == "`spotwise check` then says which credentials AWS finds"
    assert e.value.exit_code == 1


def test_partial_credentials_are_never_printed(
    no_credentials: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)  # no secret: botocore's partial credentials
    with pytest.raises(ProviderUnavailable) as e:
        _catalog().check_instance_type("m5.xlarge", "us-east-1")
    assert e.value.message == LEAD
    assert KEY_ID not in e.value.message + (e.value.hint or "")


def test_the_aws_example_is_refused_in_one_line_exit_1_nothing_recorded(
    no_credentials: str,
) -> None:
    spec = ROOT / "examples" / "digits" / "job-aws.yaml"
    res = CliRunner().invoke(app, ["tune", str(spec), "--db", no_credentials])
    e = res.exception
    assert isinstance(e, ProviderUnavailable) and e.exit_code == 1
    assert e.message == LEAD and "\n" not in e.message
    listed = CliRunner().invoke(app, ["status", "--db", no_credentials, "--json"])
    # no job: no database at all (exit 3), or one without a job
    assert listed.exit_code == 3 or '"jobs": []' in listed.stdout


def test_tune_help_names_the_refusal_at_the_start() -> None:
    res = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "200"})
    text = " ".join(res.stdout.split())
    assert (
        "1 when a provider cannot be used at the start (e.g. no cloud account or credentials: "
        "refused with one line before anything is recorded), when every trial failed" in text
    )
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (
        "1 when a provider cannot be used at the start (e.g. the cloud examples with no account "
        "or credentials: refused in one line, with a hint, before anything is recorded)" in readme
    )
