"""``spotwise simulate``: measure policies on replayed spot traces and recorded learning curves.

``spotwise simulate --traces T --curves C --policy a,b`` runs a tuning job per policy on a
virtual clock; ``spotwise simulate deadline --traces DIR`` replays the "Can't Be Late" setting.
Heavy imports stay inside the commands (``spotwise --help`` stays fast).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from spotwise.cli.options import JsonOpt
from spotwise.cli.output import print_table
from spotwise.errors import SpecError

if TYPE_CHECKING:
    from spotwise.planner.sim_suite import Risk
    from spotwise.traces import TraceSet

app = typer.Typer(
    help="Measure policies on replayed spot traces before spending money.",
    invoke_without_command=True,
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

TracesOpt = Annotated[
    Path | None,
    typer.Option(
        "--traces", help="SkyNomad CSV (file or folder) or a folder of Can't Be Late JSON traces."
    ),
]
SpotPriceOpt = Annotated[
    float | None,
    typer.Option(
        "--spot-price", help="Spot $/h for traces without prices (default: the paper's 0.9731)."
    ),
]
OdPriceOpt = Annotated[
    float | None,
    typer.Option("--on-demand-price", help="On-demand $/h (default: the trace's, else 3.06)."),
]
ModelOpt = Annotated[
    str,
    typer.Option(
        "--revocation-model",
        help="pretrained (shipped), a model name fitted on the first --train-fraction of the "
        "trace (lstm, logistic, persistence, base-rate), or none.",
    ),
]
StartFromOpt = Annotated[
    float,
    typer.Option(
        "--start-from",
        help="Sample start points from this fraction of the trace on "
        "(0.7: the part the shipped revocation model did not train on).",
    ),
]
PolicyOpt = Annotated[str, typer.Option("--policy", help="Comma-separated policy names.")]
WorkersOpt = Annotated[int, typer.Option("--workers", help="Processes to use.", min=1)]
OutOpt = Annotated[
    Path | None, typer.Option("--out", help="Also write the JSON result to this file.")
]


@app.callback()
def simulate(
    ctx: typer.Context,
    traces: TracesOpt = None,
    curves: Annotated[
        Path | None,
        typer.Option(
            "--curves", help="LCBench folder or long CSV (curve_id, step, value[, lr][, seconds])."
        ),
    ] = None,
    policy: PolicyOpt = "on-demand,spot-greedy,asha,spottune,spotwise",
    trials: Annotated[
        int, typer.Option("--trials", help="Trials per job (drawn from the curve pool).", min=1)
    ] = 100,
    parallel: Annotated[int, typer.Option("--parallel", help="Trials running at once.", min=1)] = 8,
    seeds: Annotated[
        int, typer.Option("--seeds", help="Repetitions (start point + trial draw).", min=1)
    ] = 3,
    seed: Annotated[int, typer.Option("--seed", help="First seed.")] = 0,
    theta: Annotated[
        float, typer.Option("--theta", help="SpotTune's EarlyCurve fraction θ.")
    ] = 0.3,
    time_scale: Annotated[
        float, typer.Option("--time-scale", help="Market seconds per recorded second of a step.")
    ] = 120.0,
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
        str | None, typer.Option("--metric", help="Curve column to optimise (LCBench).")
    ] = None,
    direction: Annotated[
        str | None, typer.Option("--direction", help="maximize or minimize (default: by metric).")
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
        Path | None, typer.Option("--plot", help="Draw cost vs. regret per policy (PNG).")
    ] = None,
    out: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a tuning job per policy on the same traces, curves and seeds (virtual clock)."""
    if ctx.invoked_subcommand is not None:
        return
    if traces is None or curves is None:
        raise SpecError(
            "simulate: --traces and --curves are required",
            hint="spotwise simulate --traces ../shared/data/spot/skynomad-v100-2023 "
            "--curves ../shared/data/curves/lcbench --json",
        )
    from spotwise.planner.sim_curves import load_curve_pool
    from spotwise.planner.sim_suite import Suite, parse_policies, run_suite
    from spotwise.planner.simulator import SimSettings
    from spotwise.traces import load_traces

    names = parse_policies(policy)
    settings = SimSettings(
        parallel=parallel,
        time_scale=time_scale,
        restart_overhead_s=restart_seconds,
        checkpoint_s=checkpoint_seconds,
        max_cost_usd=max_cost,
        deadline_s=deadline_hours * 3600 if deadline_hours else None,
    )
    suite = Suite(
        tuple(names), trials, seeds, seed, theta, settings, start_from, window_hours * 3600
    )
    ts = _load(traces, load_traces)
    pool = load_curve_pool(curves, metric=metric, direction=direction)
    risk = _risk(ts, revocation_model, start_from)
    result = run_suite(
        ts,
        pool,
        suite,
        risk,
        spot_price=spot_price,
        on_demand_price=on_demand_price,
        workers=workers,
    )
    _emit(result, out, as_json, _tuning_table)
    if plot is not None:
        _plot(result, plot)


