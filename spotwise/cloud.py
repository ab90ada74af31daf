"""Core functions behind ``spotwise check``, ``spotwise catalog`` and ``spotwise prices``.

The CLI parses, calls one of these, and renders the plain dict it gets back (ready for
``--json``). Providers are opened by name: ``local`` serves the replay market (the shipped
SkyNomad p3.2xlarge trace; its "now" is the trace's last tick, as for ``predictor forecast``);
the clouds go through :mod:`spotwise.providers.registry`, so a cloud SDK is imported only when
that cloud is asked for. Current prices are cached in the store with the time they were
fetched; when the provider cannot be reached, ``prices`` falls back to that cache (marked
``source: cache``); otherwise ``source`` says where the prices were read (``live``,
``offline``, ``mixed`` or ``replay``: :func:`spotwise.price_rows.price_source`). The rows'
shape, order and limit, and that cache, are :mod:`spotwise.price_rows`'s.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from spotwise.errors import (
    NotFoundError,
    ProviderError,
    ProviderUnavailable,
    SpecError,
    did_you_mean,
)
from spotwise.price_rows import (  # re-exported: spotwise.cloud.price_order and so on
    CACHE_MAX_AGE_S,  # noqa: F401 (re-exported)
    OFFLINE,
    price_order,
    price_source,
)
from spotwise.price_rows import cache_rows as _cache
from spotwise.price_rows import cached_rows as _from_cache
from spotwise.price_rows import cut as _cut
from spotwise.price_rows import history_row as _history_row
from spotwise.price_rows import offer_row as _offer_row
from spotwise.price_rows import replay_now as _replay_now
from spotwise.providers.base import Catalog, Market
from spotwise.providers.registry import PROVIDER_NAMES, ProviderConfig, cloud_module, validate_name
from spotwise.providers.replay import ReplayMarket
from spotwise.units import parse_duration

LOCAL_TRACE = "builtin:skynomad-v100-2023"
TABLE_LIMIT = 40  # rows `prices` shows in a table unless --limit says otherwise


def _unprefixed(provider: str, reason: str) -> str:
    """A reason without the ``gcp: `` its adapter put first: the row already names it."""
    head = f"{provider}: "
    return reason[len(head) :] if reason.startswith(head) else reason


def check(providers: list[str] | None = None) -> dict[str, Any]:
    """Which providers are usable here, and why not. Never includes a secret."""
    out = []
    for name in providers or list(PROVIDER_NAMES):
        validate_name(name)
        if name == "local":
            out.append(
                {
                    "provider": "local",
                    "usable": True,
                    "details": {"trace": LOCAL_TRACE},
                    "reason": "replay market over a real spot trace; trials run as local processes",
                }
            )
            continue
        try:
            res = cloud_module(name).check()
            out.append(
                {
                    "provider": name,
                    "usable": bool(res.usable),
                    "reason": _unprefixed(name, res.reason),
                    "details": dict(res.details),
                }
            )
        except ProviderUnavailable as e:
            reason = _unprefixed(name, e.message) + (f"; {e.hint}" if e.hint else "")
            out.append({"provider": name, "usable": False, "reason": reason, "details": {}})
        except Exception as e:  # a broken adapter must not hide the others
            out.append(
                {
                    "provider": name,
                    "usable": False,
                    "details": {},
                    "reason": f"check failed: {type(e).__name__}",
                }
            )
    return {"providers": out}


# Provider options that ``catalog`` and ``prices`` (which read no job spec) take from the
# environment instead: (provider, option) -> (variable, example value).
OPTION_ENV = {
    ("azure", "subscription_id"): ("AZURE_SUBSCRIPTION_ID", "00000000-0000-0000-0000-000000000000"),
    ("gcp", "project"): ("GOOGLE_CLOUD_PROJECT", "my-project-id"),
}
_SPEC_OPTION = "providers[].options."


def open_catalog(provider: str, region: str | None = None) -> Catalog:
    validate_name(provider)
    if provider == "local":
        from spotwise.providers.replay import ReplayMarket, load_market_traces

        return ReplayMarket(load_market_traces(LOCAL_TRACE))
    config = ProviderConfig(name=provider, regions=(region,) if region else ())
    try:
        catalog: Catalog = cloud_module(provider).open_catalog(config)
    except SpecError as e:
        raise _without_spec(provider, e) from None
    return catalog


def _without_spec(
    provider: str, e: SpecError, who: str = "catalog and prices", reads: str = "read"
) -> SpecError:
    """An adapter's error about a job-spec option, reworded for a command that reads no spec
    (``who``: `catalog and prices`, `predictor forecast` with ``reads="reads"``): name the
    environment variable that sets it here."""
    if not e.message.startswith(_SPEC_OPTION):
        return e
    option = e.message[len(_SPEC_OPTION) :].split(":", 1)[0].split(".", 1)[0]
    known = OPTION_ENV.get((provider, option))
    if known is None:
        return SpecError(f"{e.message} (a job-spec option: {who} cannot set it)", hint=e.hint)
    env, example = known
    return SpecError(
        f"{provider}: needs a {option.replace('_', ' ')}: set {env} ({who} {reads} no job spec)",
        hint=f"export {env}={example}",
    )


def _check_region(catalog: Catalog, provider: str, region: str | None) -> None:
    if region is None:
        return
    if provider == "aws":
        from spotwise.providers import aws

        aws.check_region(region)
        return
    known = catalog.regions()
    if known and region not in known:
        raise NotFoundError(
            f"{provider}: unknown region {region!r}{did_you_mean(region, known)}; "
            f"valid: {', '.join(known[:12])}{' …' if len(known) > 12 else ''}"
        )


def _check_instance_type(catalog: Catalog, provider: str, region: str | None, name: str) -> None:
    checker = getattr(catalog, "check_instance_type", None)
    if callable(checker):
        checker(name, region)
        return
    names = sorted({t.name for t in catalog.instance_types(region)})
    if name not in names:
        raise NotFoundError(
            f"{provider}: unknown instance type {name!r}{did_you_mean(name, names)}; "
            f"valid: {', '.join(names[:12])}{' …' if len(names) > 12 else ''}"
        )


def catalog(
    provider: str = "local", region: str | None = None, gpu: str | None = None, min_vcpus: int = 0
) -> dict[str, Any]:
    """Instance types (hardware and on-demand price) of a provider's region."""
    region = region or _default_region(provider, required=False)
    cat = open_catalog(provider, region)
    _check_region(cat, provider, region)
    types = cat.instance_types(region)
    rows = [asdict(t) for t in types]
    where = region or "its regions"
    if gpu:
        want = gpu.lower()
        rows = [r for r in rows if r["gpus"] and want in str(r["gpu_name"]).lower().split("+")]
        if not rows:
            known = sorted({t.gpu_name for t in types if t.gpus and t.gpu_name})
            raise NotFoundError(
                f"{provider}: no instance type with GPU {gpu!r} in {where}"
                f"{did_you_mean(gpu, known)}; GPUs there: {', '.join(known) or 'none'}"
            )
    if min_vcpus and rows and not any(r["vcpus"] >= min_vcpus for r in rows):
        most = max(r["vcpus"] for r in rows)
        with_gpu = f" with GPU {gpu!r}" if gpu else ""
        raise NotFoundError(
            f"{provider}: no instance type{with_gpu} has {min_vcpus} vCPUs or more in {where} "
            f"(the most: {most}); lower --min-vcpus"
        )
    rows = [r for r in rows if r["vcpus"] >= min_vcpus]
    rows.sort(
        key=lambda r: (
            r["on_demand_price_per_hour"] is None,
            r["on_demand_price_per_hour"] or 0.0,
            r["name"],
        )
    )
    out: dict[str, Any] = {"provider": provider, "region": region, "instance_types": rows}
    # the cloud whose market a provider replays (``local`` replays an AWS trace: its rows are
    # that cloud's instance types, named and priced by it); None for a cloud of its own
    out["replays"] = cat.provider if isinstance(cat, ReplayMarket) else None
    source = getattr(cat, "on_demand_source", None)
    if callable(source) and rows:
        out["on_demand_source"] = source(region)
    return out


