"""``spotwise predictor train | eval | forecast``: the revocation predictors on the command line."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from spotwise.cli.options import PredictorJsonOpt
from spotwise.cli.output import emit

app = typer.Typer(
    help="Revocation predictors: train on a spot trace, evaluate, forecast offers.\n\n"
    "Examples:\n"
    "  spotwise predictor eval --traces builtin:skynomad-v100-2023\n"
    "  spotwise predictor forecast --at 36h",
    no_args_is_help=True,
)

_TRACE_FORMS = (
    "a SkyNomad CSV (file or folder), a folder of Can't Be Late JSON files, or "
    "builtin:skynomad-v100-2023 (the shipped SkyNomad V100 trace: spotwise/data/skynomad-v100-2023 "
    "in the installed package)"
)
Traces = Annotated[str, typer.Option("--traces", help=f"the trace: {_TRACE_FORMS}")]
Horizon = Annotated[
    str,
    typer.Option(
        "--horizon",
        help="revocation horizon: 90s, 30m, 1h, 2d … (a bare number is seconds, unlike "
        "forecast --at's hours); at least one tick of the trace",
    ),
]


def _console() -> Any:
    from rich.console import Console

    return Console()


def _seconds(text: str, field: str = "--horizon") -> float:
    from spotwise.units import parse_duration

    return parse_duration(text, field=field)


@app.command()
def train(
    traces: Traces,
    out: Annotated[str, typer.Option("--out", help="model file to write (its folder must exist)")],
    horizon: Horizon = "1h",
    model: Annotated[
        str, typer.Option("--model", help="lstm, logistic, persistence or base-rate")
    ] = "lstm",
    until: Annotated[
        float,
        typer.Option(
            "--until",
            help="train on this first share of the ticks, in (0, 1]: 0.7 for a model predictor "
            "eval can score (it tests on the last 30 % and refuses a model trained there); 1 "
            "(all ticks) for a model only used to forecast",
        ),
    ] = 1.0,
    as_json: PredictorJsonOpt = False,
) -> None:
    r"""Train a revocation model on a trace and save it (state dict + plain config).

    --until 0.7 keeps the last 30 % of the trace unseen, so that predictor eval (which tests
    on that part) can score the model; --until 1, the default, uses every tick, for a model
    you will only forecast with. The file records the ticks it was trained on.

    Examples:
      spotwise predictor train --traces builtin:skynomad-v100-2023 --out lstm.pt \
        --until 0.7
      spotwise predictor train --traces builtin:skynomad-v100-2023 --out lr.pt \
        --model logistic
    """
    from spotwise.predictors.service import train_model

    res = train_model(traces, _seconds(horizon), out, model, until, verbose=not as_json)
    emit(res, as_json, _print_train)


@app.command("eval")
def eval_(
    traces: Traces,
    horizon: Horizon = "1h",
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="a saved model to score in place of a fresh one of its kind (refused if it "
            "was trained on the test ticks: train it with --until 0.7)",
        ),
    ] = None,
    models: Annotated[
        str, typer.Option("--models", help="comma-separated models to fit and score")
    ] = "base-rate,persistence,logistic,lstm",
    train_on: Annotated[
        str | None,
        typer.Option(
            "--train-on",
            help="transfer: fit on all of this trace instead (same forms as --traces)",
        ),
    ] = None,
    test_fraction: Annotated[
        float,
        typer.Option(
            "--test-fraction", help="later share of the ticks kept for testing, in (0, 1)"
        ),
    ] = 0.3,
    as_json: PredictorJsonOpt = False,
) -> None:
    r"""Fit on the earlier part of the trace, score every model on the same later ticks.

    Examples:
      spotwise predictor eval --traces builtin:skynomad-v100-2023 --json
      spotwise predictor eval --traces builtin:skynomad-v100-2023 --horizon 30m \
        --models base-rate,logistic
    """
    from spotwise.predictors.service import evaluate_path

    names = tuple(n.strip() for n in models.split(",") if n.strip())
    res = evaluate_path(traces, _seconds(horizon), model, names, train_on, test_fraction)
    for line in res.get("warnings", []):
        typer.echo(f"warning: {line}", err=True)
    emit(res, as_json, _print_eval)


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
            help="ISO time (UTC if naive) or hours after the trace start (36, 36h, 1d12h); "
            "default: its last tick; --provider local only",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="a saved model; default: the shipped one; --provider local only"
        ),
    ] = None,
    horizon: Annotated[
        str | None,
        typer.Option(
            "--horizon",
            help="must match the model's horizon: 30m, 1h … (a bare number is seconds); "
            "--provider local only",
        ),
    ] = None,
    as_json: PredictorJsonOpt = False,
) -> None:
    """Revocation risk of each spot offer of a provider, lowest risk first.

    Examples:
      spotwise predictor forecast
      spotwise predictor forecast --at 36h --json
    """
    from spotwise.cli.cloud import provider_option
    from spotwise.predictors.service import forecast as run

    if horizon:
        _seconds(horizon)  # a typo is refused first; the text goes on: a bare number is seconds
    res = run(provider_option(provider), at, model, horizon or None)
    emit(res, as_json, _print_forecast)


# ---- rendering ------------------------------------------------------------------------------
def _table(title: str | None, columns: list[tuple[str, str]], rows: list[list[str]]) -> Any:
    """A table whose ``name`` columns (values a user copies) never wrap and fold rather than
    end in "…"; ``number`` columns are right-aligned and ``text`` columns wrap."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    for header, kind in columns:
        if kind == "name":
            t.add_column(header, no_wrap=True, overflow="fold")
        elif kind == "number":
            t.add_column(header, justify="right", no_wrap=True)
        else:
            t.add_column(header, overflow="fold")
    for r in rows:
        t.add_row(*(escape(c) for c in r))
    return t


