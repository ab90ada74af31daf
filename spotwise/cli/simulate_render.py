"""What ``spotwise simulate`` prints: the JSON document, the tables, the cost-vs-regret plot.

The tables fit 80 columns: policy names never wrap or get cut, headers are short and a
caption spells them out. rich and matplotlib are imported inside the functions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer

from spotwise.cli.output import json_text
from spotwise.errors import SpecError


def emit(
    result: dict[str, Any], out: Path | None, as_json: bool, table: Callable[[dict[str, Any]], None]
) -> None:
    """Record the command line, write ``--out`` (indented, for people), then print the JSON on
    one line as every ``--json`` does (a .jsonl appender gets one record), or the table."""
    result["command"] = _command()
    text = json_text(result, indent=2, default=_plain)
    if out is not None:  # its folder was checked before the run: never created here
        try:
            out.write_text(text + "\n")
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise SpecError(f"--out {out}: cannot write there ({why}); pick another path") from None
    if as_json:
        typer.echo(json_text(result, default=_plain))
    else:
        table(result)


def _command() -> str:
    """The command line as one can paste it: ``spotwise ...`` from the console script,
    ``python -m spotwise ...`` under ``python -m`` (whose ``argv[0]`` is __main__.py's path)."""
    import shlex

    name = Path(sys.argv[0]).name if sys.argv else ""
    if name == "__main__.py" and Path(sys.argv[0]).parent.name == "spotwise":
        head = ["python", "-m", "spotwise"]
    elif name.removesuffix(".exe") == "spotwise":
        head = ["spotwise"]
    else:  # another program calling the app: its own command line
        return " ".join(shlex.quote(a) for a in sys.argv)
    return " ".join([*head, *(shlex.quote(a) for a in sys.argv[1:])])


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    if v != v or v in (float("inf"), float("-inf")):
        return None
    raise TypeError(type(v).__name__)


def _fmt(v: Any, spec: str = ".3g") -> str:
    return "—" if v is None else format(v, spec)


def _print(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    caption: str,
    movable: tuple[int, str] | None = None,
) -> None:
    """Policy names in the first column (never wrapped), numbers right-aligned.

    ``movable`` = (column index, what it counts, as the caption says it after ``header: ``): a
    column shown only where the table still fits the terminal with it; otherwise its values
    leave the table for a last caption line.
    """
    from rich.console import Console

    console = Console()
    t = _table(title, columns, rows, caption)
    natural = console.measure(t, options=console.options.update_width(10_000)).maximum
    if movable is not None and natural > console.width:
        i, what = movable
        keep = [k for k in range(len(columns)) if k != i]
        values = " · ".join(f"{row[0]} {row[i]}" for row in rows)
        t = _table(
            title,
            [columns[k] for k in keep],
            [[row[k] for k in keep] for row in rows],
            f"{caption.replace(f' · {columns[i]}: {what}', '')}\n{columns[i]} ({what}): {values}.",
        )
    console.print(t)


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], caption: str) -> Any:
    from rich import box
    from rich.table import Table

    t = Table(
        title=title,
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    t.add_column(columns[0], no_wrap=True, overflow="fold")
    for col in columns[1:]:
        t.add_column(col, justify="right", no_wrap=True)
    for row in rows:
        t.add_row(*row)
    return t


LIMIT = "trials stopped by the budget or deadline"


def tuning_table(r: dict[str, Any]) -> None:
    s = r["settings"]
    n = len(r["seeds"])
    rows = [
        (
            name,
            f"{p['cost_usd']:.2f}",
            _fmt(p["cost_vs_on_demand"], ".1%"),
            f"{p['makespan_hours']:.1f}",
            _fmt(p["regret"], ".4g"),
            f"{p['revocations']:.1f}",
            f"{p['lost_hours']:.2f}",
            f"{p['early_stopped']:.1f}",
            _fmt(_limited(p), ".1f"),
            f"{p['completed']:.1f}",
        )
        for name, p in r["policies"].items()
    ]
    failed = [
        f"{name}: {p['no_result']} of {n}"
        for name, p in r["policies"].items()
        if p.get("no_result")
    ]
    _print(
        f"{s['trials']} trials × {n} seed{'s' * (n != 1)} · parallel {s['parallel']} · "
        f"{r['metric']} ({r['direction']}) · revocation model: {r['revocation_model']}",
        ("policy", "cost $", "vs OD", "hours", "regret", "revoc", "lost", "stop", "limit", "done"),
        rows,
        "Means over seeds. vs OD: cost ÷ on-demand's cost · hours: makespan · revoc: "
        f"revocations · lost: hours of work lost · stop: trials early-stopped · limit: {LIMIT} "
        "· done: trials completed."
        + (f" Step time: {r['step_time']}." if r.get("step_time") else "")
        + (
            f" regret —: some runs completed no trial and returned nothing ({', '.join(failed)})."
            if failed
            else ""
        ),
        movable=(8, LIMIT),
    )


def _limited(p: dict[str, Any]) -> float | None:
    """Trials stopped by the budget or the deadline (mean per run); None in older results."""
    if "budget_stopped" not in p:
        return None
    return float(p["budget_stopped"]) + float(p.get("deadline_stopped", 0.0))


def deadline_table(r: dict[str, Any]) -> None:
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
    _print(
        f"{r['job_hours']:g} h job, {r['deadline_hours']:g} h deadline, d = "
        f"{r['restart_hours']:g} h · {r['starts_per_zone']} starts × {len(r['zones'])} zones",
        ("policy", "mean", "p25", "p50", "p75", "misses", "spot h", "OD h", "changes"),
        rows,
        "mean, p25, p50, p75: cost ÷ the job's on-demand cost · misses: deadlines missed · "
        "spot h, OD h: mean hours on spot and on-demand · changes: mean changeovers"
        f"{_deadline_prices(r)}.",
    )


def _deadline_prices(r: dict[str, Any]) -> str:
    """`` · spot: …, on-demand: …``: which prices a deadline run billed (``spot_prices`` is
    absent from results before per-tick prices: those were flat; nothing without prices)."""
    if r.get("on_demand_price") is None:
        return ""
    spot = (
        "the trace's price at each tick"
        if r.get("spot_prices") == "trace" or r.get("spot_price") is None
        else f"${r['spot_price']:g}/h flat"
    )
    return f" · spot: {spot}, on-demand: ${r['on_demand_price']:g}/h"


_NO_MATPLOTLIB = "--plot needs matplotlib"
_PLOT_HINT = "pip install 'spotwise[plot]'"


def check_plot() -> None:
    """``--plot``: matplotlib must be importable; checked before the run (it takes minutes)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise SpecError(_NO_MATPLOTLIB, hint=_PLOT_HINT)


def plot(r: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecError(_NO_MATPLOTLIB, hint=_PLOT_HINT) from None
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = 0
    for name, runs in r["runs"].items():
        done = [x for x in runs if x["regret"] is not None]  # no trial completed: no regret
        drawn += len(done)
        label = name if len(done) == len(runs) else f"{name} ({len(runs) - len(done)} no result)"
        ax.scatter(
            [x["cost_usd"] for x in done], [x["regret"] for x in done], label=label, alpha=0.6
        )
        p = r["policies"][name]
        if p["regret"] is not None:
            ax.scatter([p["cost_usd"]], [p["regret"]], marker="x", s=80, color="black")
    if drawn:
        ax.set_xscale("log")
        ax.set_xlabel("cost (USD, log scale)")
    else:
        ax.set_xlabel("cost (USD)")
        ax.text(0.5, 0.5, "no run completed a trial", ha="center", transform=ax.transAxes)
    ax.set_ylabel(f"regret ({r['metric']})")
    ax.set_title("cost vs. regret per policy (× = mean over seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
