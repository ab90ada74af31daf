"""``spotwise curve fit | eval``: EarlyCurve and its baselines on learning curves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from spotwise.cli.options import PredictorJsonOpt
from spotwise.cli.output import emit

app = typer.Typer(
    help="Learning curves: fit EarlyCurve, predict final values, compare with baselines.\n\n"
    "Examples:\n"
    "  spotwise curve eval --curves builtin:lcbench-subset\n"
    "  spotwise curve fit builtin:lcbench-subset --curve-id 20 --theta 0.3",
    no_args_is_help=True,
)

Metric = Annotated[
    str | None,
    typer.Option(
        "--metric",
        help="value column; default: 'value' (or the only metric column) in a long CSV, "
        "val_accuracy in LCBench",
    ),
]
Direction = Annotated[
    str | None,
    typer.Option(
        "--direction",
        help="maximize or minimize (max/min also work); leave it out to infer it from the "
        "metric name, else the data",
    ),
]


@app.command()
def fit(
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="long CSV (curve_id, step, value[, lr][, seconds]), an LCBench folder, or "
            "builtin:lcbench-subset (the shipped one)",
        ),
    ],
    curve_id: Annotated[str, typer.Option("--curve-id", help="which curve")],
    metric: Metric = None,
    theta: Annotated[
        float,
        typer.Option(
            "--theta", help="observe only the first θ of the curve (the rest is drawn as ○)"
        ),
    ] = 1.0,
    total_steps: Annotated[
        float | None,
        typer.Option(
            "--total-steps", help="predict the value at this step (default: the curve's last)"
        ),
    ] = None,
    direction: Direction = None,
    as_json: PredictorJsonOpt = False,
) -> None:
    """Fit one curve, print the stages and the predicted final value, and draw it.

    Examples:
      spotwise curve fit builtin:lcbench-subset --curve-id 20 --theta 0.3
      spotwise curve fit builtin:lcbench-subset --curve-id 40 --json
    """
    from spotwise.errors import SpecError
    from spotwise.predictors.curve_service import curve_fit
    from spotwise.predictors.curves import check_theta, resolve_metric

    check_theta(theta, whole=True)
    if total_steps is not None and not total_steps > 0:
        raise SpecError(f"--total-steps must be a positive number of steps, got {total_steps:g}")
    metric = resolve_metric(file, metric, "FILE")
    r = curve_fit(file, curve_id, metric, theta, total_steps, parse_direction(direction))
    f, n = r["fit"], r["observed"]
    if total_steps is not None and total_steps < f.last_step:
        raise SpecError(
            f"--total-steps {total_steps:g} is before the last observed step {f.last_step:g}; "
            "pass at least that, or leave it out"
        )
    out = {
        "curve_id": r["curve_id"],
        "metric": metric,
        "observed_points": n,
        "last_observed_step": _step(f.last_step),
        "observed_last": r["observed_last"],
        "total_steps": _step(r["total_steps"]),
        "final": f.final,
        "final_kind": "fitted" if r["total_steps"] == f.last_step else "forecast",
        "band": list(f.band),
        "true_final": r["true_final"],
        "direction": f.direction,
        "stages": f.params,
        "boundaries": f.boundaries,
        "shrink": f.shrink,
        "note": f.note,
        "fit_ms": round(f.fit_ms, 3),
    }
    emit(out, as_json, lambda _: _print_fit(r, out))


def _step(x: float) -> float | int:
    """A step as written: ``50`` for 50.0, ``0.5`` stays."""
    return int(x) if float(x).is_integer() else float(x)


def _print_fit(r: dict[str, Any], out: dict[str, Any]) -> None:
    """The stages, the final value (fitted or forecast, beside the observed one), the plot."""
    f, c, n, metric = r["fit"], r["curve"], r["observed"], out["metric"]
    import numpy as np
    from rich.console import Console

    from spotwise.predictors._textplot import curve_plot

    con = Console()
    con.print(
        f"[bold]curve {r['curve_id']}[/] {metric}: {n} of {r['points']} points observed, "
        f"{f.direction}imize-type, fit in {f.fit_ms:.1f} ms"
    )
    for st, s in zip(f.stages, f.params, strict=True):
        a0, a1, a2, a3 = _shown(s, st, f.total_steps)
        q = f"{_num(a0)}·k² {_signed(a1)}·k {_signed(a2)}"
        shape = f"1/({q}) {_signed(a3)}" if st.kind == "curve" else f"constant {st.offset:.4g}"
        con.print(f"  stage from step {s['start']:g}: {shape}", highlight=False)
    if f.note:
        con.print(f"  [dim]{f.note}[/]", highlight=False)
    band = f"band [{f.band[0]:.4g}, {f.band[1]:.4g}]"
    seen = f"{r['observed_last']:.4g}"
    if out["final_kind"] == "fitted":  # nothing held out and nothing to forecast
        con.print(
            f"  fitted value at the last step {r['total_steps']:g}: [bold]{f.final:.4g}[/]  "
            f"{band}\n  observed there: {seen} "
            "(to forecast: --theta < 1 or a later --total-steps)",
            highlight=False,
        )
    else:
        truth = "" if r["true_final"] is None else f", true final: {r['true_final']:.4g}"
        con.print(
            f"  predicted final at step {r['total_steps']:g}: [bold]{f.final:.4g}[/]  {band}\n"
            f"  last observed: {seen} at step {f.last_step:g}{truth}",
            highlight=False,
        )
    grid = np.linspace(float(c.steps[0]), float(r["total_steps"]), 64)
    hidden = (c.steps[n:].tolist(), c.values[n:].tolist()) if n < len(c.steps) else None
    for line in curve_plot(
        (c.steps[:n].tolist(), c.values[:n].tolist()),
        (grid.tolist(), f.predict(grid).tolist()),
        hidden,
        f.band,
    ):
        con.print(line, highlight=False)
    con.print("[dim]● observed  · fit / forecast  ○ held out  ┆ band of the final value[/]")


_DIRECTIONS = {"maximize": "max", "max": "max", "minimize": "min", "min": "min"}


def parse_direction(value: str | None) -> str | None:
    """``--direction``: maximize/minimize (or max/min) as the predictors' ``max``/``min``."""
    from spotwise.errors import SpecError

    if value is None:
        return None
    d = _DIRECTIONS.get(value.strip().lower())
    if d is None:
        raise SpecError(
            f"--direction must be maximize or minimize (or max/min; leave it out to infer it), "
            f"got {value!r}"
        )
    return d


