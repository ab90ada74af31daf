"""A price of 0, below 0 or NaN is never offered nor billed (review-an F1).

The GCP catalog CSV (also Azure's fallback) took ``float()`` of any cell: a row priced 0 (or
-1, or NaN) was offered cheapest-first and every life on it billed at that price, past the
budget. A user's catalog file with such a price is refused (file, line, column, the fix); a
refresh from SkyPilot's ``vms.csv`` drops such prices and says how many; and the planner's
offer filter leaves out any offer whose price the bill cannot use, whatever the provider."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from spotwise.errors import ConfigError
from spotwise.planner.backend import _filter
from spotwise.providers import azure, gcp, gcp_prices
from spotwise.providers.base import Market, Offer
from spotwise.providers.registry import ProviderConfig
from spotwise.spec import ProviderSpec

HEADER = ",".join(gcp_prices.COLUMNS) + "\n"
GOOD = "e2-standard-4,us-central1,,4,16,0,,0.13402,0.04021,2026-01-01,mine\n"


def _catalog(tmp_path: Path, *rows: str) -> Path:
    path = tmp_path / "prices.csv"
    path.write_text(HEADER + GOOD + "".join(rows), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("row", "column", "got"),
    [
        (
            "e2-standard-16,us-central1,,16,64,0,,0.53609,0.00000,2026-01-01,mine\n",
            "spot",
            "0.00000",
        ),
        ("n2-standard-8,us-central1,,8,32,0,,nan,nan,2026-01-01,mine\n", "on_demand", "nan"),
        ("n2-standard-4,us-central1,,4,16,0,,-1,-0.5,2026-01-01,mine\n", "on_demand", "-1"),
        ("n2-standard-4,us-central1,,4,16,0,,0.2,-0.5,2026-01-01,mine\n", "spot", "-0.5"),
        ("n2-standard-4,us-central1,,4,16,0,,inf,,2026-01-01,mine\n", "on_demand", "inf"),
        ("n2-standard-4,us-central1,,4,16,0,,0,,2026-01-01,mine\n", "on_demand", "0"),
    ],
)
def test_a_user_catalog_with_a_price_not_above_zero_is_refused(
    tmp_path: Path, row: str, column: str, got: str
) -> None:
    path = _catalog(tmp_path, row)
    with pytest.raises(ConfigError) as e:
        gcp.open_catalog(
            ProviderConfig(
                "gcp", regions=("us-central1",), options={"offline": "true", "prices": str(path)}
            )
        )
    assert e.value.message == (
        f"price catalog {path} line 3: column {column} must be a positive number of USD/h, "
        f"got {got!r}"
    )
    assert "\n" not in e.value.message and e.value.exit_code == 2
    assert e.value.hint is not None and f"correct or remove that row of {path}" in e.value.hint
    # the same file as Azure's fallback catalog: the same refusal
    with pytest.raises(ConfigError, match="line 3: column"):
        azure.open_catalog(
            ProviderConfig(
                "azure", options={"subscription_id": "s", "offline": "true", "prices": str(path)}
            )
        )


def test_an_empty_spot_price_stays_no_spot(tmp_path: Path) -> None:
    path = _catalog(tmp_path, "n2-standard-4,us-central1,,4,16,0,,0.19436,,2026-01-01,mine\n")
    table = gcp_prices.load(path)
    row = table.lookup("n2-standard-4", "us-central1")
    assert row is not None and (row.on_demand, row.spot) == (0.19436, None)
    offers = gcp.open_catalog(
        ProviderConfig(
            "gcp",
            regions=("us-central1",),
            zones=("us-central1-a",),
            options={"offline": "true", "prices": str(path)},
        )
    ).offers()
    assert sorted((o.instance_type, o.market.value, o.price_per_hour) for o in offers) == [
        ("e2-standard-4", "on-demand", 0.13402),
        ("e2-standard-4", "spot", 0.04021),
        ("n2-standard-4", "on-demand", 0.19436),
    ]


# ---- SkyPilot's vms.csv --------------------------------------------------------------------------
SKY_HEADER = (
    "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,"
    "AvailabilityZone,Price,SpotPrice\n"
)
SKY = SKY_HEADER + (
    "e2-standard-2,2.0,8.0,,,,us-central1,us-central1-a,0.06701,0.02679\n"
    "e2-standard-4,4.0,16.0,,,,us-central1,us-central1-a,0.0,0.0\n"
    "e2-standard-8,8.0,32.0,,,,us-central1,us-central1-a,nan,0.1\n"
    "n2-standard-2,2.0,8.0,,,,us-central1,us-central1-a,0.09712,0.0\n"
    "n2-standard-4,4.0,16.0,,,,us-central1,us-central1-a,0.19424,-0.01\n"
    "n2-standard-8,8.0,32.0,,,,us-central1,us-central1-a,0.38848,\n"
    "a3-highgpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,2.17547\n"
    ",,,H100,8,,us-central1,us-central1-a,78.0,nan\n"
)


def test_skypilot_rows_priced_zero_negative_or_nan_are_dropped_and_listed() -> None:
    rows = gcp_prices.from_skypilot_csv(SKY, as_of="2026-01-01")
    got = {r.instance_type: (r.on_demand, r.spot) for r in rows}
    assert got == {
        "e2-standard-2": (0.06701, 0.02679),
        "n2-standard-2": (0.09712, None),  # spot 0: no spot, the on-demand price kept
        "n2-standard-4": (0.19424, None),
        "n2-standard-8": (0.38848, None),  # empty spot: no spot, and nothing dropped
        "a3-highgpu-8g": (87.46006, None),  # its GPUs' spot price is NaN
    }
    unpriced: list[str] = []
    gcp_prices.from_skypilot_csv(SKY, as_of="2026-01-01", unpriced=unpriced)
    assert sorted(unpriced) == [
        "a3-highgpu-8g in us-central1 (spot)",
        "e2-standard-4 in us-central1",
        "e2-standard-8 in us-central1",
        "n2-standard-2 in us-central1 (spot)",
        "n2-standard-4 in us-central1 (spot)",
    ]
    assert all(math.isfinite(r.on_demand) and r.on_demand > 0 for r in rows)


def test_refresh_says_how_many_prices_it_dropped_and_writes_a_loadable_catalog(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "vms.csv"
    src.write_text(SKY, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="spotwise.providers.gcp_prices"):
        dest = gcp_prices.refresh(tmp_path / "p.csv", source=str(src))
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "5 prices (" in said and "dropped: not a positive number of USD/h" in said
    table = gcp_prices.load(dest)  # what it wrote passes the loader's check
    assert table.lookup("e2-standard-4", "us-central1") is None
    assert table.lookup("n2-standard-2", "us-central1").spot is None  # type: ignore[union-attr]


# ---- the planner's filter, any provider ----------------------------------------------------------
def _offer(market: Market, price: float, on_demand: float, itype: str) -> Offer:
    return Offer("gcp", "us-central1", "us-central1-a", itype, market, price, on_demand, 4, 16.0)


def test_the_offer_filter_leaves_out_prices_the_bill_cannot_use(
    caplog: pytest.LogCaptureFixture,
) -> None:
    offers = [
        _offer(Market.SPOT, 0.04, 0.13, "s21e-ok-spot"),
        _offer(Market.SPOT, 0.04, 0.0, "s21e-spot-od-unknown"),  # on-demand 0: "unknown", fine
        _offer(Market.ON_DEMAND, 0.13, 0.13, "s21e-ok-od"),
        _offer(Market.SPOT, 0.0, 0.13, "s21e-zero-spot"),
        _offer(Market.SPOT, -0.5, 0.13, "s21e-negative-spot"),
        _offer(Market.SPOT, math.nan, 0.13, "s21e-nan-spot"),
        _offer(Market.SPOT, math.inf, 0.13, "s21e-inf-spot"),
        _offer(Market.ON_DEMAND, 0.13, 0.0, "s21e-od-billed-zero"),  # billed its on-demand price
        _offer(Market.ON_DEMAND, math.nan, math.nan, "s21e-nan-od"),
    ]
    with caplog.at_level(logging.WARNING, logger="spotwise.planner.backend"):
        kept = _filter(offers, ProviderSpec(name="gcp"))
        _filter(offers, ProviderSpec(name="gcp"))  # said once per offer, not per listing
    assert [o.instance_type for o in kept] == ["s21e-ok-spot", "s21e-spot-od-unknown", "s21e-ok-od"]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 6 and all("not offered: priced" in m for m in said)
    assert any(m.startswith("gcp:us-central1-a:s21e-zero-spot:spot not offered") for m in said)
