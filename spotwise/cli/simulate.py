"""``spotwise simulate``: measure policies on replayed spot traces and recorded learning curves.

``spotwise simulate --traces T --curves C --policy a,b`` runs a tuning job per policy on a
virtual clock; ``spotwise simulate deadline --traces DIR`` replays the "Can't Be Late" setting.
Heavy imports stay inside the commands (``spotwise --help`` stays fast).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from spotwise.cli.options import JsonOpt
from spotwise.cli.simulate_checks import (
    check_file,
    load_traces_ref,
    reject_group_options,
    sim_direction,
    spec_errors,
)
from spotwise.errors import SpecError

if TYPE_CHECKING:
    from spotwise.planner.sim_suite import Risk
    from spotwise.traces import TraceSet

app = typer.Typer(
    help="Measure policies on replayed spot traces before spending money.\n\n"
    "Without a subcommand: a tuning job per policy on the same traces, curves and seeds, on a "
    'virtual clock. `simulate deadline`: one long job with a deadline ("Can\'t Be Late").\n\n'
    "Examples:\n"
    "  spotwise simulate --traces builtin:skynomad-v100-2023 \\\n"
    "    --curves builtin:lcbench-subset --seeds 1 --policy asha,spotwise\n"
    "  spotwise simulate deadline --traces builtin:skynomad-v100-2023 --starts 30",
    invoke_without_command=True,
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

SHIPPED_TRACE = "builtin:skynomad-v100-2023"
SHIPPED_CURVES = Path(__file__).resolve().parent.parent / "data" / "lcbench-subset"
SHIPPED_CURVES_REF = "builtin:lcbench-subset"  # SHIPPED_CURVES, from any folder
_TRACES_HELP = (
    f"{SHIPPED_TRACE} (shipped), a SkyNomad CSV (file or folder) or a folder of Can't Be Late "
    "JSON traces."
)
TracesOpt = Annotated[str | None, typer.Option("--traces", help=_TRACES_HELP)]
SpotPriceOpt = Annotated[
    float | None,
    typer.Option(
        "--spot-price",
        help="Spot $/h of every zone (default: the trace's prices; the paper's 0.9731 for a "
        "trace without).",
    ),
]
OdPriceOpt = Annotated[
    float | None,
    typer.Option("--on-demand-price", help="On-demand $/h (default: the trace's, else 3.06)."),
]
DlSpotPriceOpt = Annotated[
    float | None,
    typer.Option(
        "--spot-price",
        help="Spot $/h, flat in every zone and tick (default: the trace's price at each tick; "
        "the paper's 0.9731 for a trace without prices).",
    ),
]
DlOdPriceOpt = Annotated[
    float | None,
    typer.Option(
        "--on-demand-price",
        help="On-demand $/h; costs are normalised by the job's cost at this price (default: "
        "the paper's 3.06, even on a trace that has its own).",
    ),
]
ModelOpt = Annotated[
    str,
    typer.Option(
        "--revocation-model",
        help="pretrained (the shipped model), none (no forecast), or a model fitted here on the "
        "trace before --start-from (the first 70% if --start-from is below 0.2): lstm, "
        "logistic, persistence, base-rate. Only spottune and spotwise read it: for other "
        "policies none is computed.",
    ),
]
StartFromOpt = Annotated[
    float,
    typer.Option(
        "--start-from",
        help="Sample start points from this fraction of the trace on, in [0, 1) "
        "(0.7: the part the shipped revocation model did not train on).",
    ),
]
WorkersOpt = Annotated[int, typer.Option("--workers", help="Processes to use.", min=1)]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Also write the JSON result to this file (its folder must exist)."),
]
TUNING_DEFAULT = "on-demand,spot-greedy,asha,spottune,spotwise"
DEADLINE_DEFAULT = "on-demand,greedy,uniform-progress,spotwise"


def _policy_opt(default: str) -> Any:
    return typer.Option(
        "--policy",
        help=f"Comma-separated policy names (default: {default.replace(',', ', ')}).",
        show_default=False,
    )


@app.callback()
def simulate(
    ctx: typer.Context,
    traces: TracesOpt = None,
    curves: Annotated[
        Path | None,
        typer.Option(
            "--curves",
            help=f"{SHIPPED_CURVES_REF} (shipped), an LCBench folder or a long CSV (curve_id, "
            "step, value[, lr][, seconds]).",
        ),
    ] = None,
    policy: Annotated[str, _policy_opt(TUNING_DEFAULT)] = TUNING_DEFAULT,
    trials: Annotated[
        int, typer.Option("--trials", help="Trials per job (drawn from the curve pool).", min=1)
    ] = 100,
    parallel: Annotated[int, typer.Option("--parallel", help="Trials running at once.", min=1)] = 8,
    seeds: Annotated[
        int, typer.Option("--seeds", help="Repetitions (start point + trial draw).", min=1)
    ] = 3,
    seed: Annotated[int, typer.Option("--seed", help="First seed.")] = 0,
    theta: Annotated[
        float, typer.Option("--theta", help="SpotTune's EarlyCurve fraction θ, in (0, 1).")
    ] = 0.3,
    asha_min_steps: Annotated[
        int, typer.Option("--asha-min-steps", min=1, help="Step of asha's first rung (N·3^k).")
    ] = 1,
    time_scale: Annotated[
        float | None,
        typer.Option(
            "--time-scale",
            help="Market seconds per recorded second of a step (default: 120). Curves without "
            "recorded seconds take 60 s a step, unscaled.",
        ),
    ] = None,
    restart_seconds: Annotated[
        float, typer.Option("--restart-seconds", help="Overhead of every launch.")
    ] = 180.0,
    checkpoint_seconds: Annotated[
        float, typer.Option("--checkpoint-seconds", help="Time to write one checkpoint.")
    ] = 20.0,
    max_cost: Annotated[
        float | None, typer.Option("--max-cost", help="Budget in USD per job.")
    ] = None,
    deadline_hours: Annotated[
        float | None, typer.Option("--deadline-hours", help="Deadline per job.")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            "--metric",
            help="Curve column to optimise (default: val_balanced_accuracy in LCBench; in a "
            "long CSV 'value', else its only metric column).",
        ),
    ] = None,
    direction: Annotated[
        str | None,
        typer.Option(
            "--direction", help="maximize or minimize (max/min also work; default: by metric)."
        ),
    ] = None,
    spot_price: SpotPriceOpt = None,
    on_demand_price: OdPriceOpt = None,
    revocation_model: ModelOpt = "pretrained",
    start_from: StartFromOpt = 0.7,
    window_hours: Annotated[
        float, typer.Option("--window-hours", help="Trace a run may use after its start.")
    ] = 168.0,
    workers: WorkersOpt = 2,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot", help="Draw cost vs. regret per policy (PNG; its folder must exist)."
        ),
    ] = None,
    out: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a tuning job per policy on the same traces, curves and seeds (virtual clock)."""
    if ctx.invoked_subcommand is not None:
        reject_group_options(ctx)
        return
    if traces is None or curves is None:
        raise SpecError(
            "simulate: --traces and --curves are required",
            hint=f"spotwise simulate --traces {SHIPPED_TRACE} --curves {SHIPPED_CURVES_REF}",
        )
    from spotwise.cli.simulate_render import check_plot, emit, tuning_table
    from spotwise.cli.simulate_render import plot as draw
    from spotwise.planner.sim_curves import load_curve_pool
    from spotwise.planner.sim_suite import (
        Suite,
        check_prices,
        check_revocation_model,
        check_time_scale,
        parse_policies,
        run_suite,
        tuning_settings,
    )
    from spotwise.traces import load_traces

    names = parse_policies(policy)
    settings = tuning_settings(
        parallel=parallel,
        time_scale=time_scale,
        restart_s=restart_seconds,
        checkpoint_s=checkpoint_seconds,
        max_cost_usd=max_cost,
        deadline_hours=deadline_hours,
    )
    suite = Suite(
        tuple(names), trials, seeds, seed, theta, settings, start_from, window_hours * 3600,
        asha_min_steps,
    )  # fmt: skip
    check_prices(spot_price, on_demand_price)
    check_revocation_model(revocation_model)
    check_file(out, "--out", "result.json")
    check_file(plot, "--plot", "plot.png")
    if plot is not None:
        check_plot()  # matplotlib, before a run of minutes
    ts = load_traces_ref(traces, load_traces)
    pool = load_curve_pool(curves, metric=metric, direction=sim_direction(direction))
    check_time_scale(pool, time_scale)
    risk = _risk(ts, revocation_model, start_from, names)
    result = run_suite(
        ts,
        pool,
        suite,
        risk,
        spot_price=spot_price,
        on_demand_price=on_demand_price,
        workers=workers,
    )
    emit(result, out, as_json, tuning_table)
    if plot is not None:
        draw(result, plot)