def _methods(methods: str) -> tuple[str, ...]:
    """``--methods``: comma-separated curve predictors, each checked by name."""
    from spotwise.errors import SpecError, did_you_mean
    from spotwise.predictors.earlycurve import CURVE_METHODS

    valid = ", ".join(CURVE_METHODS)
    names = tuple(m.strip() for m in methods.split(",") if m.strip())
    if not names:
        raise SpecError(f"--methods is empty; name one or more of {valid}")
    for name in names:
        if name not in CURVE_METHODS:
            raise SpecError(
                f"--methods: unknown method {name!r}"
                f"{did_you_mean(name, list(CURVE_METHODS))}; valid: {valid}"
            )
    return names


_NEGLIGIBLE = 1e-12  # a term below this share of its stage's largest one is printed as 0


def _shown(s: dict[str, float], st: Any, total_steps: float) -> tuple[float, float, float, float]:
    """A stage's A0..A3 as printed: a coefficient whose term never reaches 1e-12 of the
    largest one over the stage's steps (k from 1 to its last) is 0 (a fit's −7.6e-230·k² is
    a zero, not a number for a reader)."""
    last = min(float(st.stop), float(total_steps))
    k = max(1.0, (last - float(st.start)) / float(st.unit) + 1.0)
    a0, a1, a2, a3 = (float(s[n]) for n in ("A0", "A1", "A2", "A3"))
    terms = (abs(a0) * k * k, abs(a1) * k, abs(a2))
    big = max(terms)
    a0, a1, a2 = (
        0.0 if t < _NEGLIGIBLE * big else a for a, t in zip((a0, a1, a2), terms, strict=True)
    )
    q = [abs(a0 * x * x + a1 * x + a2) for x in (1.0, k)]  # 1/q's size over the stage
    value = max((1.0 / v for v in q if v > 0), default=0.0)
    return a0, a1, a2, 0.0 if abs(a3) < _NEGLIGIBLE * value else a3


