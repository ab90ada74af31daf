"""``prices --json``'s ``source`` and ``savings_pct`` (review-ab F5). ``source`` said ``live``
whatever was read: AWS's on-demand prices without credentials (the 2017 offline catalog, no
call answered), the local replay's trace, GCP's price catalog file. It names the source used
now. ``savings`` stays a fraction (scripts read it); ``savings_pct`` is the same in percent,
as ``report``'s ``saved_pct``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import no_aws_credentials
from typer.testing import CliRunner

from spotwise.cli.app import app
from spotwise.providers.base import Market


def _json(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(app, [*args, "--json"], catch_exceptions=True)
    assert res.exit_code == 0, (res.output, res.exception)
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """No AWS credentials anywhere (the instance metadata service is never asked)."""
    no_aws_credentials(monkeypatch, tmp_path)
    yield f"sqlite:///{tmp_path / 'prices.db'}"


def test_aws_on_demand_without_credentials_is_offline_not_live(db: str) -> None:
    pytest.importorskip("botocore")
    out = _json("prices", "--db", db, "-p", "aws", "-t", "p3.2xlarge", "--on-demand")
    assert (out["source"], out["on_demand_source"], out["zones_known"]) == (
        "offline",
        "offline-2017",
        False,
    )
    assert [(r["zone"], r["price_per_hour"]) for r in out["prices"]] == [("us-east-1", 3.06)]


def test_the_local_replay_is_named_and_its_savings_come_in_percent_too(db: str) -> None:
    out = _json("prices", "--db", db, "-t", "p3.2xlarge", "--spot", "--limit", "1")
    assert out["source"] == "replay"
    row = out["prices"][0]
    # the cheapest p3.2xlarge at the trace's last tick: $1.0331 against $3.06 on demand
    assert (row["price_per_hour"], row["on_demand_price_per_hour"]) == (1.0331, 3.06)
    assert (row["savings"], row["savings_pct"]) == (0.6624, 66.24)
    history = _json("prices", "--db", db, "-t", "p3.2xlarge", "--history", "1h")
    assert history["source"] == "replay"


def test_an_on_demand_row_has_no_saving_in_either_field(db: str) -> None:
    out = _json("prices", "--db", db, "-t", "p3.2xlarge", "--on-demand", "--limit", "1")
    assert (out["prices"][0]["savings"], out["prices"][0]["savings_pct"]) == (None, None)


class _Aws:
    name = "aws"

    def __init__(self, od: str) -> None:
        self.od = od

    def on_demand_source(self, region: str | None = None) -> str:
        return self.od


class _Azure:
    name = "azure"

    def __init__(self, live: set[str]) -> None:
        self.fallback = object()
        self.live = live

    def regions(self) -> list[str]:
        return ["eastus", "westeurope"]

    def prices(self, region: str) -> object:
        return object() if region in self.live else self.fallback


class _Gcp:
    name = "gcp"


@pytest.mark.parametrize(
    ("cat", "region", "market", "source"),
    [
        (_Aws("pricing-api"), "us-east-1", None, "live"),
        (_Aws("offline-2017"), "us-east-1", Market.ON_DEMAND, "offline"),
        (_Aws("offline-2017"), "us-east-1", Market.SPOT, "live"),  # spot prices read from EC2
        (_Aws("offline-2017"), "us-east-1", None, "mixed"),
        (_Azure({"eastus", "westeurope"}), None, None, "live"),
        (_Azure({"eastus"}), "eastus", None, "live"),
        (_Azure({"eastus"}), None, None, "offline"),  # westeurope fell back to the catalog
        (_Gcp(), "us-central1", None, "offline"),  # GCP's prices are a catalog file's
    ],
)
def test_the_source_names_where_the_prices_came_from(
    cat: Any, region: str | None, market: Market | None, source: str
) -> None:
    from spotwise.price_rows import price_source  # new in session 17

    assert price_source(cat, region, market) == source