@app.command("deadline")
def deadline(
    traces: TracesOpt = None,
    job_hours: Annotated[
        float, typer.Option("--job-hours", help="Computation time of the job.")
    ] = 48.0,
    deadline_hours: Annotated[
        float, typer.Option("--deadline-hours", help="Deadline after the start.")
    ] = 52.0,
    restart_hours: Annotated[
        float, typer.Option("--restart-hours", help="Changeover delay d.")
    ] = 0.2,
    policy: PolicyOpt = "on-demand,greedy,uniform-progress,spotwise",
    starts: Annotated[
        int, typer.Option("--starts", help="Random start points per zone trace.", min=1)
    ] = 300,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the start points.")] = 0,
    billing: Annotated[
        str, typer.Option("--billing", help="paper (per second) or aws/gcp/azure.")
    ] = "paper",
    spot_price: SpotPriceOpt = None,
    on_demand_price: OdPriceOpt = None,
    revocation_model: ModelOpt = "pretrained",
    start_from: StartFromOpt = 0.7,
    workers: WorkersOpt = 2,
    out: OutOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One long job with a deadline, many random starts (NSDI'24 "Can't Be Late")."""
    from spotwise.planner.deadline_sim import PAPER_BILLING, DeadlineJob, run_deadline_suite
    from spotwise.planner.sim_suite import parse_policies
    from spotwise.providers.billing import rule_for
    from spotwise.providers.replay import CBL_ON_DEMAND_PRICE, CBL_SPOT_PRICE
    from spotwise.traces import load_cbl_folder, load_traces

    if traces is None:
        raise SpecError(
            "simulate deadline: --traces is required",
            hint="spotwise simulate deadline --traces "
            "../shared/data/spot/cant-be-late-availability/availability/1-node/aws-02-15-2023",
        )
    names = parse_policies(policy)
    with _spec_errors("simulate deadline"):
        job = DeadlineJob(
            job_hours * 3600,
            deadline_hours * 3600,
            restart_hours * 3600,
            spot_price if spot_price is not None else CBL_SPOT_PRICE,
            on_demand_price if on_demand_price is not None else CBL_ON_DEMAND_PRICE,
        )
    rule = PAPER_BILLING if billing == "paper" else rule_for(billing)
    ts = _load(
        traces,
        lambda p: load_cbl_folder(p) if p.is_dir() and any(p.rglob("*.json")) else load_traces(p),
    )
    risk = _risk(ts, revocation_model, start_from) if "spotwise" in names else None
    with _spec_errors("simulate deadline"):
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
    _emit(result, out, as_json, _deadline_table)


# ---- helpers ------------------------------------------------------------------------------


def _risk(ts: TraceSet, model: str, start_from: float) -> Risk:
    """Revocation risk from the first start point on.

    A model fitted here trains on the trace before the first start (0.7 if that is tiny).
    """
    from spotwise.planner.sim_suite import revocation_risk

    train_fraction = start_from if start_from >= 0.2 else 0.7
    return revocation_risk(ts, model, train_fraction, from_tick=int(start_from * ts.n_ticks))


@contextmanager
def _spec_errors(command: str) -> Iterator[None]:
    """A ValueError of the core becomes a one-line SpecError naming the command."""
    try:
        yield
    except ValueError as e:
        raise SpecError(f"{command}: {e}") from None


def _load(path: Path, loader: Any) -> Any:
    if not path.exists():
        raise SpecError(f"--traces: {path} does not exist")
    return loader(path)


def _command() -> str:
    import shlex

    argv = (
        ["spotwise", *sys.argv[1:]] if sys.argv and sys.argv[0].endswith("spotwise") else sys.argv
    )
    return " ".join(shlex.quote(a) for a in argv)


def _emit(result: dict[str, Any], out: Path | None, as_json: bool, table: Any) -> None:
    result["command"] = _command()
    text = json.dumps(result, indent=2, default=_plain)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    if as_json:
        typer.echo(text)
    else:
        table(result)


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    if v != v or v in (float("inf"), float("-inf")):
        return None
    raise TypeError(type(v).__name__)


def _fmt(v: Any, spec: str = ".3g") -> str:
    return "—" if v is None else format(v, spec)


def _tuning_table(r: dict[str, Any]) -> None:
    s = r["settings"]
    rows = [
        (
            name,
            f"{p['cost_usd']:.2f}",
            _fmt(p["cost_vs_on_demand"], ".1%"),
            f"{p['makespan_hours']:.1f}",
            f"{p['regret']:.4g}",
            f"{p['revocations']:.1f}",
            f"{p['lost_hours']:.2f}",
            f"{p['early_stopped']:.1f}",
            f"{p['completed']:.1f}",
        )
        for name, p in r["policies"].items()
    ]
    print_table(
        f"{s['trials']} trials × {len(r['seeds'])} seeds · parallel {s['parallel']} · "
        f"{r['metric']} ({r['direction']}) · revocation model: {r['revocation_model']}",
        (
            "policy",
            "cost $",
            "vs on-demand",
            "makespan h",
            "regret",
            "revocations",
            "lost h",
            "early-stopped",
            "completed",
        ),
        rows,
        left=("policy",),
    )


def _deadline_table(r: dict[str, Any]) -> None:
    rows = [
        (
            name,
            f"{p['mean_cost']:.3f}",
            f"{p['p25_cost']:.3f}",
            f"{p['p50_cost']:.3f}",
            f"{p['p75_cost']:.3f}",
            str(p["misses"]),
            f"{p['mean_spot_hours']:.1f}",
            f"{p['mean_on_demand_hours']:.1f}",
            f"{p['mean_changeovers']:.1f}",
        )
        for name, p in r["policies"].items()
    ]
    print_table(
        f"{r['job_hours']:g} h job, {r['deadline_hours']:g} h deadline, d = "
        f"{r['restart_hours']:g} h · {r['starts_per_zone']} starts × {len(r['zones'])} zones · "
        f"cost / on-demand cost",
        (
            "policy",
            "mean",
            "p25",
            "p50",
            "p75",
            "misses",
            "spot h",
            "on-demand h",
            "changeovers",
        ),
        rows,
        left=("policy",),
    )


def _plot(r: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecError("--plot needs matplotlib", hint="pip install 'spotwise[plot]'") from None
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, runs in r["runs"].items():
        xs = [x["cost_usd"] for x in runs]
        ys = [x["regret"] for x in runs]
        ax.scatter(xs, ys, label=name, alpha=0.6)
        p = r["policies"][name]
        ax.scatter([p["cost_usd"]], [p["regret"]], marker="x", s=80, color="black")
    ax.set_xscale("log")
    ax.set_xlabel("cost (USD, log scale)")
    ax.set_ylabel(f"regret ({r['metric']})")
    ax.set_title("cost vs. regret per policy (× = mean over seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
