"""`catalog`, `prices` and "did you mean" as review-u found them (findings 9 and 11):
``prices -p aws --on-demand`` refused for credentials blamed "reading spot prices" and gave no
way to the on-demand prices `catalog` shows offline (with no credentials at all it now lists
them: tests/cli/test_prices_on_demand_offline.py); the local catalog said ``provider: local``
above rows that each said ``aws``; ``-r us-eest-1`` suggested ``us-west-1``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import no_aws_account_db
from typer.testing import CliRunner, Result

from spotwise.cli.app import app
from spotwise.errors import NotFoundError, ProviderUnavailable, did_you_mean


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


@pytest.fixture
def no_aws_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """botocore finds no credentials (and never asks the instance metadata service): the
    store's URL."""
    return no_aws_account_db(monkeypatch, tmp_path)


class _Rejected:
    """An AWS client whose every call is refused for its credentials (AuthFailure)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "AuthFailure", "Message": "refused"}}, "Call")

    describe_instance_types = paginate = _refuse

    def get_paginator(self, operation: str) -> _Rejected:
        return self


def test_on_demand_prices_with_rejected_credentials_say_why_and_point_at_catalog(
    no_aws_credentials: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without credentials `prices --on-demand` lists one row per type now
    (tests/cli/test_prices_on_demand_offline.py); credentials AWS rejects still fail, and say
    why spot prices were read and where the on-demand prices are."""
    # spot prices asked for without credentials: the provider's own words, unchanged
    res = _invoke("prices", "--db", no_aws_credentials, "-p", "aws", "-t", "p3.2xlarge", "--spot")
    e = res.exception
    assert isinstance(e, ProviderUnavailable)
    assert e.message == "aws: no credentials for reading spot prices in us-east-1"
    # what the hint below promises: the type's on-demand price, offline, without credentials
    done = _invoke("catalog", "-p", "aws", "--gpu", "V100", "--json")
    assert done.exit_code == 0
    rows = json.loads(done.stdout)["instance_types"]
    assert {r["name"]: r["on_demand_price_per_hour"] for r in rows}["p3.2xlarge"] == 3.06

    from spotwise.providers import aws

    monkeypatch.setattr(aws, "client", lambda *a, **k: _Rejected())
    res = _invoke(
        "prices", "--db", no_aws_credentials, "-p", "aws", "-t", "p3.2xlarge", "--on-demand"
    )
    e = res.exception
    assert isinstance(e, ProviderUnavailable) and e.exit_code == 1
    assert e.message.startswith(
        "aws: credentials rejected while reading spot prices in us-east-1 (AuthFailure) "
        "(`prices --on-demand` lists on-demand prices by zone"
    )
    assert e.hint == (
        "`spotwise catalog -p aws` lists each instance type's on-demand price without "
        "credentials; or spotwise check"
    )


def test_local_catalog_says_whose_market_it_replays() -> None:
    done = _invoke("catalog", "--json")
    assert done.exit_code == 0
    out = json.loads(done.stdout)
    assert (out["provider"], out["replays"]) == ("local", "aws")
    assert {r["provider"] for r in out["instance_types"]} == {out["replays"]}
    table = _invoke("catalog")
    assert "local (replays aws)" in table.stdout
    # a cloud replays nothing
    aws = json.loads(_invoke("catalog", "-p", "aws", "--gpu", "V100", "--json").stdout)
    assert aws["provider"] == "aws" and aws["replays"] is None


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("us-eest-1", "us-east-1"),  # one edit from us-west-1 too: the longer common start wins
        ("us-wast-1", "us-west-1"),
        ("us-esat-1", "us-east-1"),  # two letters swapped, as before
        ("us-wset-1", "us-west-1"),
    ],
)
def test_did_you_mean_prefers_the_region_that_starts_as_typed(typed: str, meant: str) -> None:
    regions = ["us-east-1", "us-east-2", "us-west-1", "us-west-2", "eu-west-1"]
    assert did_you_mean(typed, regions) == f" (did you mean {meant!r}?)"


def test_a_mistyped_aws_region_suggests_us_east_1() -> None:
    res = _invoke("catalog", "-p", "aws", "-r", "us-eest-1")
    e = res.exception
    assert isinstance(e, NotFoundError)
    assert "unknown region 'us-eest-1' (did you mean 'us-east-1'?)" in e.message
