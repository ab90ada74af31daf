"""`report`: the cost report a cron job prints, and its rendering."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from spotwise.cli.options import DbOpt, JsonOpt

if TYPE_CHECKING:
    from rich.table import Table


HOURS_NOTE = (
    "hours: instance time, refunded time included; billed h: the time charged for, by each "
    "provider's rule (a spot instance AWS revokes in its first hour is refunded: 0; the 60 s "
    "minimum counts), so $ / billed h is the average price paid; both are market time on a "
    "replay. on-demand $: the same kept work (steps not lost to a revocation) on on-demand "
    "capacity"
)


def report_cmd(
    since: Annotated[
        str,
        typer.Option(
            "--since",
            help="Window start: a duration before --until (24h, 7d, 30d for a month, …; an "
            "uppercase M is refused: 1m is a minute), a UTC date or "
            "time (2026-11-24 is 00:00 UTC; 2026-11-24T07:00, with Z or an offset such as "
            "+02:00), epoch seconds (a number from 1000000000 on, as --json's since/until; a "
            "smaller bare number is a duration in seconds: 60 is a minute), today, yesterday, "
            "or `all`.",
        ),
    ] = "24h",
    until: Annotated[
        str | None,
        typer.Option(
            "--until",
            help="Window end (default: a minute before now, to the millisecond the text "
            "prints: a bill dated before its write commits, which may wait 30 s for the "
            "database's lock, is written by then; one of the last minute is in the next "
            "window): a date or time as --since, today, yesterday, or a duration before now "
            "(1h). A time still to come is taken as the default; a time less than a minute ago "
            "is waited for (up to a minute); one past the year 9999 is refused. `now` ends at "
            "this very instant, read at once: a bill still being written may be missing, so do "
            "not chain on it. For cron, chain windows: `--since yesterday --until today`, or "
            "each run's --since the previous run's `until`.",
        ),
    ] = None,
    by: Annotated[
        str,
        typer.Option(
            "--by",
            help="Group by provider, job, instance-type, zone, market or day (the UTC day "
            "each bill was written, as the window counts it).",
        ),
    ] = "provider",
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Exit 1 when an instance on a real cloud is held by a finished job or one whose "
            "orchestrator has stopped (may be billed: `spotwise cancel JOB` releases it; a "
            "replay's is listed, but nothing is billed for it), and only then. Exit 3 without "
            "a spotwise database (a missing or empty file, an in-memory URL such as sqlite:/// "
            "with an unset variable, a database without spotwise's tables, a server that cannot "
            "be reached), 2 for a --db URL it cannot use, 5 when the database failed (corrupt, "
            "damaged or unreadable, locked past 30 s, a schema from a newer spotwise): a wrong "
            "--db or a broken database never reads as 'nothing held', nor as 'held'.",
        ),
    ] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Cost report for cron: spend vs on-demand per provider (or job, type, zone, day), and
    every instance still held.

    Each instance life is counted once, in the window in which its bill was written: when its
    record closed (usually when it ended; a life `spotwise cancel` closes late, with an end in
    the past, in the window of the cancel), never in a window already reported. What a closed
    record is billed later (an instance found after it closed) is counted when it is billed.
    So windows that follow each other (`--since yesterday --until today` every day) count
    every dollar once; a window ends a minute before now by default, so that a bill dated
    before its write commits is in it, or in the next. Lives still held are listed apart with
    their hourly price. Costs on the `local` provider come from the replayed market: simulated
    dollars, in a table of their own (`replay` in --json), never added to the real clouds'
    totals.

    `hours` is instance time, refunded time included; `billed h` (`billed_hours` in --json)
    is the time charged for under each provider's rule (AWS refunds a spot instance it revokes
    in its first hour): divide $ by it for the average price paid.

    By job, a job whose whole cost ended above its budget cap is shown in red with a line
    saying by how much (`budget_usd`, `exceeded_usd` in --json); --check does not fail on it:
    that money is spent, nothing is left to release.

    Examples:
      spotwise report --since 7d --by day
      spotwise report --since all --by job
      spotwise report --since 2026-11-01 --until 2026-12-01 --by job
      spotwise report --since yesterday --until today --check --json  # cron, daily
    """
    from spotwise import costs
    from spotwise.cli.output import emit

    out = costs.report_json(costs.report(since=since, until=until, by=by, db=db))  # docs/json.md
    emit(out, json_out, _print_report, outcome=1 if check and out["leftovers"] else 0)
    if check and out["leftovers"]:
        raise typer.Exit(1)