def prices(
    provider: str = "local",
    region: str | None = None,
    instance_type: str | None = None,
    market: Market | None = None,
    history: str | None = None,
    db: str | None = None,
    now: float | None = None,
    limit: int | None = None,
    table: bool = False,
) -> dict[str, Any]:
    """Current prices in :func:`price_order` (on-demand joined), or the spot price history over
    a window; current prices are cached in the store (all of them, whatever ``limit``).

    On-demand prices alone (``market`` on-demand) from a cloud whose catalog could not read
    which zones sell each type (AWS without credentials: ``zones_known`` False, with a
    ``note``) are one row per instance type, its zone the region, and are not cached.

    ``limit`` keeps the first rows only (0: all; None: the default for the output, the first
    :data:`TABLE_LIMIT` rows for a ``table`` a person reads, else all of them, as a JSON
    document wants); ``total``, ``left_out`` and ``unavailable`` (spot offers with no capacity
    now) always count the whole list."""
    if limit is None:
        limit = TABLE_LIMIT if table else 0
    if limit < 0:
        raise SpecError(f"--limit must be 0 (all) or more, got {limit}")
    return _cut(_prices(provider, region, instance_type, market, history, db, now), limit)


def _prices(
    provider: str,
    region: str | None,
    instance_type: str | None,
    market: Market | None,
    history: str | None,
    db: str | None,
    now: float | None,
) -> dict[str, Any]:
    window = parse_duration(history, field="--history") if history else None
    if window is not None and not instance_type:
        raise SpecError("--history needs --instance-type (a price history is per instance type)")
    if window is not None and market is Market.ON_DEMAND:
        raise SpecError("--history is the spot price history; drop --on-demand")
    now = time.time() if now is None else now
    region = region or _default_region(provider, required=False)
    out: dict[str, Any] = {
        "provider": provider,
        "region": region,
        "instance_type": instance_type,
        "market": market.value if market else None,
        "fetched_at": now,
    }
    try:
        cat = open_catalog(provider, region)
        _check_region(cat, provider, region)
        if instance_type:
            _check_instance_type(cat, provider, region, instance_type)
        if window is not None:
            return {**out, **_history(cat, provider, region, instance_type or "", window, now)}
        types = [instance_type] if instance_type else None
        if isinstance(cat, ReplayMarket):  # the replayed market's "now": its last tick
            stamp: float | None = _replay_now(cat)
            offers = cat.offers(region, types, market, at=stamp)
        else:
            stamp = None
            offers = cat.offers(region, types, market)
    except NotFoundError:
        raise
    except ProviderError as e:
        cached = _from_cache(provider, region, instance_type, market, db)
        if not cached:
            raise
        return {**out, "source": "cache", "error": e.message, "prices": cached}
    # a price from an offline catalog (AWS's 2017 on-demand list, GCP's catalog, Azure's
    # fallback) was not observed now: its rows have no observed_at (and are not cached)
    offline = {
        m
        for m in (Market.SPOT, Market.ON_DEMAND)
        if market in (None, m) and price_source(cat, region, m) == OFFLINE
    }
    seen = now if stamp is None else stamp
    rows = sorted(
        (_offer_row(provider, o, None if o.market in offline else seen) for o in offers),
        key=price_order,
    )
    zones = getattr(cat, "zones_known", None)  # AWS: False for on-demand without credentials
    zones_known = bool(zones(region)) if callable(zones) else True
    # rows whose zone is the region are not cached: they would sit beside the per-zone rows
    out.update(
        source=price_source(cat, region, market),
        prices=rows,
        cached=_cache(rows, db, now) if zones_known else 0,
    )
    if callable(zones):
        out["zones_known"] = zones_known
    if not zones_known:
        out["note"] = (
            f"no {provider} credentials to read which zones sell each type: one row per "
            "instance type, its zone the region"
        )
    if stamp is not None:
        out["market_time"] = stamp  # the replay market's clock: the trace's last tick
    source = getattr(cat, "on_demand_source", None)
    if callable(source):
        out["on_demand_source"] = source(region)
    return out


def _history(
    cat: Catalog, provider: str, region: str | None, instance_type: str, window: float, now: float
) -> dict[str, Any]:
    if isinstance(cat, ReplayMarket):  # the trace's clock: the `window` up to its last tick
        end = _replay_now(cat)
        regions = [region] if region else cat.regions()
    else:
        end = now
        regions = [region or str(_default_region(provider))]
    rows = [
        _history_row(provider, p, r)
        for r in regions
        for p in cat.price_history(r, instance_type, end - window, end)
    ]
    rows.sort(key=lambda r: (r["observed_at"], r["zone"]))
    return {
        "source": price_source(cat, region, Market.SPOT),  # Azure's: both markets, one source
        "history": {"start": end - window, "end": end},
        "prices": rows,
        "cached": 0,
    }


def _default_region(provider: str, required: bool = True) -> str | None:
    """AWS's configured default region; other providers have none (None, or an error when
    ``required``)."""
    if provider == "aws":
        from spotwise.providers import aws

        return aws.default_region()
    if required:
        raise SpecError(f"--history with --provider {provider} needs --region")
    return None