@app.command("deadline")
def deadline(
    traces: Annotated[str, typer.Option("--traces", help=_TRACES_HELP)],
    job_hours: Annotated[
        float, typer.Option("--job-hours", help="Computation time of the job.")
    ] = 48.0,
    deadline_hours: Annotated[
        float, typer.Option("--deadline-hours", help="Deadline after the start.")
    ] = 52.0,
    restart_hours: Annotated[
        float,
        typer.Option("--restart-hours", help="Changeover delay d, in [0, deadline − job]."),
    ] = 0.2,
    policy: Annotated[str, _policy_opt(DEADLINE_DEFAULT)] = DEADLINE_DEFAULT,
    starts: Annotated[
        int, typer.Option("--starts", help="Random start points per zone trace.", min=1)
    ] = 300,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the start points.", min=0)] = 0,
    billing: Annotated[
        str, typer.Option("--billing", help="paper (per second) or aws/gcp/azure.")
    ] = "paper",
    spot_price: DlSpotPriceOpt = None,
    on_demand_price: DlOdPriceOpt = None,
    revocation_model: ModelOpt = "pretrained",
    start_from: StartFromOpt = 0.7,
    workers: WorkersOpt = 2,
    out: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    r"""One long job with a deadline, many random starts (NSDI'24 "Can't Be Late").

    Examples:
      spotwise simulate deadline --traces builtin:skynomad-v100-2023 --starts 30
      spotwise simulate deadline --traces builtin:skynomad-v100-2023 --json \
        --job-hours 24 --deadline-hours 30 --policy greedy,spotwise --starts 30
    """
    from spotwise.cli.simulate_render import deadline_table, emit
    from spotwise.planner.deadline_sim import DeadlineJob, billing_rule, run_deadline_suite
    from spotwise.planner.sim_suite import (
        DEADLINE_POLICIES,
        check_revocation_model,
        check_sampling,
        parse_policies,
    )
    from spotwise.providers.replay import CBL_ON_DEMAND_PRICE
    from spotwise.traces import find_json, load_cbl_folder, load_traces

    names = parse_policies(policy, DEADLINE_POLICIES)
    job = DeadlineJob(
        job_hours * 3600,
        deadline_hours * 3600,
        restart_hours * 3600,
        spot_price,  # None: the trace's per-tick prices (0.9731 flat for a trace without)
        on_demand_price if on_demand_price is not None else CBL_ON_DEMAND_PRICE,
    )
    check_sampling(starts, seed, start_from)
    rule = billing_rule(billing)
    check_revocation_model(revocation_model)
    check_file(out, "--out", "result.json")
    ts = load_traces_ref(
        traces,
        lambda p: load_cbl_folder(p) if p.is_dir() and find_json(p) else load_traces(p),
    )
    risk = _risk(ts, revocation_model, start_from, names) if "spotwise" in names else None
    with spec_errors("simulate deadline"):
        result = run_deadline_suite(
            ts,
            job,
            names,
            starts=starts,
            seed=seed,
            start_from=start_from,
            rule=rule,
            risk=risk.p if risk else None,
            risk_model=risk.model if risk else "none",
            workers=workers,
        )
    emit(result, out, as_json, deadline_table)


# ---- helpers ------------------------------------------------------------------------------


def _risk(ts: TraceSet, model: str, start_from: float, names: list[str]) -> Risk:
    """Revocation risk from the first start point on, if a policy of ``names`` reads it (a
    model fitted here trains on the trace before the first start, 0.7 if that is tiny)."""
    from spotwise.planner.policy import get_policy
    from spotwise.planner.sim_suite import Risk, revocation_risk

    if not any(getattr(get_policy(n), "uses_forecast", False) for n in names):
        return Risk(None, 3600.0, "none (no policy chosen reads a forecast)")  # review-ac F5
    train_fraction = start_from if start_from >= 0.2 else 0.7
    return revocation_risk(ts, model, train_fraction, from_tick=int(start_from * ts.n_ticks))
