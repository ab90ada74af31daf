"""`check`, `catalog`, `prices`: what each provider offers here, and at what price.

Each command parses, calls one function of :mod:`spotwise.cloud`, and renders its dict (a rich
table, or one JSON document with ``--json``). The lead's app adds them with :func:`register`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from spotwise.cli.options import DbOpt, JsonOpt
from spotwise.cli.output import emit
from spotwise.errors import ProviderUnavailable

ProviderOpt = Annotated[
    str, typer.Option("--provider", "-p", help="local (replay market), aws, gcp or azure.")
]
RegionOpt = Annotated[
    str | None,
    typer.Option(
        "--region",
        "-r",
        help="Region (default: for aws its configured region, else us-east-1; every "
        "region for the other providers).",
        show_default=False,
    ),
]


def provider_option(name: str) -> str:
    """A ``--provider`` value, checked before the core is called: an unknown one is refused
    naming the option, as the other option errors are (a job spec's ``provider`` keeps its
    own field name in its errors)."""
    from spotwise.errors import SpecError, did_you_mean
    from spotwise.providers.registry import PROVIDER_NAMES

    if name not in PROVIDER_NAMES:
        raise SpecError(
            f"--provider: unknown provider {name!r}{did_you_mean(name, list(PROVIDER_NAMES))}; "
            f"valid: {', '.join(PROVIDER_NAMES)}"
        )
    return name


def check_cmd(
    provider: Annotated[
        list[str] | None,
        typer.Option(
            "--provider", "-p", help="Check only these providers (repeatable).", show_default=False
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Which providers are usable here, and why not (no secret is ever printed).

    Exits 1 when a provider named with --provider is not usable.

    Examples:
      spotwise check
      spotwise check --provider aws --json
    """
    from spotwise import cloud

    for name in provider or []:
        provider_option(name)
    result = cloud.check(provider or None)
    unusable = bool(provider) and not all(p["usable"] for p in result["providers"])
    emit(result, json_out, _print_check, outcome=1 if unusable else 0)
    if unusable:
        raise typer.Exit(1)


def catalog_cmd(
    provider: ProviderOpt = "local",
    region: RegionOpt = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu", help="Only types with this GPU, e.g. V100, T4, A10G.", show_default=False
        ),
    ] = None,
    min_vcpus: Annotated[
        int, typer.Option("--min-vcpus", min=0, help="At least this many vCPUs.")
    ] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Instance types of a provider: vCPUs, memory, GPUs and on-demand price.

    Examples:
      spotwise catalog
      spotwise catalog --provider aws --gpu V100 --json
    """
    from spotwise import cloud

    result = cloud.catalog(provider_option(provider), region, gpu=gpu, min_vcpus=min_vcpus)
    emit(result, json_out, _print_catalog)


def prices_cmd(
    provider: ProviderOpt = "local",
    region: RegionOpt = None,
    instance_type: Annotated[
        str | None,
        typer.Option("--instance-type", "-t", help="Only this instance type.", show_default=False),
    ] = None,
    spot: Annotated[
        bool | None,
        typer.Option(
            "--spot/--on-demand",
            help="Only spot, or only on-demand prices (default: both).",
            show_default=False,
        ),
    ] = None,
    history: Annotated[
        str | None,
        typer.Option(
            "--history",
            help="Spot price history over this "
            "long (e.g. 6h, 2d) instead of current prices; "
            "needs --instance-type.",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=0,
            help="Rows to show (0 = all; default: 40 in the table, all with --json). "
            "A --history keeps its latest points.",
            show_default=False,
        ),
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Prices, spot with on-demand joined: offers you can buy now first, each from cheapest
    (cached in the store). A --history lists the spot price over time, latest last.

    Without AWS credentials, -p aws --on-demand lists each instance type once, its zone the
    region, at the offline catalog's prices (--json: "zones_known": false and a "note").

    Examples:
      spotwise prices --instance-type p3.2xlarge
      spotwise prices --spot --instance-type p3.2xlarge --history 1d
    """
    from spotwise import cloud
    from spotwise.providers.base import Market

    market = None if spot is None else (Market.SPOT if spot else Market.ON_DEMAND)
    provider_option(provider)
    try:
        result = cloud.prices(
            provider, region, instance_type, market, history, db=db, limit=limit, table=not json_out
        )
    except ProviderUnavailable as e:
        if market is not Market.ON_DEMAND:
            raise
        raise _on_demand_unavailable(e, provider, region) from None
    emit(result, json_out, _print_prices)


