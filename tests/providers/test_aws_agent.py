"""The trial-side agent: user-data format, the IMDSv2 client and notice parsing (against the
emulator's IMDS and against moto's own metadata endpoint)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
from pathlib import Path
from typing import Any

import pytest

from spotwise.providers.aws_agent import (
    INSTANCE_ACTION,
    REBALANCE,
    AgentConfig,
    Imds,
    parse_notice,
    parse_user_data,
    render_user_data,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _config(**kw: Any) -> AgentConfig:
    base: dict[str, Any] = dict(
        job_id="j",
        trial_id="t",
        attempt=2,
        launch_id="l",
        argv=["python", "train.py"],
        env={"SPOTWISE_PARAMS": json.dumps({"lr": 0.1, "name": "it's"})},
        artifacts="s3://b/p/j/t",
        region="us-east-1",
    )
    return AgentConfig(**{**base, **kw})


def test_user_data_round_trips_and_is_a_bash_script() -> None:
    cfg = _config()
    text = render_user_data(cfg, python="/opt/venv/bin/python", setup="pip install spotwise[aws]")
    assert text.startswith("#!/bin/bash\n")
    assert "pip install spotwise[aws]" in text.split("SPOTWISE_AGENT_CONFIG")[0]
    assert "exec /opt/venv/bin/python -m spotwise.providers.aws_agent" in text
    assert parse_user_data(text) == cfg
    with pytest.raises(ValueError, match="does not start the spotwise agent"):
        parse_user_data("#!/bin/bash\necho hello\n")


def test_user_data_is_valid_bash() -> None:
    text = render_user_data(_config(), setup="true")
    res = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True, check=False)
    assert res.returncode == 0, res.stderr


def test_parse_notice() -> None:
    now = time.time()
    body = json.dumps({"action": "terminate", "time": "2030-01-01T00:02:00Z"})
    n = parse_notice(INSTANCE_ACTION, body, now)
    assert n is not None and n["kind"] == "interruption" and n["action"] == "terminate"
    assert n["deadline"] == pytest.approx(1893456120.0)
    r = parse_notice(REBALANCE, json.dumps({"noticeTime": "2030-01-01T00:00:00Z"}), now)
    assert r is not None and r["kind"] == "rebalance" and r["deadline"] is None
    assert parse_notice(INSTANCE_ACTION, "not json", now) is None
    fallback = parse_notice(INSTANCE_ACTION, json.dumps({"action": "stop"}), now)
    assert fallback is not None and fallback["deadline"] == pytest.approx(now + 120)


def test_imds_v2_token_then_get() -> None:
    from ec2_emulator import FakeImds  # tests/fixtures/aws, put on sys.path by conftest

    imds = FakeImds("i-123", "us-east-1a", "c5.xlarge", "spot")
    try:
        client = Imds(imds.url)
        assert client.get("latest/meta-data/instance-id") == "i-123"
        assert client.get(INSTANCE_ACTION) is None  # 404: no notice
        imds.set_interruption(time.time() + 120)
        body = client.get(INSTANCE_ACTION)
        assert body is not None and json.loads(body)["action"] == "terminate"
        client._token = "stale"
        with pytest.raises(urllib.error.HTTPError):  # 401 without a valid token
            client.get(INSTANCE_ACTION)
        assert client.get(INSTANCE_ACTION) is not None  # a new token is fetched
    finally:
        imds.close()


def test_imds_unreachable_raises_oserror() -> None:
    with pytest.raises(OSError):
        Imds("http://127.0.0.1:9", timeout=0.5).get(INSTANCE_ACTION)


def test_imds_base_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTWISE_IMDS_URL", "http://10.1.2.3:8080/")
    assert Imds().base == "http://10.1.2.3:8080"
    monkeypatch.delenv("SPOTWISE_IMDS_URL")
    assert Imds().base == "http://169.254.169.254"


def test_notice_from_motos_own_metadata_endpoint(
    moto_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's server answers IMDS paths too; a notice is one entry in its metadata table."""
    from moto.instance_metadata import responses

    client = Imds(moto_server)
    with pytest.raises(urllib.error.HTTPError):  # moto: 500 for a path it does not know
        client.get(INSTANCE_ACTION)
    body = json.dumps({"action": "terminate", "time": "2030-01-01T00:02:00Z"})
    monkeypatch.setitem(responses.INSTANCE_METADATA, "spot/instance-action", body)
    got = client.get(INSTANCE_ACTION)
    assert got is not None
    notice = parse_notice(INSTANCE_ACTION, got, time.time())
    assert notice is not None and notice["deadline"] == pytest.approx(1893456120.0)


def test_agent_main_needs_a_config(monkeypatch: pytest.MonkeyPatch) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "spotwise.providers.aws_agent"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert res.returncode == 2 and "SPOTWISE_AGENT_CONFIG" in res.stderr


def test_the_agent_relays_the_control_file_and_hands_the_trial_its_path(
    bucket: str, tmp_path: Path
) -> None:
    """``control-<attempt>.json`` in S3 → the trial's local control file, replaced whole, only
    when the object changed (a conditional GET on its ETag); the trial's env names that file."""
    import boto3

    from spotwise.providers.aws_agent import Agent

    s3 = boto3.client("s3", region_name="us-east-1")
    seen = tmp_path / "trial-saw"
    cfg = _config(
        artifacts=f"s3://{bucket}/p/j/t",
        state_dir=str(tmp_path / "instance"),
        # a controller-side path in the launch env must not reach the instance's trial
        env={"SPOTWISE_CONTROL_FILE": "/orchestrator/control-2.json"},
        argv=[
            sys.executable,
            "-c",
            "import os, sys; open(sys.argv[1], 'w').write(os.environ['SPOTWISE_CONTROL_FILE'])",
            str(seen),
        ],
    )
    agent = Agent(cfg, s3=s3, imds=Imds("http://127.0.0.1:9", timeout=0.2))
    local = tmp_path / "instance" / "j" / "t" / "control-2.json"
    assert agent.control_file == local
    agent.start()
    assert agent.proc is not None and agent.proc.wait(60) == 0
    assert seen.read_text() == str(local)

    assert agent.relay_control() is False and not local.exists()  # nothing in S3 yet
    gets: list[dict[str, Any]] = []
    real_get = s3.get_object

    def recording_get(**kw: Any) -> Any:
        gets.append(kw)
        return real_get(**kw)

    s3.get_object = recording_get
    key = "p/j/t/control-2.json"
    s3.put_object(Bucket=bucket, Key=key, Body=b'{"checkpoint_every": 8}')
    assert agent.relay_control() is True
    assert local.read_bytes() == b'{"checkpoint_every": 8}'
    inode = local.stat().st_ino
    assert agent.relay_control() is False  # unchanged in S3: 304, the file is left alone
    assert local.stat().st_ino == inode
    etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]
    assert [g.get("IfNoneMatch") for g in gets] == [None, etag]  # asked only for a change
    s3.put_object(Bucket=bucket, Key=key, Body=b'{"checkpoint_every": 3}')
    assert agent.relay_control() is True
    assert local.read_bytes() == b'{"checkpoint_every": 3}'
    assert sorted(p.name for p in local.parent.iterdir() if "control" in p.name) == [
        "control-2.json"
    ]  # no temp file left behind
