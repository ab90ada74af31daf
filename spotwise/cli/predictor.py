"""``spotwise predictor train | eval | forecast``: the revocation predictors on the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="Revocation predictors: train on a spot trace, evaluate, forecast offers.",
    no_args_is_help=True,
)

Traces = Annotated[
    Path,
    typer.Option(
        "--traces", help="SkyNomad CSV (file or folder) or a folder of Can't Be Late JSON files"
    ),
]
Horizon = Annotated[str, typer.Option("--horizon", help="revocation horizon: 90s, 30m, 1h, 2d …")]
Json = Annotated[bool, typer.Option("--json", help="print one JSON document to stdout")]


def _console() -> Any:
    from rich.console import Console

    return Console()


def _seconds(text: str, field: str = "--horizon") -> float:
    from spotwise.predictors._units import parse_duration

    return parse_duration(text, field=field)


@app.command()
def train(
    traces: Traces,
    out: Annotated[Path, typer.Option("--out", help="model file to write")],
    horizon: Horizon = "1h",
    model: Annotated[
        str, typer.Option("--model", help="lstm, logistic, persistence or base-rate")
    ] = "lstm",
    until: Annotated[
        float,
        typer.Option(
            "--until", help="train on the first fraction of ticks (0.7 = the eval's training part)"
        ),
    ] = 1.0,
    as_json: Json = False,
) -> None:
    """Train a revocation model on a trace and save it (state dict + plain config)."""
    from spotwise.predictors.service import train_model

    res = train_model(traces, _seconds(horizon), out, model, until, verbose=not as_json)
    if as_json:
        typer.echo(json.dumps(res))
        return
    _console().print(
        f"[bold]{res['model']}[/] trained on ticks "
        f"{res['train_ticks'][0]}..{res['train_ticks'][1]} "
        f"of {res['n_ticks']} in {res['fit_seconds']} s → {res['out']} ({res['bytes']} bytes)"
    )


@app.command("eval")
def eval_(
    traces: Traces,
    horizon: Horizon = "1h",
    model: Annotated[
        Path | None,
        typer.Option("--model", help="a saved model to score in place of a fresh one of its kind"),
    ] = None,
    models: Annotated[
        str, typer.Option("--models", help="comma-separated models to fit and score")
    ] = "base-rate,persistence,logistic,lstm",
    train_on: Annotated[
        Path | None,
        typer.Option("--train-on", help="transfer: fit on all of this trace set instead"),
    ] = None,
    test_fraction: Annotated[
        float, typer.Option("--test-fraction", help="later share of ticks kept for testing")
    ] = 0.3,
    as_json: Json = False,
) -> None:
    """Fit on the earlier part of the trace, score every model on the same later ticks."""
    from spotwise.predictors.service import evaluate_path

    names = tuple(n.strip() for n in models.split(",") if n.strip())
    res = evaluate_path(traces, _seconds(horizon), model, names, train_on, test_fraction)
    if as_json:
        typer.echo(json.dumps(res))
        return
    from rich.table import Table

    t = Table(
        title=f"revocation within {horizon} — "
        f"test ticks {res['split']['test_ticks']} of {res['dataset']}"
    )
    for col in ("model", "AUC", "Brier", "log loss", "ECE", "n_test", "positives", "note"):
        t.add_column(col, justify="left" if col in ("model", "note") else "right")
    for r in res["rows"]:
        t.add_row(
            r["name"],
            f"{r['auc']:.4f}",
            f"{r['brier']:.4f}",
            f"{r['log_loss']:.4f}",
            f"{r['ece']:.4f}",
            str(r["n_test"]),
            str(r["positives"]),
            r.get("note", ""),
        )
    _console().print(t)


@app.command()
def forecast(
    provider: Annotated[
        str,
        typer.Option("--provider", help="local (replay of the shipped trace), aws, gcp or azure"),
    ] = "local",
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="ISO time (UTC if naive) or hours after the trace start; default: its last tick",
        ),
    ] = None,
    model: Annotated[
        Path | None, typer.Option("--model", help="a saved model; default: the shipped one")
    ] = None,
    horizon: Annotated[
        str | None, typer.Option("--horizon", help="must match the model's horizon")
    ] = None,
    as_json: Json = False,
) -> None:
    """Revocation risk of each spot offer of a provider, lowest risk first."""
    from spotwise.predictors.service import forecast as run

    res = run(provider, at, model, _seconds(horizon) if horizon else None)
    if as_json:
        typer.echo(json.dumps(res))
        return
    from rich.table import Table

    from spotwise.predictors._units import format_duration

    h = res.get("horizon_s")
    t = Table(
        title=f"{res['provider']} spot offers at {res['at']} — "
        f"P(revoked within {format_duration(h) if h else '?'})"
    )
    for col in ("zone", "instance type", "price $/h", "available", "p_revoke"):
        t.add_column(col, justify="left" if col in ("zone", "instance type") else "right")
    for r in res["offers"]:
        p = "n/a" if r["p_revoke"] is None else f"{r['p_revoke']:.3f}"
        t.add_row(
            r["zone"],
            r["instance_type"],
            f"{r['price_per_hour']:.4f}",
            "yes" if r["available"] else "no",
            p,
        )
    c = _console()
    c.print(t)
    c.print(f"[dim]{res['note']}[/]")