def _on_demand_unavailable(
    e: ProviderUnavailable, provider: str, region: str | None
) -> ProviderUnavailable:
    """``prices --on-demand`` refused for credentials (AWS: credentials rejected; with none at
    all it lists one row per type instead): the provider's message names only "reading spot
    prices", though on-demand prices were asked for. Say why it read them (an on-demand row is
    per zone: the zones come from the provider, spot prices included), and point at
    ``catalog``, which lists each instance type's on-demand price (AWS: offline, at 2017
    prices, when it has no credentials)."""
    where = f" -r {region}" if region else ""
    return ProviderUnavailable(
        f"{e.message} (`prices --on-demand` lists on-demand prices by zone, and reads the "
        "zones that sell each type from the provider, spot prices included)",
        hint=f"`spotwise catalog -p {provider}{where}` lists each instance type's on-demand "
        f"price{' without credentials' if provider == 'aws' else ''}"
        + (f"; or {e.hint}" if e.hint else ""),
    )


def register(app: typer.Typer) -> None:
    """Add ``check``, ``catalog`` and ``prices`` to the spotwise app."""
    app.command("check")(check_cmd)
    app.command("catalog")(catalog_cmd)
    app.command("prices")(prices_cmd)


# ---- rendering ------------------------------------------------------------------------------
def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _usd(v: float | None, digits: int = 4) -> str:
    return "—" if v is None else f"${v:.{digits}f}"


def _when(ts: float | None) -> str:
    if ts is None:
        return "—"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _span(start: float, end: float) -> str:
    """``2023-04-02 10:54 → 11:54 UTC``: the end's date only when it is another day."""
    first, last = _when(start).removesuffix(" UTC"), _when(end).removesuffix(" UTC")
    return f"{first} → {last[11:] if last[:10] == first[:10] else last} UTC"


