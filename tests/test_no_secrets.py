"""Credentials never appear in output, logs, instance user-data, S3 or the database.

Distinctive fake AWS credentials are put in the environment; the CLI is run as a subprocess
against a moto server (with real prices injected), errors included, with and without
``SPOTWISE_DEBUG``; an instance is launched and played by the instance emulator. Then every
byte we can find — stdout, stderr, the SQLite database and its WAL, the agent's log, the
user-data, every S3 object — is grepped for the credentials.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "aws"
KEY_ID = "AKIAZZSECRETKEYID0042"
SECRET = "zZ9/SecretAccessKey+NeverPrintMe/0042xyzXYZ"
TOKEN = "FQoGZXIvYXdzSessionTokenNeverPrintMe0042=="
CREDENTIALS = (KEY_ID, SECRET, TOKEN)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(scope="module")
def moto_url() -> Iterator[tuple[str, str]]:
    """(moto server URL, fake Pricing API URL), prices injected."""
    pytest.importorskip("moto", reason="moto is not installed (spotwise[dev])")
    from moto.server import ThreadedMotoServer

    if str(FIXTURES) not in sys.path:
        sys.path.insert(0, str(FIXTURES))
    from awsfakes import PricingServer, SpotPrices, load_spot_rows

    rows = load_spot_rows(shift_to=time.time() - 60)
    with pytest.MonkeyPatch.context() as mp:
        _fewer_instance_types(mp, {r.instance_type.split(".")[0] for r in rows} | {"g4dn"})
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        reset = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
        urllib.request.urlopen(reset).close()
        patch = SpotPrices(rows).install()
        next(patch)
        with PricingServer() as pricing:
            yield url, pricing.url
        with pytest.raises(StopIteration):
            next(patch)
        server.stop()


def _fewer_instance_types(mp: pytest.MonkeyPatch, families: set[str]) -> None:
    """moto's DescribeInstanceTypes lists only these families' types (50 of its ~1,400): those
    of the injected spot prices, and g4dn (T4 GPUs) for the catalog's --gpu T4. Paging through
    the full list took moto's XML serialiser ~1.5 s a page of 100: the catalog took 7 of the
    test's 24 s, 1.6 s now, its output the same bytes. Nothing here depends on how many types
    there are: what is grepped is every byte the commands write, and the credentials are in
    none of moto's instance types."""
    from moto.ec2.models.instance_types import InstanceTypeBackend

    kept = [
        t for t in InstanceTypeBackend.instance_types if t["InstanceType"].split(".")[0] in families
    ]
    mp.setattr(InstanceTypeBackend, "instance_types", kept)


