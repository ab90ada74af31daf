"""``spotwise predictor train | eval | forecast``: the revocation predictors on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from spotwise.cli.options import PredictorJsonOpt
from spotwise.cli.output import emit, print_table

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


def _console() -> Any:
    from rich.console import Console

    return Console()


def _seconds(text: str, field: str = "--horizon") -> float:
    from spotwise.units import parse_duration

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
    as_json: PredictorJsonOpt = False,
) -> None:
    """Train a revocation model on a trace and save it (state dict + plain config)."""
    from spotwise.predictors.service import train_model

    res = train_model(traces, _seconds(horizon), out, model, until, verbose=not as_json)
    emit(res, as_json, _print_train)


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
    as_json: PredictorJsonOpt = False,
) -> None:
    """Fit on the earlier part of the trace, score every model on the same later ticks."""
    from spotwise.predictors.service import evaluate_path

    names = tuple(n.strip() for n in models.split(",") if n.strip())
    res = evaluate_path(traces, _seconds(horizon), model, names, train_on, test_fraction)
    emit(res, as_json, lambda r: _print_eval(r, horizon))


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
    as_json: PredictorJsonOpt = False,
) -> None:
    """Revocation risk of each spot offer of a provider, lowest risk first."""
    from spotwise.predictors.service import forecast as run

    res = run(provider, at, model, _seconds(horizon) if horizon else None)
    emit(res, as_json, _print_forecast)


# ---- rendering ------------------------------------------------------------------------------
def _print_train(res: dict[str, Any]) -> None:
    _console().print(
        f"[bold]{res['model']}[/] trained on ticks "
        f"{res['train_ticks'][0]}..{res['train_ticks'][1]} "
        f"of {res['n_ticks']} in {res['fit_seconds']} s → {res['out']} ({res['bytes']} bytes)"
    )


def _print_eval(res: dict[str, Any], horizon: str) -> None:
    rows = [
        (
            r["name"],
            f"{r['auc']:.4f}",
            f"{r['brier']:.4f}",
            f"{r['log_loss']:.4f}",
            f"{r['ece']:.4f}",
            str(r["n_test"]),
            str(r["positives"]),
            r.get("note", ""),
        )
        for r in res["rows"]
    ]
    print_table(
        f"revocation within {horizon} — "
        f"test ticks {res['split']['test_ticks']} of {res['dataset']}",
        ("model", "AUC", "Brier", "log loss", "ECE", "n_test", "positives", "note"),
        rows,
        left=("model", "note"),
    )


def _print_forecast(res: dict[str, Any]) -> None:
    from spotwise.units import format_duration

    h = res.get("horizon_s")
    rows = [
        (
            r["zone"],
            r["instance_type"],
            f"{r['price_per_hour']:.4f}",
            "yes" if r["available"] else "no",
            "n/a" if r["p_revoke"] is None else f"{r['p_revoke']:.3f}",
        )
        for r in res["offers"]
    ]
    print_table(
        f"{res['provider']} spot offers at {res['at']} — "
        f"P(revoked within {format_duration(h) if h else '?'})",
        ("zone", "instance type", "price $/h", "available", "p_revoke"),
        rows,
        left=("zone", "instance type"),
    )
    _console().print(f"[dim]{res['note']}[/]")