def _money(row: dict[str, Any]) -> list[str]:
    pct = row["saved_pct"]
    return [
        str(row["lives"]),
        str(row["revoked"]),
        f"{row['hours']:.2f}",
        f"{row['billed_hours']:.2f}",
        f"{row['cost_usd']:.4f}",
        f"{row['on_demand_cost_usd']:.4f}",
        "—" if pct is None else f"{pct:.0f}%",
    ]


def _when(ts: float | None) -> str:
    """A window's bound to the second, with the fraction it has (milliseconds, microseconds
    when the millisecond is not exact): `--since` reads the text back as this very instant, so
    a window chained on the text starts exactly where this one ended (review-as AS2: cut to
    the millisecond, a bill in the fraction cut off was counted in both windows)."""
    if ts is None:
        return "the start"
    from spotwise.units import parse_time

    when = datetime.fromtimestamp(ts, UTC)
    second = when.strftime("%Y-%m-%d %H:%M:%S")
    for text in (second, f"{second}.{when.microsecond // 1000:03d}"):
        if parse_time(f"{text} UTC", field="--since", now=0.0) == ts:
            return text
    return f"{second}.{when.microsecond:06d}"


def _exact(ts: float | None) -> bool:
    """Whether :func:`_when`'s text of ``ts`` is ``ts`` itself (not for an epoch typed with
    digits past the microsecond)."""
    from spotwise.units import parse_time

    return ts is None or parse_time(f"{_when(ts)} UTC", field="--since", now=0.0) == ts


def _window_line(since: float | None, until: float) -> str:
    """The report's first line: its window, and the epoch seconds too where the text is not
    exactly them (chain on those)."""
    line = f"bills written from {_when(since)} to {_when(until)} UTC"
    if _exact(since) and _exact(until):
        return line
    return f"{line} (epoch s: {'all' if since is None else repr(since)} to {until!r})"


def _settle_note(out: dict[str, Any]) -> str | None:
    """A line under the window's when its end is near the read: held back a minute (the
    default: say where the last minute's bills go), or ``--until now`` (not final)."""
    from spotwise.units import SETTLE_S

    if not out["settled"]:
        return (
            "[yellow]the window ends now (--until now): a bill still being written may be "
            "missing; not final, do not chain on it[/]"
        )
    if out["now"] - out["until"] < SETTLE_S + 1.0:
        later = out.get("after_until") or {}
        money = [f"${later.get('cost_usd', 0.0):.4f}"] if later.get("cost_usd") else []
        if later.get("simulated_usd"):
            money.append(f"${later['simulated_usd']:.4f} simulated")
        what = f" ({' and '.join(money)} billed since)" if money else ""
        return (
            f"[dim]the window ends {SETTLE_S:g} s before now: the bills of the last minute"
            f"{what} are counted in the next window, which starts where this one ends "
            "(`--until now` shows them now, not final)[/]"
        )
    return None


def _money_table(by: str, sec: dict[str, Any], title: str | None = None) -> Table:
    """The money of one section of the report (the real clouds', or the replay's)."""
    from spotwise.cli.output import listing

    t = listing(title)
    t.add_column(by, overflow="fold")
    for col in ("lives", "revoked", "hours", "billed h", "$", "on-demand $", "saved"):
        t.add_column(col, justify="right", no_wrap=True)
    for g in sec["groups"]:  # by job: one whose cost ended above its budget cap in red
        over = g.get("exceeded_usd") is not None
        t.add_row(f"[red]{g['key']}[/]" if over else g["key"], *_money(g))
    t.add_row("[bold]total[/]", *_money(sec["totals"]), end_section=True)
    return t


