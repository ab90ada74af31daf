"""`spotwise prices` lists one order, table and ``--json`` alike (the offers one can buy now
first, then from cheapest), and a ``--limit`` that cuts the list never hides what the whole
list holds: the footer and the JSON document count every row, the offers with no capacity
included, and say how many were left out.

The local market at its last tick has 18 prices: 9 zones × (spot, on-demand), the spot offer in
us-east-1a with no capacity now."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spotwise import cloud
from spotwise.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    done = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "prices", "--provider", "local", *args],
        env={**base, "COLUMNS": "80", "SPOTWISE_DB": f"sqlite:///{tmp_path / 's.db'}"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def _table_rows(stdout: str) -> list[tuple[str, str]]:
    """(zone, market) of each row of the table, in order."""
    rows = [line.split() for line in stdout.splitlines() if line.startswith("us-")]
    return [(r[0], r[2]) for r in rows]


def test_json_lists_prices_in_the_table_order(tmp_path: Path) -> None:
    doc = json.loads(_cli(tmp_path, "--json").stdout)
    order = [(r["zone"], r["market"]) for r in doc["prices"]]
    assert _table_rows(_cli(tmp_path, "--limit", "0").stdout) == order
    assert len(order) == 18 and order[-1] == ("us-east-1a", "spot")  # no capacity: last
    assert [r["available"] for r in doc["prices"]] == [True] * 17 + [False]
    assert doc["prices"][0]["zone"] == "us-east-2b"  # the cheapest spot offer one can buy
    assert doc["prices"] == sorted(doc["prices"], key=cloud.price_order)


def test_price_order_ties_and_cached_rows() -> None:
    def row(zone: str, price: float, market: str = "spot", **extra: Any) -> dict[str, Any]:
        return {"zone": zone, "instance_type": "p3.2xlarge", "market": market,
                "price_per_hour": price, **extra}  # fmt: skip

    rows = [
        row("a", 0.5, available=False),  # cheapest, but cannot be bought now
        row("b", 3.0, "spot"),
        row("b", 3.0, "on-demand"),
        row("a", 3.0),  # read from the cache: no "available", counts as available
        row("c", 1.0, available=True),
    ]
    got = [
        (r["zone"], r["price_per_hour"], r["market"]) for r in sorted(rows, key=cloud.price_order)
    ]
    assert got == [
        ("c", 1.0, "spot"),
        ("a", 3.0, "spot"),
        ("b", 3.0, "on-demand"),
        ("b", 3.0, "spot"),
        ("a", 0.5, "spot"),
    ]


def test_a_limit_keeps_the_footer_true_about_the_whole_list(tmp_path: Path) -> None:
    done = _cli(tmp_path, "--limit", "3")
    assert len(_table_rows(done.stdout)) == 3
    assert " ".join(done.stdout.split()).endswith(
        "18 prices (15 more not shown; --limit 0 for all) · 1 spot offer has no capacity now "
        "(listed last, not shown)"
    )
    whole = _cli(tmp_path, "--limit", "0")
    assert whole.stdout.splitlines()[-1] == (
        "18 prices · 1 spot offer has no capacity now (listed last)"
    )


def test_json_with_a_limit_says_how_many_were_left_out(tmp_path: Path) -> None:
    full = json.loads(_cli(tmp_path, "--json").stdout)  # no --limit: every row, as before
    assert (len(full["prices"]), full["total"], full["left_out"], full["unavailable"]) == (
        18, 18, 0, 1
    )  # fmt: skip
    cut = json.loads(_cli(tmp_path, "--json", "--limit", "3").stdout)
    assert (len(cut["prices"]), cut["total"], cut["left_out"], cut["unavailable"]) == (3, 18, 15, 1)
    assert cut["prices"] == full["prices"][:3]
    for key in ("provider", "region", "instance_type", "market", "fetched_at", "source",
                "prices", "cached", "market_time"):  # fmt: skip
        assert key in cut, key
    assert cut["cached"] == 18  # the store caches every price, whatever the limit


def test_core_limit_counts_and_refuses_a_negative_limit(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    out = cloud.prices("local", db=db, limit=17)
    assert (len(out["prices"]), out["total"], out["left_out"], out["unavailable"]) == (
        17, 18, 1, 1
    )  # fmt: skip
    assert all(r["available"] for r in out["prices"])
    hist = cloud.prices("local", instance_type="p3.2xlarge", history="1h", db=db, limit=5)
    assert (len(hist["prices"]), hist["total"], hist["left_out"]) == (5, 180, 175)
    whole = cloud.prices("local", instance_type="p3.2xlarge", history="1h", db=db)
    assert hist["prices"] == whole["prices"][-5:]  # a history keeps its latest points
    with pytest.raises(SpecError, match=r"^--limit must be 0 \(all\) or more, got -1$"):
        cloud.prices("local", db=db, limit=-1)


def test_footer_when_a_limit_cuts_some_of_the_offers_with_no_capacity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rich.console import Console

    from spotwise.cli import cloud as cloud_cli

    def price(zone: str, available: bool) -> dict[str, Any]:
        return {"zone": zone, "instance_type": "p3.2xlarge", "market": "spot",
                "price_per_hour": 1.0, "on_demand_price_per_hour": 3.06, "savings": 0.67,
                "gpus": 1, "gpu_name": "V100", "available": available}  # fmt: skip

    rows = [price("a", True), price("b", False), price("c", False)]
    result = cloud._cut({"provider": "local", "region": None, "prices": rows}, 2)
    console = Console(width=200, record=True, color_system=None)
    monkeypatch.setattr(cloud_cli, "_console", lambda: console)
    cloud_cli._print_prices(result)
    assert console.export_text().splitlines()[-1] == (
        "3 prices (1 more not shown; --limit 0 for all) · 2 spot offers have no capacity now "
        "(listed last, 1 not shown)"
    )


def test_the_default_limit_is_the_core_s_40_rows_for_a_table_and_all_for_json(
    tmp_path: Path,
) -> None:
    """No --limit: the core picks the default for the output (the CLI no longer inspects
    whether --limit was typed): the first ``TABLE_LIMIT`` (40) rows of a table, every row of a
    JSON document. The 1 h history has 180 points, so the cut shows."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    assert cloud.TABLE_LIMIT == 40
    args = {"instance_type": "p3.2xlarge", "history": "1h", "db": db}
    table = cloud.prices("local", **args, table=True)
    assert (len(table["prices"]), table["total"], table["left_out"]) == (40, 180, 140)
    doc = cloud.prices("local", **args)
    assert (len(doc["prices"]), doc["left_out"]) == (180, 0)
    assert table["prices"] == doc["prices"][-40:]  # the latest points
    assert len(cloud.prices("local", **args, table=True, limit=0)["prices"]) == 180
    assert len(cloud.prices("local", **args, limit=7)["prices"]) == 7

    history = ("--instance-type", "p3.2xlarge", "--history", "1h")
    shown = _cli(tmp_path, *history).stdout
    assert " ".join(shown.split()).endswith("180 prices (140 earlier not shown; --limit 0 for all)")
    assert len(json.loads(_cli(tmp_path, *history, "--json").stdout)["prices"]) == 180
    cut = json.loads(_cli(tmp_path, *history, "--json", "--limit", "40").stdout)
    assert (len(cut["prices"]), cut["left_out"]) == (40, 140)
