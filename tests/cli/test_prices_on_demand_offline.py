"""``spotwise prices -p aws --on-demand`` without AWS credentials: on-demand prices come from
the offline catalog, yet the command needed credentials, for it read spot prices to learn which
zones sell each type. With no credentials found it now lists one row per instance type, its
zone the region, and says so (``zones_known: false`` and a ``note``); any other failure to read
spot prices, and spot prices asked for without credentials, still fail; with credentials the
rows are per zone, as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import no_aws_credentials
from typer.testing import CliRunner, Result

from spotwise.cli.app import app
from spotwise.errors import ProviderUnavailable, TransientError
from spotwise.providers import aws
from spotwise.providers.aws_catalog import AwsCatalog
from spotwise.providers.aws_offline import offline_prices
from spotwise.providers.base import Market
from spotwise.providers.registry import ProviderConfig

pytest.importorskip("botocore")


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def _json(*args: str) -> dict[str, Any]:
    res = _invoke(*args, "--json")
    assert res.exit_code == 0, (res.output, res.exception)
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _cached(db: str) -> int:
    from spotwise.store import Store

    with Store.open(db) as store:
        return len(store.cached_prices("aws", region="us-east-1", max_age_s=3600.0))


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """No AWS credentials anywhere (botocore never asks the instance metadata service), no
    listing cached by an earlier test, and a store of its own."""
    no_aws_credentials(monkeypatch, tmp_path)
    yield f"sqlite:///{tmp_path / 'prices.db'}"


def test_on_demand_prices_without_credentials_are_one_row_per_type(db: str) -> None:
    out = _json("prices", "--db", db, "-p", "aws", "-t", "p3.2xlarge", "--on-demand")
    assert out["prices"] == [
        {
            "provider": "aws",
            "region": "us-east-1",
            "zone": "us-east-1",  # the region: which zones sell it is unknown
            "instance_type": "p3.2xlarge",
            "market": "on-demand",
            "price_per_hour": 3.06,
            "on_demand_price_per_hour": 3.06,
            "savings": None,
            "savings_pct": None,
            "vcpus": 8,
            "memory_gb": 61.0,
            "gpus": 1,
            "gpu_name": "V100",
            "available": True,
            "observed_at": None,  # an offline catalog's price: not seen now (review-am F13)
        }
    ]
    assert (out["source"], out["on_demand_source"], out["zones_known"]) == (
        "offline",  # review-ab F5: it said "live" with nothing read live
        "offline-2017",
        False,
    )
    assert out["note"] == (
        "no aws credentials to read which zones sell each type: one row per instance type, "
        "its zone the region"
    )
    assert out["cached"] == 0 and _cached(db) == 0  # never mixed with per-zone rows


def test_every_type_of_the_offline_catalog_once_and_the_table_says_so(db: str) -> None:
    out = _json("prices", "--db", db, "-p", "aws", "--on-demand", "--limit", "0")
    offline = offline_prices("us-east-1")
    assert out["total"] == len(offline) == len(out["prices"])
    assert {r["instance_type"]: r["price_per_hour"] for r in out["prices"]} == offline
    assert {(r["zone"], r["market"]) for r in out["prices"]} == {("us-east-1", "on-demand")}
    assert [r["price_per_hour"] for r in out["prices"]] == sorted(offline.values())

    table = _invoke("prices", "--db", db, "-p", "aws", "-t", "p3.2xlarge", "--on-demand")
    assert table.exit_code == 0, table.output
    text = " ".join(table.stdout.split())  # the caption wraps at the terminal's width
    assert "aws us-east-1 prices (zones unknown)" in text
    assert "1 price · on-demand prices: offline-2017 · no aws credentials to read" in text
    assert "us-east-1 p3.2xlarge on-demand $3.0600 $3.0600" in text


@pytest.mark.parametrize("spot", [[], ["--spot"]])
def test_spot_prices_without_credentials_still_fail(db: str, spot: list[str]) -> None:
    res = _invoke("prices", "--db", db, "-p", "aws", "-t", "p3.2xlarge", *spot)
    e = res.exception
    assert isinstance(e, ProviderUnavailable) and res.exit_code == 1
    assert e.message == "aws: no credentials for reading spot prices in us-east-1"


def test_the_catalog_falls_back_only_for_on_demand_offers(db: str) -> None:
    cat = AwsCatalog(ProviderConfig(name="aws"))
    assert cat.zones_known("us-east-1")  # nothing read yet
    offers = cat.offers("us-east-1", ["p3.2xlarge", "c4.large"], Market.ON_DEMAND)
    assert [(o.zone, o.instance_type, o.price_per_hour) for o in offers] == [
        ("us-east-1", "c4.large", 0.1),
        ("us-east-1", "p3.2xlarge", 3.06),
    ]
    assert not cat.zones_known("us-east-1")
    with pytest.raises(ProviderUnavailable, match="no credentials for reading spot prices"):
        cat.offers("us-east-1", ["p3.2xlarge"])  # both markets: spot prices are needed
    with pytest.raises(ProviderUnavailable, match="no credentials for reading spot prices"):
        cat.offers("us-east-1", ["p3.2xlarge"], Market.SPOT)


# ---- with credentials (or errors other than none found): an EC2 client stand-in ----------------
def _client_error(code: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": code}}, "Call")


class _Pages:
    def __init__(self, answer: list[dict[str, Any]] | Exception) -> None:
        self.answer = answer

    def paginate(self, **kw: Any) -> Iterator[dict[str, Any]]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return iter(self.answer)


class _Ec2:
    """EC2 with credentials: spot prices of p3.2xlarge in us-east-1a and us-east-1b, offered in
    us-east-1c too (``spot`` an exception: DescribeSpotPriceHistory fails with it); the Pricing
    API and DescribeInstanceTypes are denied (offline prices and hardware)."""

    def __init__(self, spot: Exception | None = None) -> None:
        rows = [
            {
                "AvailabilityZone": zone,
                "InstanceType": "p3.2xlarge",
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": price,
                "Timestamp": "2026-01-01T00:00:00Z",
            }
            for zone, price in (("us-east-1a", "0.9"), ("us-east-1b", "1.1"))
        ]
        self.spot = spot or [{"SpotPriceHistory": rows}]

    def get_paginator(self, name: str) -> _Pages:
        if name == "describe_spot_price_history":
            return _Pages(self.spot)
        if name == "describe_instance_type_offerings":
            offered = [{"InstanceType": "p3.2xlarge", "Location": "us-east-1c"}]
            return _Pages([{"InstanceTypeOfferings": offered}])
        return _Pages(_client_error("UnauthorizedOperation"))

    def describe_instance_types(self, **kw: Any) -> Any:
        raise _client_error("UnauthorizedOperation")


def _ec2(monkeypatch: pytest.MonkeyPatch, spot: Exception | None = None) -> None:
    fake = _Ec2(spot)
    monkeypatch.setattr(aws, "client", lambda *a, **k: fake)


def test_with_credentials_on_demand_rows_are_per_zone_as_before(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ec2(monkeypatch)
    out = _json("prices", "--db", db, "-p", "aws", "-t", "p3.2xlarge", "--on-demand")
    assert [(r["zone"], r["price_per_hour"]) for r in out["prices"]] == [
        ("us-east-1a", 3.06),
        ("us-east-1b", 3.06),
        ("us-east-1c", 3.06),
    ]
    assert out["zones_known"] is True and "note" not in out
    assert out["cached"] == 0 == _cached(db)  # the 2017 catalog's prices: not cached as seen now


def test_other_failures_to_read_spot_prices_still_fail_on_demand(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.exceptions import EndpointConnectionError

    _ec2(monkeypatch, EndpointConnectionError(endpoint_url="https://ec2.us-east-1.amazonaws.com"))
    res = _invoke("prices", "--db", db, "-p", "aws", "-t", "p3.2xlarge", "--on-demand")
    e = res.exception
    assert isinstance(e, TransientError) and res.exit_code == 1
    assert "while reading spot prices in us-east-1" in e.message