def _num(x: float) -> str:
    return f"{'−' if x < 0 else ''}{abs(x):.4g}"


def _signed(x: float) -> str:
    return f"{'−' if x < 0 else '+'} {abs(x):.4g}"


@app.command("eval")
def eval_(
    curves: Annotated[
        Path,
        typer.Option(
            "--curves",
            help="long CSV, an LCBench folder, or builtin:lcbench-subset (the shipped one)",
        ),
    ],
    metric: Metric = None,
    theta: Annotated[
        float, typer.Option("--theta", help="fraction of each curve observed, in (0, 1)")
    ] = 0.3,
    methods: Annotated[
        str, typer.Option("--methods", help="comma-separated curve predictors")
    ] = "earlycurve,last-value,mean-last-k,power-law",
    direction: Direction = None,
    as_json: PredictorJsonOpt = False,
) -> None:
    """Predict each curve's final value from its first θ: MAE, Spearman, top-10% recall.

    Examples:
      spotwise curve eval --curves builtin:lcbench-subset
      spotwise curve eval --curves builtin:lcbench-subset --theta 0.5 --json
    """
    from spotwise.predictors.curve_service import curve_eval
    from spotwise.predictors.curves import check_theta, resolve_metric

    check_theta(theta)
    names = _methods(methods)
    d = parse_direction(direction)
    metric = resolve_metric(curves, metric, "--curves")
    res = curve_eval(curves, metric, theta, names, d)
    for line in res.get("warnings", []):  # curves that end at different steps (review-am F11)
        typer.echo(f"warning: {line}", err=True)
    emit(res, as_json, lambda r: _print_eval(r, str(metric), theta))


def _print_eval(res: dict[str, Any], metric: str, theta: float) -> None:
    """The comparison table (every value ``no_wrap``: never cut), then its legend."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(
        title=f"{metric} at θ = {theta:g} ({res['rows'][0]['n_curves']} curves, "
        f"{res['direction']}imize)",
    )
    t.add_column("method", no_wrap=True, overflow="fold")
    for col in ("MAE", "Spearman", "top-10%", "band", "ms/curve"):
        t.add_column(col, justify="right", overflow="fold")
    for r in res["rows"]:
        t.add_row(
            r["name"],
            f"{r['mae']:.4f}",  # fixed decimals: 2.3600 beside 1.9290, not 2.36
            f"{r['spearman']:.4f}",
            f"{r['top10_recall_at_25']:.3f}",
            f"{r['band_coverage']:.3f}",
            f"{r['fit_ms_per_curve']:.2f}",
        )
    con = Console()
    con.print(t)
    con.print(
        "[dim]top-10%: share of the true top 10 % among the predicted top 25 %; "
        "band: share of true finals inside the 95 % band[/]",
        highlight=False,
    )
    skipped = res.get("skipped") or []
    if skipped:
        shown = ", ".join(escape(s) for s in skipped[:5]) + (", …" if len(skipped) > 5 else "")
        con.print(
            f"[dim]skipped {len(skipped)} curve{'s' * (len(skipped) != 1)} with fewer than 3 "
            f"finite points: {shown}[/]",
            highlight=False,
        )
