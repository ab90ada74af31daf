"""The rows behind ``spotwise prices``: offers and price-history points as plain dicts, the
order and the limit they are listed in, and the store's price cache they fall back to.

:mod:`spotwise.cloud` opens the provider and decides what to fetch; this module only shapes
what came back (ready for ``--json``) and keeps the copy in the store (``source: cache``
when the provider cannot be reached). The store is imported inside the functions that use
it, so importing this module stays cheap.
"""

from __future__ import annotations

from typing import Any

from spotwise.providers.base import Market, Offer, PricePoint
from spotwise.providers.replay import ReplayMarket

CACHE_MAX_AGE_S = 24 * 3600.0


def offer_row(provider: str, o: Offer, observed_at: float | None) -> dict[str, Any]:
    """One current price, its on-demand price joined (None when unknown) and the spot saving
    against it: ``savings`` a fraction (0.6624, kept as it was: scripts read it) and
    ``savings_pct`` the same in percent (66.24), as ``report``'s ``saved_pct``.
    ``observed_at`` is None for a price read from an offline catalog (no time of its own)."""
    od = o.on_demand_price_per_hour if o.on_demand_price_per_hour > 0 else None
    savings = savings_pct = None
    if od and o.market is Market.SPOT:
        savings = round(1.0 - o.price_per_hour / od, 4)
        savings_pct = round((1.0 - o.price_per_hour / od) * 100.0, 2)
    return {
        "provider": provider,
        "region": o.region,
        "zone": o.zone,
        "instance_type": o.instance_type,
        "market": o.market.value,
        "price_per_hour": o.price_per_hour,
        "on_demand_price_per_hour": od,
        "savings": savings,
        "savings_pct": savings_pct,
        "vcpus": o.vcpus,
        "memory_gb": o.memory_gb,
        "gpus": o.gpus,
        "gpu_name": o.gpu_name,
        "available": o.available,
        "observed_at": observed_at,
    }


# Where ``prices`` read the prices it lists (its ``source``; ``cache`` is :mod:`spotwise.cloud`'s)
LIVE, OFFLINE, MIXED, REPLAY = "live", "offline", "mixed", "replay"


def price_source(cat: Any, region: str | None, market: Market | None) -> str:
    """Where the prices of ``market`` (None: both) that ``cat`` just gave came from: ``live``
    (asked of the provider now), ``offline`` (a price catalog file: AWS's 2017 on-demand list,
    the GCP and Azure catalogs, shipped or given as an option), ``mixed`` (spot prices live,
    on-demand ones offline: ``on_demand_source`` names them) or ``replay`` (the local replay
    market: the shipped trace, at its last tick). Asks the provider nothing more."""
    if isinstance(cat, ReplayMarket):
        return REPLAY
    name = getattr(cat, "name", "")
    if name == "gcp":  # GCP has no price API spotwise reads: its prices are a catalog's
        return OFFLINE
    if name == "azure":  # the Retail Prices API, or the catalog it falls back to
        regions = [region] if region else list(cat.regions())
        offline = any(cat.prices(r) is cat.fallback for r in regions)
        return OFFLINE if offline else LIVE
    spot = LIVE  # AWS's spot prices are read from EC2 (else no prices at all)
    od_source = getattr(cat, "on_demand_source", None)
    od = LIVE
    if callable(od_source) and str(od_source(region)).startswith("offline"):
        od = OFFLINE
    if market is Market.SPOT:
        return spot
    if market is Market.ON_DEMAND:
        return od
    return spot if spot == od else MIXED


def history_row(provider: str, p: PricePoint, region: str) -> dict[str, Any]:
    """One point of a price history."""
    return {
        "provider": provider,
        "region": region,
        "zone": p.zone,
        "instance_type": p.instance_type,
        "market": p.market.value,
        "price_per_hour": p.price_per_hour,
        "observed_at": p.timestamp,
    }


def price_order(row: dict[str, Any]) -> tuple[bool, float, str, str, str]:
    """How ``prices`` lists current prices: the offers one can buy now first (a spot offer with
    no capacity stays listed, last), then from cheapest; zone, instance type and market break
    ties. Rows without ``available`` (read from the cache) count as available."""
    return (
        not row.get("available", True),
        row["price_per_hour"],
        row["zone"],
        row["instance_type"],
        row["market"],
    )


def cut(out: dict[str, Any], limit: int) -> dict[str, Any]:
    """The first ``limit`` rows of ``out["prices"]`` (0: all), with the counts of the whole list:
    ``total``, ``left_out`` (rows cut by the limit) and ``unavailable``. A price history, in
    time order, keeps its last ``limit`` points instead: the latest prices are the ones asked."""
    rows = out["prices"]
    latest = "history" in out
    shown = rows if limit == 0 else (rows[-limit:] if latest else rows[:limit])
    return {
        **out,
        "prices": shown,
        "total": len(rows),
        "left_out": len(rows) - len(shown),
        "unavailable": sum(1 for r in rows if not r.get("available", True)),
    }


def replay_now(market: ReplayMarket) -> float:
    """The replayed market's "now" for ``prices``, ``prices --history`` and (by default)
    ``predictor forecast``: the start of the trace's last tick."""
    return float(market.traces.times[-1])


def cache_rows(rows: list[dict[str, Any]], db: str | None, fetched_at: float) -> int:
    """Store current price rows in the price cache of the store at ``db``; how many. A row
    without ``observed_at`` (an offline catalog's price) is not a price seen now: not cached."""
    from spotwise.store import Store

    rows = [r for r in rows if r["observed_at"] is not None]
    keep = (
        "provider",
        "region",
        "zone",
        "instance_type",
        "market",
        "price_per_hour",
        "observed_at",
    )
    store = Store.open(db)
    try:
        return store.cache_prices(
            [{**{k: r[k] for k in keep}, "fetched_at": fetched_at} for r in rows]
        )
    finally:
        store.close()


def cached_rows(
    provider: str,
    region: str | None,
    instance_type: str | None,
    market: Market | None,
    db: str | None,
) -> list[dict[str, Any]]:
    """The newest cached price of each (zone, instance type, market) fetched within
    :data:`CACHE_MAX_AGE_S`, in :func:`price_order`."""
    from spotwise.store import Store

    store = Store.open(db)
    try:
        got = store.cached_prices(
            provider,
            region=region,
            instance_type=instance_type,
            market=market.value if market else None,
            max_age_s=CACHE_MAX_AGE_S,
        )
    finally:
        store.close()
    latest: dict[tuple[str, str, str], Any] = {}
    for row in got:  # newest fetch per (zone, type, market)
        key = (row.zone, row.instance_type, row.market)
        if key not in latest or row.fetched_at >= latest[key].fetched_at:
            latest[key] = row
    rows = [
        {
            "provider": r.provider,
            "region": r.region,
            "zone": r.zone,
            "instance_type": r.instance_type,
            "market": r.market,
            "price_per_hour": r.price_per_hour,
            "observed_at": r.observed_at,
            "fetched_at": r.fetched_at,
        }
        for r in latest.values()
    ]
    rows.sort(key=price_order)
    return rows