def _print_train(res: dict[str, Any]) -> None:
    _console().print(
        f"[bold]{res['model']}[/] trained on ticks "
        f"{res['train_ticks'][0]}..{res['train_ticks'][1]} "
        f"of {res['n_ticks']} in {res['fit_seconds']} s → {res['out']} ({res['bytes']} bytes)"
    )


def _print_eval(res: dict[str, Any]) -> None:
    from rich.markup import escape

    from spotwise.units import format_duration

    horizon = format_duration(res["horizon_s"])
    split = res["split"]
    counts = {(r["n_test"], r["positives"]) for r in res["rows"]}
    same = len(counts) == 1  # always, by the protocol: one set of test ticks for every model
    notes = any(r.get("note") for r in res["rows"])
    columns = [("model", "name"), ("AUC", "number"), ("Brier", "number")]
    columns += [("log loss", "number"), ("ECE", "number")]
    columns += [] if same else [("n_test", "number"), ("revoked", "number")]
    columns += [("note", "text")] if notes else []
    rows = []
    for r in res["rows"]:
        cells = [r["name"]] + [f"{r[k]:.4f}" for k in ("auc", "brier", "log_loss", "ece")]
        cells += [] if same else [str(r["n_test"]), str(r["positives"])]
        rows.append(cells + ([r.get("note", "")] if notes else []))
    lo, hi = split["test_ticks"]
    title = f"revocation within {horizon}: test ticks {lo}..{hi} of {split['n_ticks']}"
    console = _console()
    console.print(_table(title, columns, rows))
    if same and counts:
        n, pos = counts.pop()
        console.print(f"{n} test samples (zone × tick), {pos} revoked within {horizon}")
    if res.get("train_dataset"):
        console.print(f"fitted on all of: {escape(res['train_dataset'])}", soft_wrap=True)
    console.print(f"trace: {escape(res['dataset'])}", soft_wrap=True)


def _print_forecast(res: dict[str, Any]) -> None:
    from datetime import datetime

    from rich.markup import escape

    from spotwise.units import format_duration

    h = res.get("horizon_s")
    at = datetime.fromisoformat(res["at"]).strftime("%Y-%m-%d %H:%M UTC")
    columns = [("zone", "name"), ("instance type", "name"), ("$/h", "number")]
    columns += [("available", "number"), ("p_revoke", "number")]
    rows = [
        [
            r["zone"],
            r["instance_type"],
            f"{r['price_per_hour']:.4f}",
            "yes" if r["available"] else "no",
            "n/a" if r["p_revoke"] is None else f"{r['p_revoke']:.3f}",
        ]
        for r in res["offers"]
    ]
    console = _console()
    console.print(_table(f"{res['provider']} spot offers at {at}", columns, rows))
    if h:
        console.print(f"p_revoke: P(revoked within {format_duration(h)})")
    console.print(f"[dim]{escape(res['note'])}[/]")