def _billed(sec: dict[str, Any]) -> bool:
    """Whether a section's window holds a bill: a life, or a later part of one (no life)."""
    totals = sec["totals"]
    return bool(totals["lives"] or totals["cost_usd"] or totals["hours"])


def _overruns(sec: dict[str, Any]) -> list[str]:
    """A line for each job of a by-job section whose whole cost ended above its budget cap
    (the group's ``exceeded_usd``; the window may hold only some of its lives)."""
    return [
        f"[red]{g['key']}: budget exceeded by ${g['exceeded_usd']:.4f}: the job cost "
        f"${g['budget_usd'] + g['exceeded_usd']:.4f} in all (max_cost_usd {g['budget_usd']:g})[/]"
        for g in sec["groups"]
        if g.get("exceeded_usd") is not None
    ]


def _print_report(out: dict[str, Any]) -> None:
    from rich.console import Console

    from spotwise.cli.output import fit, listing

    console = Console(highlight=False)
    real, replay = out, out["replay"]
    console.print(f"[bold]cost report[/] by {out['by']}")
    console.print(_window_line(out["since"], out["until"]))
    if note := _settle_note(out):
        console.print(note)
    # a window may hold a later part of a closed record's bill and no life (review-ah F10)
    billed_real, billed_replay = _billed(real), _billed(replay)
    if billed_real:
        title = "real clouds" if billed_replay else None
        console.print(fit(_money_table(out["by"], real, title), console.width))
        for line in _overruns(real):
            console.print(line)
    elif billed_replay:
        console.print("nothing billed on a real cloud in this window")
    else:
        console.print("nothing billed in this window")
    if billed_replay:
        title = "replayed market: simulated dollars, not money"
        console.print(fit(_money_table(out["by"], replay, title), console.width))
        for line in _overruns(replay):
            console.print(line)
    if billed_real or billed_replay:
        console.print(f"[dim]{HOURS_NOTE}[/]")
    held = out["held"]
    if not held:
        console.print("nothing held now")
        return
    t = listing("held now")
    for col in ("job", "state"):
        t.add_column(col, no_wrap=True)
    for col in ("provider", "zone", "type", "instance"):
        t.add_column(col, overflow="fold")
    for col in ("$/h", "hours"):
        t.add_column(col, justify="right", no_wrap=True)
    for h in held:
        t.add_row(
            f"[red]{h['job_id']}[/]" if h["leftover"] else h["job_id"],
            h["job_state"],
            h["provider"],
            h["zone"],
            h["instance_type"],
            h["instance_id"] or "—",
            f"{h['usd_per_hour']:.4f}",
            f"{h['held_hours']:.2f}",
        )
    console.print(fit(t, console.width))
    for job in sorted({h["job_id"] for h in held if h["leftover"]}):
        mine = [h for h in held if h["job_id"] == job and h["leftover"]]
        if mine[0]["simulated"]:  # a replay: its market and trials stopped with it
            console.print(
                f"[yellow]{job}: {len(mine)} replayed instance(s) (simulated) held by a job "
                "that is finished or whose orchestrator has stopped: nothing is billed; "
                f"`spotwise cancel {job}` closes their records[/]"
            )
            continue
        console.print(
            f"[red]{job}: {len(mine)} instance(s) held by a job that is finished or whose "
            f"orchestrator has stopped; they may still be billed: run `spotwise cancel {job}`[/]"
        )
    console.print(f"held on real clouds now: ${out['held_usd_per_hour']:.4f}/h")
    sim = [h for h in held if h["simulated"]]
    if sim:
        console.print(
            f"[dim]and {len(sim)} on the replayed market at "
            f"${out['held_simulated_usd_per_hour']:.4f}/h (simulated, not money)[/]"
        )


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
