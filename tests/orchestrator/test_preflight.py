"""Spec errors only the opened market shows are refused before the job is recorded or anything
is bought (:mod:`spotwise.planner.preflight`): exit 2, one line, no job row, no instance.

The AWS cases run against a moto server in this process (fake credentials, clients pointed at
it through ``AWS_ENDPOINT_URL``), as ``tests/providers`` does."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import preflight_spec, tune_cli_refused, tune_refused, write_job_yaml

from spotwise.errors import SpecError
from spotwise.planner.checkpoint_probe import PROBE_PREFIX, probe_checkpoint_root
from spotwise.store import Store

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BUCKET = "spotwise-preflight"
AMI = "ami-12c6146b"  # an image moto knows


def refused(tmp_path: Path, spec: dict[str, Any]) -> str:
    """Run `tune` (the core call) on ``spec``; the SpecError's message without the spec's path
    that the preflight's start with (as load_spec's do), once checked that it is one line and
    that nothing was recorded or bought (``shared_helpers``)."""
    path = write_job_yaml(tmp_path, spec)
    return tune_refused(tmp_path, path).removeprefix(f"{path}: ")


# ---- a checkpoint location the orchestrator cannot write ----------------------------------------
def test_a_checkpoint_location_through_a_file_is_refused_before_the_job_starts(
    tmp_path: Path,
) -> None:
    (tmp_path / "afile").write_text("not a folder\n")
    spec = preflight_spec(tmp_path, checkpoint={"every": 2, "location": "afile/ckpts"})
    message = refused(tmp_path, spec)
    assert message == (
        "spec field 'checkpoint.location': spotwise cannot write checkpoints under "
        f"'afile/ckpts' ({tmp_path / 'afile'}: Not a directory)"
    )
    assert (tmp_path / "afile").read_text() == "not a folder\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_checkpoint_folder_is_refused_before_the_job_starts(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        message = refused(tmp_path, preflight_spec(tmp_path, checkpoint={"location": "ro"}))
    finally:
        ro.chmod(0o755)
    assert message.startswith(
        "spec field 'checkpoint.location': spotwise cannot write checkpoints under 'ro' ("
    )
    assert message.endswith(": Permission denied)")
    assert list(ro.iterdir()) == []


def test_the_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    """A writable location: the probe object is deleted and the folders it had to create are
    removed again; a folder that was there stays, with what it held."""
    probe_checkpoint_root(str(tmp_path / "new" / "deeper" / "j-1"), "new/deeper")
    assert list(tmp_path.iterdir()) == []
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "old.txt").write_text("x")
    probe_checkpoint_root(str(kept / "j-2"))
    assert [p.name for p in kept.iterdir()] == ["old.txt"]


def test_the_probe_of_a_path_through_a_file_says_why(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    with pytest.raises(SpecError) as info:
        probe_checkpoint_root(str(tmp_path / "afile"), "afile")
    assert str(info.value) == (
        "spec field 'checkpoint.location': spotwise cannot write checkpoints under 'afile' "
        f"(checkpoint location {tmp_path / 'afile'} exists and is not a folder)"
    )
    assert not any(p.name.startswith(PROBE_PREFIX) for p in tmp_path.iterdir())


# ---- AWS on moto --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    pytest.importorskip("moto", reason="moto is not installed (spotwise[dev])")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """Fake credentials, every AWS client on a freshly reset moto, one bucket; yields an EC2
    client to count instances with."""
    for var in ("AWS_PROFILE", "AWS_REGION", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", "http://127.0.0.1:9")  # none: offline prices
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPREFLIGHTFAKE0001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "preflight-fake-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    req = urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=60).close()
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    yield ec2
    assert ec2.describe_instances()["Reservations"] == []  # nothing was ever launched


def aws_spec(tmp_path: Path, **provider: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "name": "aws",
        "regions": ["us-east-1"],
        "instance_types": ["c5.xlarge", "m5.xlarge"],
        "options": {"image": AMI, "pricing": "offline"},
        **provider,
    }
    return preflight_spec(
        tmp_path, providers=[p], checkpoint={"every": 2, "location": f"s3://{BUCKET}/ckpt"}
    )


def test_aws_unknown_instance_type_is_a_spec_error_before_the_job_starts(
    tmp_path: Path, aws: Any
) -> None:
    spec = aws_spec(tmp_path, instance_types=["c5.xlarge", "m5.xlarg"])
    assert refused(tmp_path, spec) == (
        "spec field 'providers.0.instance_types.1': aws: unknown instance type 'm5.xlarg' "
        "(did you mean 'm5.xlarge'?) in us-east-1"
    )


def test_a_cloud_checkpoint_location_its_instances_cannot_reach_is_a_spec_error(
    tmp_path: Path, aws: Any
) -> None:
    """It named the field but exited 1, unlike every other spec error (exit 2)."""
    spec = aws_spec(tmp_path)
    spec["checkpoint"] = {"every": 2, "location": "checkpoints"}
    assert refused(tmp_path, spec).startswith(
        "spec field 'checkpoint.location': aws: the trial's checkpoint location 'checkpoints' "
        "is not in S3"
    )
    spec = aws_spec(tmp_path, options={"image": AMI, "pricing": "offline", "artifacts": "/x"})
    assert refused(tmp_path, spec).startswith(
        "spec field 'providers.0.options.artifacts': aws: providers[].options.artifacts '/x' "
    )


def test_aws_unknown_region_is_a_spec_error_before_the_job_starts(tmp_path: Path, aws: Any) -> None:
    spec = aws_spec(tmp_path, regions=["us-east-1", "us-eats-1"])
    assert refused(tmp_path, spec) == (
        "spec field 'providers.0.regions.1': aws: unknown region 'us-eats-1' "
        "(did you mean 'us-east-1'?)"
    )


def test_aws_zone_with_no_offer_is_a_spec_error_before_the_job_starts(
    tmp_path: Path, aws: Any
) -> None:
    """A zone that sells none of the job's types: no offer at all. Before, the job was
    recorded and polled for ever; now it is refused, naming what the region does offer."""
    spec = aws_spec(tmp_path, zones=["us-east-1z"])
    assert refused(tmp_path, spec) == (
        "spec field 'providers.0': no aws offer matches its filters (regions: us-east-1; "
        "zones: us-east-1z; instance_types: c5.xlarge, m5.xlarge; markets: spot, on-demand); "
        "aws offers c5.xlarge, m5.xlarge in zones us-east-1a, us-east-1b, us-east-1c, "
        "us-east-1d, us-east-1f"
    )


def test_aws_without_an_image_is_a_spec_error_before_the_job_starts(
    tmp_path: Path, aws: Any
) -> None:
    spec = aws_spec(tmp_path, options={"instance_profile": "spotwise-trial"})
    assert refused(tmp_path, spec) == (
        "spec field 'providers.0.options.image': required to launch on aws; add `image: "
        "ami-0123456789abcdef0 (or resolve:ssm:<parameter>; its Python must run spotwise)` "
        "under the aws provider's options"
    )


def test_aws_missing_bucket_is_a_spec_error_before_any_instance_is_bought(
    tmp_path: Path, aws: Any
) -> None:
    spec = aws_spec(tmp_path)
    spec["checkpoint"] = {"every": 2, "location": "s3://no-such-bucket-preflight/ckpt"}
    message = refused(tmp_path, spec)
    assert message.startswith(
        "spec field 'checkpoint.location': spotwise cannot write checkpoints under "
        "'s3://no-such-bucket-preflight/ckpt' (aws: "
    )
    assert "NoSuchBucket" in message and "preflight-fake-secret" not in message


def test_the_probe_writes_with_the_aws_profile_option(
    tmp_path: Path, aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials only in the `work` profile that the spec names: the probe used the default
    chain and refused a job whose orchestrator can write there."""
    from spotwise.planner.checkpoint_probe import probe_checkpoint_root

    (tmp_path / "credentials").write_text(
        "[work]\naws_access_key_id = AKIAPREFLIGHTWORK001\naws_secret_access_key = work-fake\n"
    )
    (tmp_path / "config").write_text("[profile work]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    root = f"s3://{BUCKET}/ckpt/j-1"
    with pytest.raises(SpecError, match="no credentials"):
        probe_checkpoint_root(root, f"s3://{BUCKET}/ckpt")  # the default chain has none
    probe_checkpoint_root(root, f"s3://{BUCKET}/ckpt", aws_profile="work")
    import boto3

    s3 = boto3.Session(profile_name="work").client("s3", region_name="us-east-1")
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0  # the probe is gone


def test_tune_cli_exits_2_with_one_line_for_an_unknown_aws_instance_type(
    tmp_path: Path, aws: Any
) -> None:
    """The whole command: exit 2, `error:` and at most a `hint:` line, no job recorded."""
    path = write_job_yaml(tmp_path, aws_spec(tmp_path, instance_types=["c5.xlarg"]))
    lines = tune_cli_refused(tmp_path, path)  # exit 2, `error:` and at most a `hint:` line
    assert lines[0] == (
        f"error: {path}: spec field 'providers.0.instance_types.0': aws: unknown instance type "
        "'c5.xlarg' (did you mean 'c5.xlarge'?) in us-east-1"
    )
    with Store.open(f"sqlite:///{tmp_path / 'spotwise.db'}") as store:
        assert store.list_jobs() == []


def test_a_job_preflight_refuses_never_imports_the_search(tmp_path: Path) -> None:
    """scikit-optimize takes seconds to import: the search is built once the market is open
    and checked, so a refused job does not wait for it (a replayed market's clock starts
    after it instead)."""
    import subprocess
    import sys

    (tmp_path / "afile").write_text("not a folder\n")
    spec = preflight_spec(tmp_path, checkpoint={"every": 2, "location": "afile/ckpts"})
    path = write_job_yaml(tmp_path, spec)
    db = f"sqlite:///{tmp_path / 's.db'}"
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "from spotwise import jobs\n"
        "from spotwise.errors import SpecError\n"
        f"try:\n    jobs.tune(Path({str(path)!r}), db={db!r}, run_root=Path({str(tmp_path)!r}))\n"
        "except SpecError as e:\n    print('refused', 'skopt' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "refused False", done.stderr


@pytest.mark.parametrize("cap", [None, 5.0])
def test_a_cloud_job_without_a_cost_cap_is_warned_once_its_preflight_passed(
    tmp_path: Path, aws: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    cap: float | None,
) -> None:  # fmt: skip
    """review-ak M6: nothing capped a cloud job's spend without budget.max_cost_usd, and tune
    said nothing. The warning comes once the spec passed the preflight (a refused spec gets
    its one error line alone: the unknown-instance-type test above), before anything runs."""
    import logging

    from spotwise import jobs
    from spotwise.planner import orchestrator

    class Stop(Exception):
        pass

    def stop(*args: Any, **kwargs: Any) -> None:
        raise Stop  # the search is built right after the preflight: go no further

    monkeypatch.setattr(orchestrator, "Search", stop)
    spec = aws_spec(tmp_path)
    if cap is not None:
        spec["budget"] = {"max_cost_usd": cap}
    with caplog.at_level(logging.WARNING), pytest.raises(Stop):
        jobs.tune(write_job_yaml(tmp_path, spec), db=f"sqlite:///{tmp_path / 's.db'}")
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == (
        []
        if cap
        else [
            "the spec sets no budget.max_cost_usd: nothing caps what this job spends on aws; "
            "add budget: {max_cost_usd: N} to stop it at N dollars"
        ]
    )
