"""GCP GPU machine types are never priced at their host part (review-ae F5).

SkyPilot's ``vms.csv`` prices the machine row of an accelerator-optimized family (a2, a3, a4,
g2, g4, ...) without its GPUs, which are rows of their own: a refresh must drop such a type when
it cannot join its GPUs' row, and the online catalog must not offer a machine type whose
MachineTypes listing has GPUs its price row does not count."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloudfakes import fake_gce, gcp_config, gcp_credentials, serve

from spotwise.errors import ProviderError
from spotwise.providers import gcp, gcp_prices
from spotwise.providers.base import Market

HEADER = (
    "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,"
    "AvailabilityZone,Price,SpotPrice\n"
)
# Machine rows as SkyPilot's v7 vms.csv has them (a3-edgegpu-8g copied from commit 017e2502);
# the H100 rows' numbers are made up for the test.
SKYPILOT = HEADER + (
    "a3-edgegpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,2.17547\n"
    "a3-edgegpu-8g-nolssd,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,2.17547\n"
    "a3-highgpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,2.17547\n"
    "a3-megagpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.9,2.3\n"
    "a4-highgpu-8g,224.0,3968.0,,,,us-central1,us-central1-a,12.0,3.0\n"
    "g4-standard-48,48.0,180.0,,,,us-central1,us-central1-a,1.5,0.6\n"
    "g1-small,1.0,1.7,,,,us-central1,us-central1-a,0.0257,0.0051\n"
    "e2-standard-2,2.0,8.0,,,,us-central1,us-central1-a,0.06701,0.02679\n"
    ",,,H100,8,,us-central1,us-central1-a,78.0,20.0\n"
)


def test_a_gpu_family_without_a_gpu_row_is_dropped_not_priced_at_the_host_part() -> None:
    rows = gcp_prices.from_skypilot_csv(SKYPILOT, as_of="2026-01-01")
    by_type = {r.instance_type: r for r in rows}
    # joined with its GPUs: host 9.46006 + 8 x H100 78.0; spot 2.17547 + 20.0
    a3 = by_type["a3-highgpu-8g"]
    assert (a3.on_demand, a3.spot, a3.gpus, a3.gpu_name) == (87.46006, 22.17547, 8, "H100")
    # no GPU row is joined to these: never written at the host price
    for itype in (
        "a3-edgegpu-8g",
        "a3-edgegpu-8g-nolssd",
        "a3-megagpu-8g",
        "a4-highgpu-8g",
        "g4-standard-48",
    ):
        assert itype not in by_type
    # CPU types (g1-small is a shared-core type, not a GPU family) stay as they are
    assert by_type["g1-small"].on_demand == 0.0257 and by_type["g1-small"].gpus == 0
    assert by_type["e2-standard-2"].spot == 0.02679
    assert sorted(by_type) == ["a3-highgpu-8g", "e2-standard-2", "g1-small"]
    dropped: list[str] = []
    gcp_prices.from_skypilot_csv(SKYPILOT, as_of="2026-01-01", dropped=dropped)
    assert sorted(dropped) == [
        "a3-edgegpu-8g in us-central1",
        "a3-edgegpu-8g-nolssd in us-central1",
        "a3-megagpu-8g in us-central1",
        "a4-highgpu-8g in us-central1",
        "g4-standard-48 in us-central1",
    ]


def test_refresh_says_what_it_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = tmp_path / "vms.csv"
    src.write_text(SKYPILOT, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="spotwise.providers.gcp_prices"):
        dest = gcp_prices.refresh(tmp_path / "p.csv", source=str(src))
    table = gcp_prices.load(dest)
    assert table.lookup("a3-edgegpu-8g", "us-central1") is None
    assert table.lookup("a3-highgpu-8g", "us-central1").on_demand == 87.46006  # type: ignore[union-attr]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "5 machine-type rows (" in said and "a3-edgegpu-8g in us-central1" in said
    assert "their GPUs have no price row" in said
    # asked for a GPU type it cannot price: an error that says why, no file
    with pytest.raises(ProviderError) as e:
        gcp_prices.refresh(tmp_path / "q.csv", source=str(src), instance_types=["a3-edgegpu-8g"])
    assert "1 machine-type row (a3-edgegpu-8g in us-central1) dropped" in e.value.message
    assert not (tmp_path / "q.csv").exists()


# ---- the online catalog -------------------------------------------------------------------------
@pytest.fixture
def fake() -> Iterator[Any]:
    yield from serve(fake_gce.FakeGCE)


def test_online_offer_whose_price_row_counts_no_gpus_is_not_offered(
    fake: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """g2-standard-4 is listed with one L4; a catalog row at its host price with 0 GPUs (what a
    refresh wrote before the fix, or a hand-written row) must not make an offer at 0.05874."""
    prices = tmp_path / "prices.csv"
    prices.write_text(
        ",".join(gcp_prices.COLUMNS) + "\n"
        "g2-standard-4,us-central1,,4,16,0,,0.14679,0.05874,2026-01-01,test\n"
        "e2-standard-2,us-central1,,2,8,0,,0.06701,0.02679,2026-01-01,test\n",
        encoding="utf-8",
    )
    cat = gcp.open_catalog(
        gcp_config(prices=str(prices)), credentials=gcp_credentials("ya29.TEST-TOKEN")
    )
    with caplog.at_level(logging.DEBUG, logger="spotwise.providers.gcp_catalog"):
        offers = cat.offers(region="us-central1", market=Market.SPOT)
    assert sorted({(o.instance_type, o.price_per_hour, o.gpus) for o in offers}) == [
        ("e2-standard-2", 0.02679, 0)
    ]
    assert "g2-standard-4 in us-central1-a not offered: the listing gives it 1 GPUs" in (
        caplog.text
    )
    # nor does the catalog show it with that price
    types = {t.name: t for t in cat.instance_types("us-central1")}
    assert types["g2-standard-4"].gpus == 1
    assert types["g2-standard-4"].on_demand_price_per_hour is None
    assert types["e2-standard-2"].on_demand_price_per_hour == 0.06701


def test_online_offer_whose_price_row_counts_its_gpus_is_offered(fake: Any, tmp_path: Path) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text(
        ",".join(gcp_prices.COLUMNS) + "\n"
        "g2-standard-4,us-central1,,4,16,1,L4,0.70683,0.28184,2026-01-01,test\n",
        encoding="utf-8",
    )
    cat = gcp.open_catalog(
        gcp_config(prices=str(prices)), credentials=gcp_credentials("ya29.TEST-TOKEN")
    )
    offers = cat.offers(region="us-central1", market=Market.SPOT)
    assert sorted((o.zone, o.price_per_hour, o.gpus, o.gpu_name) for o in offers) == [
        ("us-central1-a", 0.28184, 1, "L4"),
        ("us-central1-b", 0.28184, 1, "L4"),
    ]
