"""`check`, `catalog` and `prices` through typer's CliRunner on a small app, for the local
provider (replay market) and for AWS on moto with real prices injected."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from spotwise.cli.cloud import register
from spotwise.errors import NotFoundError, SpecError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'spotwise.db'}"
    monkeypatch.setenv("SPOTWISE_DB", url)
    return url


def _run(app: typer.Typer, *args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def _json(app: typer.Typer, *args: str) -> Any:
    res = _run(app, *args, "--json")
    assert res.exit_code == 0, (res.output, res.exception)
    return json.loads(res.stdout)


# ---- AWS on moto -----------------------------------------------------------------------------
def test_aws_prices_sorted_with_on_demand_joined_and_cached(
    app: typer.Typer, db: str, spot_prices: Any, pricing_api: Any
) -> None:
    out = _json(app, "prices", "--provider", "aws", "--region", "us-east-1")
    rows = out["prices"]
    assert out["source"] == "live" and out["on_demand_source"] == "pricing-api"
    assert [r["price_per_hour"] for r in rows] == sorted(r["price_per_hour"] for r in rows)
    spot = [r for r in rows if r["market"] == "spot"]
    c5 = next(r for r in spot if r["instance_type"] == "c5.xlarge" and r["zone"] == "us-east-1d")
    assert c5["price_per_hour"] == pytest.approx(0.0824)
    assert c5["on_demand_price_per_hour"] == pytest.approx(0.17)
    assert c5["savings"] == pytest.approx(1 - 0.0824 / 0.17, abs=1e-4)
    assert {r["market"] for r in rows} == {"spot", "on-demand"}
    assert out["cached"] == len(rows)
    from spotwise.store import Store

    with Store.open(db) as store:
        cached = store.cached_prices("aws", region="us-east-1", market="spot")
    assert len(cached) == len(spot)
    assert all(abs(c.fetched_at - out["fetched_at"]) < 1e-3 for c in cached)


def test_aws_prices_market_and_type_filters(app: typer.Typer, db: str, spot_prices: Any) -> None:
    spot = _json(app, "prices", "-p", "aws", "-r", "us-east-1", "--spot", "-t", "m5.4xlarge")
    assert {r["market"] for r in spot["prices"]} == {"spot"}
    assert {r["instance_type"] for r in spot["prices"]} == {"m5.4xlarge"}
    od = _json(app, "prices", "-p", "aws", "-r", "us-east-1", "--on-demand", "-t", "c4.large")
    assert od["on_demand_source"] == "offline-2017"  # no Pricing API here: moto 404
    assert {(r["market"], r["price_per_hour"]) for r in od["prices"]} == {("on-demand", 0.1)}


def test_aws_price_history(app: typer.Typer, db: str, spot_prices: Any) -> None:
    out = _json(
        app, "prices", "-p", "aws", "-r", "us-east-1", "-t", "m5.4xlarge", "--history", "7h"
    )
    times = [r["observed_at"] for r in out["prices"]]
    assert len(times) == 9 and times == sorted(times)
    assert out["history"]["end"] - out["history"]["start"] == pytest.approx(7 * 3600)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (("-r", "us-eats-1"), NotFoundError, "did you mean 'us-east-1'"),
        (("-r", "us-east-1", "-t", "m5.xlarg"), NotFoundError, "did you mean 'm5.xlarge'"),
        (("-r", "us-east-1", "--history", "6h"), SpecError, "needs --instance-type"),
        (("-r", "us-east-1", "-t", "c4.large", "--history", "six hours"), SpecError, "duration"),
    ],
)
def test_aws_prices_bad_input_is_one_clear_error(
    app: typer.Typer, db: str, spot_prices: Any, args: tuple[str, ...], error: type, match: str
) -> None:
    res = _run(app, "prices", "-p", "aws", *args)
    assert isinstance(res.exception, error)
    assert match in str(res.exception) and "\n" not in str(res.exception)


def test_aws_prices_fall_back_to_the_cache(
    app: typer.Typer, db: str, spot_prices: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = _json(app, "prices", "-p", "aws", "-r", "us-east-1", "--spot")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # AWS unreachable now
    from botocore.config import Config

    from spotwise.providers import aws

    monkeypatch.setattr(
        aws,
        "_config",
        lambda *a, **k: Config(connect_timeout=0.5, read_timeout=0.5, retries={"max_attempts": 1}),
    )
    cached = _json(app, "prices", "-p", "aws", "-r", "us-east-1", "--spot")
    assert cached["source"] == "cache" and "spot prices" in cached["error"]
    assert [(r["zone"], r["instance_type"], r["price_per_hour"]) for r in cached["prices"]] == [
        (r["zone"], r["instance_type"], r["price_per_hour"]) for r in live["prices"]
    ]


def test_aws_catalog_gpu_filter(app: typer.Typer, spot_prices: Any) -> None:
    out = _json(app, "catalog", "-p", "aws", "-r", "us-east-1", "--gpu", "a10g", "--min-vcpus", "8")
    names = {r["name"] for r in out["instance_types"]}
    assert "g5.2xlarge" in names and "g5.xlarge" not in names  # 4 vCPUs
    assert all(r["gpu_name"] == "A10G" and r["vcpus"] >= 8 for r in out["instance_types"])
    res = _run(app, "catalog", "-p", "aws", "-r", "us-east-1", "--gpu", "A10")
    assert isinstance(res.exception, NotFoundError) and "did you mean" in str(res.exception)


def test_aws_check_names_the_source_and_account_never_the_key(
    app: typer.Typer, aws_env: str
) -> None:
    from awsfakes import FAKE_KEY_ID, FAKE_SECRET

    res = _run(app, "check", "--provider", "aws", "--json")
    assert res.exit_code == 0, res.output
    (aws,) = json.loads(res.stdout)["providers"]
    assert aws["usable"] and aws["details"]["account"] == "123456789012"
    assert aws["details"]["credentials"] == "env"
    table = _run(app, "check", "--provider", "aws")
    for text in (res.output, table.output):
        assert FAKE_KEY_ID not in text and FAKE_SECRET not in text


def test_aws_check_without_credentials(
    app: typer.Typer, aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    res = _run(app, "check", "--provider", "aws", "--json")
    assert res.exit_code == 1
    (aws,) = json.loads(res.stdout)["providers"]
    assert not aws["usable"] and "no AWS credentials" in aws["reason"]


# ---- local (the replay market) ------------------------------------------------------------------
def test_local_prices_and_catalog(app: typer.Typer, db: str) -> None:
    out = _json(app, "prices")
    rows = out["prices"]
    # offers you can buy now first, each part from cheapest (the table's order)
    assert rows and rows == sorted(rows, key=lambda r: (not r["available"], r["price_per_hour"]))
    assert {r["provider"] for r in rows} == {"local"}  # cached apart from real AWS prices
    assert all(r["on_demand_price_per_hour"] == 3.06 for r in rows)
    assert out["market_time"] < time.time() - 86400 * 365  # a 2023 trace
    cat = _json(app, "catalog", "--gpu", "V100")
    assert {r["name"] for r in cat["instance_types"]} == {"p3.2xlarge"}
    res = _run(app, "catalog", "--gpu", "V10")
    assert isinstance(res.exception, NotFoundError) and "did you mean 'V100'" in str(res.exception)
    res = _run(app, "prices", "-r", "us-east-3")
    assert isinstance(res.exception, NotFoundError) and "did you mean" in str(res.exception)


def test_local_history_and_tables(app: typer.Typer, db: str) -> None:
    hist = _json(app, "prices", "-t", "p3.2xlarge", "--history", "1h", "-r", "us-west-2")
    assert hist["prices"] and {r["region"] for r in hist["prices"]} == {"us-west-2"}
    for args in (
        ("prices", "--limit", "3"),
        ("catalog",),
        ("check", "-p", "local"),
        ("prices", "-t", "p3.2xlarge", "--history", "30m"),
    ):
        res = _run(app, *args)
        assert res.exit_code == 0, (args, res.output, res.exception)
        assert res.output.strip()
