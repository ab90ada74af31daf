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

ProviderOpt = Annotated[
    str, typer.Option("--provider", "-p", help="local (replay market), aws, gcp or azure.")
]
RegionOpt = Annotated[
    str | None,
    typer.Option(
        "--region",
        "-r",
        help="Region (default: the provider's default region).",
        show_default=False,
    ),
]


def check_cmd(
    provider: Annotated[
        list[str] | None,
        typer.Option(
            "--provider", "-p", help="Check only these providers (repeatable).", show_default=False
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Which providers are usable here, and why not (no secret is ever printed)."""
    from spotwise import cloud

    result = cloud.check(provider or None)
    emit(result, json_out, _print_check)
    if provider and not all(p["usable"] for p in result["providers"]):
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
    """Instance types of a provider: vCPUs, memory, GPUs and on-demand price."""
    from spotwise import cloud

    result = cloud.catalog(provider, region, gpu=gpu, min_vcpus=min_vcpus)
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
        int,
        typer.Option(
            "--limit", min=0, help="Rows to show in the table (0 = all; --json prints all)."
        ),
    ] = 40,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Prices sorted from cheapest, spot with on-demand joined (cached in the store)."""
    from spotwise import cloud
    from spotwise.providers.base import Market

    market = None if spot is None else (Market.SPOT if spot else Market.ON_DEMAND)
    result = cloud.prices(provider, region, instance_type, market, history=history, db=db)
    emit(result, json_out, lambda r: _print_prices(r, limit))


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


def _print_check(result: dict[str, Any]) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table("provider", "usable", "why", "details")
    for p in result["providers"]:
        ok = "[green]yes[/]" if p["usable"] else "[red]no[/]"
        details = ", ".join(f"{k}={v}" for k, v in p["details"].items())
        table.add_row(p["provider"], ok, escape(p["reason"]), escape(details))
    _console().print(table)


def _print_catalog(result: dict[str, Any]) -> None:
    from rich.table import Table

    rows = result["instance_types"]
    title = f"{result['provider']} {result['region'] or ''}".strip()
    if result.get("on_demand_source"):
        title += f" (on-demand prices: {result['on_demand_source']})"
    table = Table(
        "region",
        "instance type",
        "vCPUs",
        "memory GiB",
        "GPUs",
        "arch",
        "on-demand $/h",
        title=title,
    )
    for r in rows:
        gpus = f"{r['gpus']}× {r['gpu_name']}" if r["gpus"] else "—"
        table.add_row(
            r["region"],
            r["name"],
            str(r["vcpus"]),
            f"{r['memory_gb']:g}",
            gpus,
            r["architecture"],
            _usd(r["on_demand_price_per_hour"]),
        )
    _console().print(table)
    _console().print(f"[dim]{len(rows)} instance types[/]")


def _print_prices(result: dict[str, Any], limit: int) -> None:
    from rich.table import Table

    rows = result["prices"]
    shown = rows if limit == 0 else rows[:limit]
    console = _console()
    if "history" in result:
        h = result["history"]
        table = Table(
            "time",
            "zone",
            "instance type",
            "spot $/h",
            title=f"{result['provider']} spot price history, {_when(h['start'])} → "
            f"{_when(h['end'])}",
        )
        for r in shown:
            table.add_row(
                _when(r["observed_at"]), r["zone"], r["instance_type"], _usd(r["price_per_hour"])
            )
    else:
        title = f"{result['provider']} {result['region'] or ''} prices".replace("  ", " ")
        if result.get("source") == "cache":
            title += f" [yellow](cached: {result.get('error', 'provider unreachable')})[/]"
        table = Table(
            "zone",
            "instance type",
            "market",
            "$/h",
            "on-demand $/h",
            "saving",
            "vCPUs",
            "GPUs",
            title=title,
        )
        for r in shown:
            saving = "—" if r.get("savings") is None else f"{100 * r['savings']:.0f}%"
            gpus = f"{r.get('gpus')}× {r.get('gpu_name')}" if r.get("gpus") else "—"
            market = r["market"] if r.get("available", True) else f"{r['market']} (none now)"
            table.add_row(
                r["zone"],
                r["instance_type"],
                market,
                _usd(r["price_per_hour"]),
                _usd(r.get("on_demand_price_per_hour")),
                saving,
                str(r.get("vcpus", "—")),
                gpus,
            )
    console.print(table)
    more = f" (showing {len(shown)}; --limit 0 for all)" if len(shown) < len(rows) else ""
    source = result.get("on_demand_source")
    note = f" · on-demand prices: {source}" if source else ""
    console.print(f"[dim]{len(rows)} prices{more}{note}[/]")