@pytest.fixture
def env(
    moto_url: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    url, pricing_url = moto_url
    values = {
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_SESSION_TOKEN": TOKEN,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": url,
        "AWS_ENDPOINT_URL_PRICING": pricing_url,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "SPOTWISE_DB": f"sqlite:///{tmp_path / 'spotwise.db'}",
        "SPOTWISE_HOME": str(tmp_path),
        "COLUMNS": "200",
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("SPOTWISE_DEBUG", raising=False)
    return dict(os.environ)


def _cli(env: dict[str, str], *args: str, debug: bool = False) -> tuple[int, str]:
    run_env = {**env, **({"SPOTWISE_DEBUG": "1"} if debug else {})}
    res = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", *args],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return res.returncode, res.stdout + res.stderr


def _leaks(blob: bytes | str, where: str) -> list[str]:
    data = blob.encode() if isinstance(blob, str) else blob
    return [f"{where} contains {c[:8]}…" for c in CREDENTIALS if c.encode() in data]


def test_cli_output_and_database_hold_no_credentials(env: dict[str, str], tmp_path: Path) -> None:
    """Each command is its own `spotwise` process, as a user runs it. They run in two lanes at
    once (each command is seconds of imports and moto calls): the commands that write the
    database (live prices are cached) run one after another in one lane, in this order; the
    other lane's commands write nothing (the catalog, checks, errors). The two that list every
    instance type (moto takes seconds to) come first in one lane and last in the other."""
    from concurrent.futures import ThreadPoolExecutor

    runs = [
        ("check",),
        ("check", "--json"),
        ("check", "-p", "aws"),
        ("prices", "-p", "aws", "-r", "us-east-1", "--json"),
        ("prices", "-p", "aws", "-r", "us-east-1", "--limit", "0"),
        ("prices", "-p", "aws", "-r", "us-east-1", "-t", "m5.4xlarge", "--history", "6h"),
        ("catalog", "-p", "aws", "-r", "us-east-1", "--gpu", "T4", "--json"),
        ("prices", "-p", "aws", "-r", "us-eats-1"),  # an error: one line
        ("prices", "-p", "aws", "-r", "us-east-1", "-t", "m5.xlarg"),
    ]
    debug = len(runs)  # the last run: the error again, with SPOTWISE_DEBUG (a traceback)
    # the three `prices` of us-east-1 (live prices are cached into the database), then the
    # misspelled type | the catalog, the checks, the two region errors
    lanes = [[3, 4, 5, 8], [6, 0, 1, 2, 7, debug]]

    def lane(indexes: list[int]) -> list[tuple[int, int, str]]:
        out = []
        for i in indexes:
            args = runs[7] if i == debug else runs[i]
            out.append((i, *_cli(env, *args, debug=i == debug)))
        return out

    with ThreadPoolExecutor(len(lanes)) as pool:
        done = {i: (code, out) for ran in pool.map(lane, lanes) for i, code, out in ran}
    assert sorted(done) == list(range(len(runs) + 1))
    leaks: list[str] = []
    outputs = []
    for i, args in enumerate(runs):
        code, out = done[i]
        outputs.append((args, code, out))
        leaks += _leaks(out, " ".join(args))
    code, out = done[debug]
    assert code != 0 and "Traceback" in out
    leaks += _leaks(out, "a debug traceback")
    json_run = outputs[3]
    assert json_run[1] == 0 and '"price_per_hour"' in json_run[2], json_run
    assert "did you mean 'us-east-1'" in outputs[7][2]
    assert "123456789012" in outputs[1][2]  # check reached STS with these credentials
    for db in tmp_path.glob("spotwise.db*"):
        leaks += _leaks(db.read_bytes(), db.name)
    assert list(tmp_path.glob("spotwise.db*")), "prices must have cached into the database"
    assert not leaks, leaks


def test_instances_user_data_logs_and_s3_hold_no_credentials(
    env: dict[str, str], tmp_path: Path
) -> None:
    import boto3
    from ec2_emulator import InstanceEmulator

    from spotwise.providers.aws import open_provisioner
    from spotwise.providers.base import LaunchRequest, Market, Offer, our_tags
    from spotwise.providers.registry import ProviderConfig

    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="no-secrets")
    prov = open_provisioner(
        ProviderConfig(
            name="aws",
            regions=("us-east-1",),
            options={"image": "ami-12c6146b", "artifacts": "s3://no-secrets/runs", "poll_s": "0"},
        )
    )
    offer = Offer("aws", "us-east-1", "us-east-1a", "c5.xlarge", Market.SPOT, 0.08, 0.17)
    script = (
        "import json, os\n"
        "open(os.environ['SPOTWISE_EVENTS_FILE'], 'a').write(json.dumps("
        "{'type': 'done', 'step': 1, 'env': sorted(os.environ)}) + '\\n')\n"
    )
    req = LaunchRequest(
        offer,
        (sys.executable, "-c", script),
        {"SPOTWISE_ATTEMPT": "1"},
        our_tags("job-s", "trial-s", "launch-s"),
        "launch-s",
    )
    with InstanceEmulator(env["AWS_ENDPOINT_URL"], tmp_path / "instances") as emu:
        inst = prov.launch(req)
        deadline = time.monotonic() + 60
        while not any(i.exit_code is not None for i in prov.describe()):
            assert time.monotonic() < deadline, emu.errors
            time.sleep(0.2)
        log = emu.log_of(inst.instance_id)
        prov.terminate([inst.instance_id])
    ec2 = boto3.client("ec2", region_name="us-east-1")
    attr = ec2.describe_instance_attribute(InstanceId=inst.instance_id, Attribute="userData")
    user_data = base64.b64decode(attr["UserData"]["Value"])
    leaks = _leaks(user_data, "user-data") + _leaks(log, "the agent log")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="no-secrets").get("Contents", [])]
    assert any(k.endswith("events-1.jsonl") for k in keys)
    for key in keys:
        leaks += _leaks(s3.get_object(Bucket="no-secrets", Key=key)["Body"].read(), key)
    assert not leaks, leaks
    assert "trial exited with 0" in log
    events = s3.get_object(Bucket="no-secrets", Key="runs/job-s/trial-s/events-1.jsonl")
    names = json.loads(events["Body"].read().splitlines()[0])["env"]
    assert "AWS_SECRET_ACCESS_KEY" not in names and "AWS_ACCESS_KEY_ID" not in names