def _count(n: int, noun: str) -> str:
    """``1 price``, ``2 prices``: the count and its noun, singular or plural."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _gpus(r: dict[str, Any]) -> str:
    return f"{r['gpus']}× {r['gpu_name']}" if r.get("gpus") else "—"


def _print_check(result: dict[str, Any]) -> None:
    from rich.markup import escape

    from spotwise.cli.output import fit, listing

    console = _console()
    table = listing(leading=1)
    table.add_column("provider", no_wrap=True)
    table.add_column("usable", no_wrap=True)
    table.add_column("why (and what was found)")  # free text: wraps between words
    for p in result["providers"]:
        ok = "[green]yes[/]" if p["usable"] else "[red]no[/]"
        why = escape(p["reason"])
        if p["details"]:
            found = " · ".join(f"{k}={v}" for k, v in p["details"].items())
            why += f"\n[dim]{escape(found)}[/]"
        table.add_row(p["provider"], ok, why)
    console.print(fit(table, console.width))


def _print_catalog(result: dict[str, Any]) -> None:
    from spotwise.cli.output import fit, listing

    rows = result["instance_types"]
    console = _console()
    regions = sorted({r["region"] for r in rows})
    several = len(regions) > 1  # one region: the title names it, not a column
    title = f"{result['provider']} {result['region'] or ('' if several else ''.join(regions))}"
    title = title.strip()
    if result.get("replays"):  # local: a replay of AWS's market, its instance types
        title += f" (replays {result['replays']})"
    if result.get("on_demand_source"):
        title += f" (on-demand prices: {result['on_demand_source']})"
    table = listing(title)
    if several:
        table.add_column("region", no_wrap=True)
    table.add_column("instance type", overflow="fold")  # whole unless longer than 80 allow
    for col in ("vCPUs", "GiB"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("GPUs")  # "8× A100": wraps after the count if it must
    table.add_column("arch", no_wrap=True)
    table.add_column("on-demand $/h", justify="right", no_wrap=True)
    for r in rows:
        cells = [
            r["name"],
            str(r["vcpus"]),
            f"{r['memory_gb']:g}",
            _gpus(r),
            r["architecture"],
            _usd(r["on_demand_price_per_hour"]),
        ]
        table.add_row(*([r["region"]] if several else []), *cells)
    console.print(fit(table, console.width))
    console.print(f"[dim]{_count(len(rows), 'instance type')}[/]")


def _source_mark(result: dict[str, Any]) -> str:
    """Where the prices came from, in ``--json``'s words (``source``: live, offline, mixed,
    replay or cache); the cache, read because the provider could not be, says why in yellow."""
    source = result.get("source")
    if source is None:
        return ""
    if source == "cache":
        from rich.markup import escape

        why = escape(str(result.get("error") or "provider unreachable"))
        return f" [yellow](source: cache; {why})[/]"
    return f" (source: {source})"


def _print_prices(result: dict[str, Any]) -> None:
    """The rows of ``cloud.prices`` in its order (already cut to its ``limit``), with a footer
    that counts the whole list: ``total`` rows, of which ``left_out`` are not shown,
    ``unavailable`` spot offers with no capacity now."""
    from spotwise.cli.output import fit, listing

    shown = result["prices"]
    total = result.get("total", len(shown))
    left_out = result.get("left_out", 0)
    unavailable = result.get("unavailable", sum(1 for r in shown if not r.get("available", True)))
    console = _console()
    if "history" in result:
        h = result["history"]
        # from the window's start or the first point shown, whichever is later: a window
        # reaching before the trace titled the table from a date no row has (--history 10000d:
        # 1995 for a 2023 trace); the price in effect at the start may be older than it
        times = [r["observed_at"] for r in shown if r.get("observed_at") is not None]
        span = _span(max(h["start"], min(times, default=h["start"])), h["end"])
        table = listing(f"{result['provider']} spot price history, {span}" + _source_mark(result))
        for col in ("time", "zone", "instance type"):
            table.add_column(col, no_wrap=True)
        table.add_column("spot $/h", justify="right", no_wrap=True)
        for r in shown:
            table.add_row(
                _when(r["observed_at"]), r["zone"], r["instance_type"], _usd(r["price_per_hour"])
            )
    else:
        title = f"{result['provider']} {result['region'] or ''} prices".replace("  ", " ")
        if result.get("market_time") is not None:
            title += f" at market time {_when(result['market_time'])}"
        if result.get("zones_known") is False:  # on-demand without credentials: per region
            title += " [yellow](zones unknown)[/]"
        title += _source_mark(result)
        table = listing(title)
        for col in ("zone", "instance type"):  # whole unless too long for 80 columns: fold
            table.add_column(col, overflow="fold")
        table.add_column("market")  # "spot (none now)" wraps before the mark if it must
        for col in ("$/h", "on-demand", "saving"):
            table.add_column(col, justify="right", no_wrap=True)
        table.add_column("GPUs")
        for r in shown:
            saving = "—" if r.get("savings") is None else f"{100 * r['savings']:.0f}%"
            available = r.get("available", True)
            table.add_row(
                r["zone"],
                r["instance_type"],
                r["market"] if available else f"{r['market']} (none now)",
                _usd(r["price_per_hour"]),
                _usd(r.get("on_demand_price_per_hour")),
                saving,
                _gpus(r),
                style=None if available else "dim",
            )
    console.print(fit(table, console.width))
    which = "earlier" if "history" in result else "more"  # a history keeps its latest points
    more = f" ({left_out} {which} not shown; --limit 0 for all)" if left_out else ""
    source = result.get("on_demand_source")
    note = f" · on-demand prices: {source}" if source else ""
    if result.get("note"):
        note += f" · {result['note']}"
    if unavailable:  # listed last, so the first rows a limit cuts
        hidden = unavailable - sum(1 for r in shown if not r.get("available", True))
        where = f", {hidden} not shown" if hidden else ""
        if hidden == unavailable:
            where = ", not shown"
        verb = "has" if unavailable == 1 else "have"
        note += (
            f" · {_count(unavailable, 'spot offer')} {verb} no capacity now (listed last{where})"
        )
    console.print(f"[dim]{_count(total, 'price')}{more}{note}[/]")
