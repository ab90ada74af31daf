"""Fixtures for the provider tests: a moto server in this process, fake credentials, real price
fixtures injected into it, a fake Pricing API, an S3 bucket, and the EC2 instance emulator.

moto the way moto means it: fake credentials, clients created after the server starts,
``ThreadedMotoServer(port=0)`` so agent subprocesses can reach the same state, and
``POST /moto-api/reset`` between tests.
"""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "aws"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

from awsfakes import FAKE_KEY_ID, FAKE_SECRET  # noqa: E402 (needs the path above)

BUCKET = "spotwise-test-bucket"


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """URL of a moto server running in this process (shared by the session)."""
    pytest.importorskip("moto", reason="moto is not installed (spotwise[dev])")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def no_pricing_api() -> Iterator[str]:
    """An endpoint that answers the Pricing API with 404, as moto does."""
    from awsfakes import PricingServer

    with PricingServer(implemented=False) as server:
        yield server.url


@pytest.fixture
def aws_env(
    moto_server: str, no_pricing_api: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[str]:
    """Fake credentials and every AWS client pointed at a freshly reset moto server (the
    Pricing API, which moto lacks, answers 404: the catalog falls back to its offline prices)."""
    for var in (
        "AWS_PROFILE",
        "AWS_REGION",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_ENDPOINT_URL_EC2",
        "AWS_ENDPOINT_URL_S3",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", no_pricing_api)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    req = urllib.request.Request(f"{moto_server}/moto-api/reset", method="POST")
    urllib.request.urlopen(req, timeout=60).close()  # over 10 s seen under load
    yield moto_server


@pytest.fixture
def spot_prices(aws_env: str) -> Iterator[Any]:
    """Real spot prices served by moto, shifted so the slice ends a minute ago."""
    from awsfakes import SpotPrices, load_spot_rows

    fake = SpotPrices(load_spot_rows(shift_to=time.time() - 60))
    gen = fake.install()
    next(gen)
    yield fake
    with pytest.raises(StopIteration):
        next(gen)


@pytest.fixture
def pricing_api(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A Pricing API (GetProducts) with real us-east-1 on-demand prices."""
    from awsfakes import PricingServer

    with PricingServer() as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", server.url)
        yield server


@pytest.fixture
def bucket(aws_env: str) -> str:
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    return BUCKET


@pytest.fixture
def emulator(aws_env: str, tmp_path: Path) -> Iterator[Any]:
    """The EC2 instance emulator: runs the agent of every tagged instance moto 'starts'."""
    from ec2_emulator import InstanceEmulator

    with InstanceEmulator(aws_env, tmp_path / "instances", kill_grace_s=5.0) as emu:
        yield emu
