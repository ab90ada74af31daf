"""Azure VM prices from the public Retail Prices API, with a shipped, dated fallback catalog.

The API (``https://prices.azure.com/api/retail/prices``) is unauthenticated JSON:
``{"Items": [...], "NextPageLink": url | null, "Count": n}``, 1,000 items a page. One Linux
pay-as-you-go meter per VM size, region and market is selected (:func:`select`):

* ``type == "Consumption"``, ``unitOfMeasure == "1 Hour"``, ``currencyCode == "USD"``;
* ``productName`` not ending in ``" Windows"`` (Linux meters carry no OS suffix);
* ``skuName`` ending in ``" Spot"`` → Spot; ``" Low Priority"`` (Batch) is skipped;
* ``isPrimaryMeterRegion`` false is skipped; the newest ``effectiveStartDate`` wins.

The fallback catalog uses the CSV format of :mod:`spotwise.providers.gcp_prices` (shared loader)
and lives in ``spotwise/data/azure-prices/`` with its SOURCE.md. Azure publishes no spot price
history: ``effectiveStartDate`` is the only date a price carries.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spotwise.errors import ProviderError, SpecError
from spotwise.providers.gcp_prices import PriceRow, PriceTable, write
from spotwise.providers.gcp_prices import load as _load

SHIPPED = Path(__file__).resolve().parent.parent / "data" / "azure-prices" / "prices.csv"
RETAIL_URL = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"
SOURCE = "azure-retail-prices-api"
_REGION = re.compile(r"^[a-z0-9]+$")
_SIZE = re.compile(r"^[A-Za-z0-9_-]+$")
Fetch = Callable[[str, Mapping[str, str] | None], Mapping[str, Any]]


def load(path: str | Path | None = None) -> PriceTable:
    return _load(path, default=SHIPPED)


def retail_filter(region: str, sizes: Sequence[str] | None = None) -> str:
    """The OData ``$filter`` (names are checked: they are pasted into the query)."""
    if not _REGION.match(region):
        raise SpecError(f"providers[].regions: {region!r} is not an Azure region name")
    bad = [s for s in sizes or () if not _SIZE.match(s)]
    if bad:
        raise SpecError(f"providers[].instance_types: {bad} are not Azure VM size names")
    flt = (
        f"serviceName eq 'Virtual Machines' and armRegionName eq '{region}' "
        "and priceType eq 'Consumption'"
    )
    if sizes:
        flt += " and (" + " or ".join(f"armSkuName eq '{s}'" for s in sizes) + ")"
    return flt


def http_get_json(url: str, params: Mapping[str, str] | None, timeout_s: float = 30.0) -> Any:
    import requests

    try:
        resp = requests.get(url, params=dict(params) if params else None, timeout=timeout_s)
        resp.raise_for_status()
        return resp.json()
    except (requests.RequestException, ValueError) as e:
        raise ProviderError(
            f"azure: Retail Prices API request failed: {type(e).__name__}"
        ) from None


def fetch_items(
    region: str,
    sizes: Sequence[str] | None = None,
    *,
    url: str = RETAIL_URL,
    get: Fetch = http_get_json,
    max_pages: int = 50,
) -> list[dict[str, Any]]:
    """All VM consumption meters of a region (optionally of some sizes), following pages."""
    params: Mapping[str, str] | None = {
        "api-version": API_VERSION,
        "currencyCode": "USD",
        "$filter": retail_filter(region, sizes),
    }
    items: list[dict[str, Any]] = []
    next_url: str | None = url
    for _ in range(max_pages):
        if not next_url:
            break
        page = get(next_url, params)
        items += [i for i in page.get("Items") or [] if isinstance(i, dict)]
        next_url, params = page.get("NextPageLink") or None, None  # the link carries the query
    else:
        raise ProviderError(f"azure: Retail Prices API returned more than {max_pages} pages")
    return items


def _market(item: Mapping[str, Any]) -> str | None:
    """'spot', 'on-demand' or None (not a Linux pay-as-you-go hourly USD meter)."""
    if (
        item.get("type") != "Consumption"
        or item.get("unitOfMeasure") != "1 Hour"
        or item.get("currencyCode", "USD") != "USD"
        or str(item.get("productName", "")).endswith(" Windows")
        or item.get("isPrimaryMeterRegion") is False
        or not item.get("armSkuName")
    ):
        return None
    sku = str(item.get("skuName", ""))
    if sku.endswith(" Low Priority"):
        return None
    return "spot" if sku.endswith(" Spot") else "on-demand"


def select(items: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], tuple[float, str]]:
    """(size, region, market) → (USD/h, effectiveStartDate) of the newest matching meter."""
    out: dict[tuple[str, str, str], tuple[float, str]] = {}
    for item in items:
        market = _market(item)
        if market is None:
            continue
        try:
            price = float(item.get("retailPrice", item.get("unitPrice")))
        except (TypeError, ValueError):
            continue
        if price <= 0:
            continue
        key = (str(item["armSkuName"]), str(item.get("armRegionName", "")), market)
        since = str(item.get("effectiveStartDate", ""))
        if key not in out or since > out[key][1]:
            out[key] = (price, since)
    return out


def rows_from_items(
    items: Iterable[Mapping[str, Any]],
    hardware: Mapping[str, tuple[int, float, int, str]] | None = None,
) -> list[PriceRow]:
    """Region-level PriceRows (hardware columns from ``hardware`` when given)."""
    chosen = select(items)
    out = []
    for size, region in sorted({(k[0], k[1]) for k in chosen}):
        od = chosen.get((size, region, "on-demand"))
        if od is None:
            continue  # a spot price alone cannot be checked against its on-demand price
        spot = chosen.get((size, region, "spot"))
        cpus, mem, gpus, gpu_name = (hardware or {}).get(size, (0, 0.0, 0, ""))
        as_of = max(od[1], spot[1] if spot else "")[:10] or _today()
        out.append(
            PriceRow(
                size,
                region,
                "",
                cpus,
                mem,
                gpus,
                gpu_name,
                od[0],
                spot[0] if spot else None,
                as_of,
                SOURCE,
            )
        )
    return out


def refresh(
    dest: str | Path,
    *,
    regions: Sequence[str],
    sizes: Sequence[str] | None = None,
    hardware: Mapping[str, tuple[int, float, int, str]] | None = None,
    get: Fetch = http_get_json,
) -> Path:
    """Query the Retail Prices API for these regions (and sizes) and write a catalog CSV."""
    rows: list[PriceRow] = []
    for region in regions:
        rows += rows_from_items(fetch_items(region, sizes, get=get), hardware)
    if not rows:
        raise ProviderError(
            f"azure: the Retail Prices API had no Linux prices for {regions} {sizes}"
        )
    return write(rows, dest)


def _today() -> str:
    return datetime.fromtimestamp(time.time(), UTC).date().isoformat()
