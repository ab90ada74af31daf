"""Rendering with rich: the live trial table, summaries and listings. Colours live here only,
and in the cells' words (:mod:`spotwise.cli.render_cells`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.segment import Segment, SegmentLines
from rich.table import Table

from spotwise.cli import stdout_gone
from spotwise.cli.output import fit, listing
from spotwise.cli.render_cells import (
    HIDDEN,
    SIMULATED,
    cost_notes,
    fmt,
    instance_text,
    is_gone,
    job_state_text,
    listed_cost,
    live_rows,
    params_text,
    short_time,
    state_text,
)
from spotwise.job_rows import quiet_note

console = Console()


def live_table(snap: dict[str, Any], width: int, rows: list[dict[str, Any]] | None = None) -> Table:
    """The trials of a running job (``rows``: those of them to show; all by default), sized
    to ``width`` columns."""
    when = datetime.fromtimestamp(snap["market_time"], UTC).strftime("%Y-%m-%d %H:%M")
    t = listing(
        f"job {snap['job_id']} · policy {snap['policy']} · market {when} UTC · "
        f"${snap['cost_usd']:.3f} · revocations {snap['revocations']}"
    )
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("params")  # wraps between parameters (see fit)
    t.add_column("step", justify="right", no_wrap=True)
    t.add_column("metric", justify="right", no_wrap=True)
    t.add_column("instance")  # "zone market": wraps between the two, never inside
    t.add_column("state", no_wrap=True)
    t.add_column("$", justify="right", no_wrap=True)
    for r in snap["trials"] if rows is None else rows:
        t.add_row(
            str(r["number"]),
            params_text(r["params"]),
            f"{r['step']}/{r['steps']}",
            fmt(r["metric"]),
            r["instance"].replace("/", " "),
            state_text(r["state"]),
            f"{r['cost_usd']:.3f}",
        )
    return fit(t, width)


def live_lines(snap: dict[str, Any], width: int, height: int) -> list[list[Segment]]:
    """The live table's lines, at most ``height`` (the terminal's, less the progress bar's)
    where it can: every trial if they fit, else those :func:`live_rows` picks and its line
    saying how many more (review-bd BD2). Rows and the title may wrap in a narrow terminal:
    the table is drawn, and drawn again with fewer rows while it is too tall (as many fewer
    as its rows' lines on average say: one more drawing at 80 columns, a few narrower)."""
    options = console.options.update(width=width, height=None)
    room = height - 3  # the title, the header and its rule
    for _ in range(8):
        rows, more = live_rows(snap, room)
        table = live_table(snap, width, rows)
        shown = Group(table, f"[dim]{escape(more)}[/]") if more else table
        lines = console.render_lines(shown, options, pad=False)
        over = len(lines) - height
        if over <= 0 or not rows:
            break
        per_row = max(1.0, (len(lines) - 4) / len(rows))  # 4: one line each, and the note's
        room = len(rows) + (1 if more else 0) - max(1, int(over / per_row))
    return lines


#: the live table is drawn again at most this often (the progress bar: 4 times a second)
TABLE_EVERY_S = 1.0


class LiveJob:
    """A live table of trials plus a progress bar, fed by the orchestrator's snapshots. The
    table (:func:`live_lines`: at most the terminal's height) is drawn for a snapshot that
    changes what it shows, at most once every :data:`TABLE_EVERY_S` and for the last one;
    ``Live``'s refreshes (4 a second) redraw the progress bar and copy the table's lines
    (150 trials redrawn whole on every refresh took ~0.25 CPU s each: review-bd BD2)."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} steps"),
            TimeElapsedColumn(),
        )
        self.task = self.progress.add_task("tuning", total=1)
        self.table = Table()
        self.live = Live(Group(self.table, self.progress), console=console, refresh_per_second=4)
        self.lines = SegmentLines([], new_lines=True)
        # what the lines show: their size and the title's words; the trials
        self.drawn: tuple[Any, ...] | None = None
        self.trials: list[dict[str, Any]] = []
        self.drawn_at = -TABLE_EVERY_S  # time.monotonic()
        self.snap: dict[str, Any] | None = None  # the latest snapshot
        self.started = False

    def __enter__(self) -> LiveJob:
        return self  # the display starts with the first snapshot: a rejected spec draws nothing

    def __exit__(self, *exc: object) -> None:
        if self.started:  # its last picture: stdout gone (a closed terminal) is no error here
            with stdout_gone.drawing():
                if self.snap is not None and self._draw(self.snap, due=True):
                    self.live.update(Group(self.lines, self.progress))
                self.live.__exit__(None, None, None)

    def update(self, snap: dict[str, Any]) -> None:
        if stdout_gone.gone:
            return  # no one to draw for: the job runs on
        with stdout_gone.drawing():
            if not self.started:
                self.started = True
                self.live.__enter__()
            self.snap = snap
            self._draw(snap, due=time.monotonic() - self.drawn_at >= TABLE_EVERY_S)
            self.progress.update(self.task, total=snap["total"], completed=snap["progress"])
            self.live.update(Group(self.lines, self.progress))

    def _draw(self, snap: dict[str, Any], due: bool) -> bool:
        """Draw the table's lines for ``snap`` when ``due`` and it shows something new."""
        width, height = console.width, console.height - 1  # the progress bar's line
        words = ("job_id", "policy", "revocations", "direction")
        seen = (
            width,
            height,
            int(snap["market_time"] // 60),  # the title shows the market's minute
            f"{snap['cost_usd']:.3f}",
            *(snap.get(k) for k in words),
        )
        if not due or (seen == self.drawn and snap["trials"] == self.trials):
            return False
        self.lines = SegmentLines(live_lines(snap, width, height), new_lines=True)
        self.drawn, self.trials, self.drawn_at = seen, snap["trials"], time.monotonic()
        return True


def failed_line(s: dict[str, Any]) -> str | None:
    """The line that says how many trials failed and the last one's error, when any failed
    (unless the job's error already says it: every trial failed); a job that succeeded with
    failed trials is not a full one, and its exit code (0) does not say so."""
    n, last = s.get("failed") or 0, s.get("last_failure")
    if not n or (last and last in (s.get("error") or "")):
        return None
    return f"{n} of {s['trials']} trials failed" + (f"; the last error: {last}" if last else "")


def print_summary(s: dict[str, Any]) -> None:
    stdout_gone.raise_if_gone()  # as a write to a closed pipe ends (the job's code is kept)
    best = s.get("best")
    console.print(
        f"\n[bold]job {s['job_id']}[/] {state_text(s['state'])} in {s['wall_seconds']:.1f} s "
        f"(policy {s['policy']})"
    )
    if s.get("error"):
        console.print(f"[red]{s['error']}[/]")
    if resumed := s.get("resumed"):
        n = len(resumed["requeued_trials"])
        console.print(
            f"resumed a {resumed['previous_state']} job: {n} trial(s) queued again from their "
            "last checkpoints (from the start where they had none); trials, cost and savings "
            "cover both runs"
        )
    if best:
        console.print(
            f"best: trial {best['number']} {params_text(best['params'])} → {fmt(best['metric'])}"
        )
    od = s["on_demand_cost_usd"]
    if s["state"] == "failed" and not best:  # money spent for nothing: no saving to speak of
        versus = "no result, so nothing saved"
    elif not od:  # no step finished: nothing to compare with
        versus = "no step done to compare with on demand"
    elif s["cost_usd"] <= od:
        versus = f"{(1 - s['cost_usd'] / od) * 100:.0f}% saved"
    else:
        versus = f"{(s['cost_usd'] / od - 1) * 100:.0f}% more than on demand"
    console.print(
        f"trials {s['trials']} · completed {s['completed']} · early-stopped {s['early_stopped']} · "
        f"revocations {s['revocations']} · migrations {s['migrations']}"
    )
    if line := failed_line(s):
        console.print(f"[yellow]{escape(line)}[/]")
    planned = s.get("trials_planned", s["trials"])
    unmade = planned - s["trials"]
    for limit, n in (s.get("limits") or {}).items():  # the budget, deadline or trace end bound
        before = f" ({n['never_started']} before starting)" if n["never_started"] else ""
        more = f"; {unmade} of {planned} planned never created" if unmade > 0 else ""
        if n["stopped"] or more:
            name = limit.replace("_", " ")  # trace_end: a replayed market's end
            console.print(f"[yellow]{name}: {n['stopped']} trial(s) stopped{before}{more}[/]")
        if over := n.get("exceeded_usd"):  # the cost ended above max_cost_usd: never silent
            usd = f"{over:.{4 if over >= 1e-4 else 6}f}"
            console.print(
                f"[red]budget exceeded by ${usd}: its lives cost more than projected when they "
                "were admitted (billed longer past a trial's last step than measured: README, "
                "Budget)[/]"
            )
    for iid in s.get("leftover_instances") or []:
        console.print(f"[red]still held, may be billed: {iid}[/] (`spotwise cancel {s['job_id']}`)")
    for line in s.get("not_ours") or []:  # its tags, not its launch: left running
        console.print(f"[yellow]{escape(line)}[/]")
    console.print(
        f"cost ${s['cost_usd']:.4f} vs ${s['on_demand_cost_usd']:.4f} on demand ({versus})"
    )
    if s.get("simulated"):
        console.print(f"[dim]  {SIMULATED}[/]")
    console.print(f"next: spotwise trials {s['job_id']}")
    if s.get("resumable"):  # trials left unfinished or unmade, or cut by a limit
        more = " --max-cost USD (a larger budget)" if "budget" in (s.get("limits") or {}) else ""
        console.print(f"continue it: spotwise resume {s['job_id']}{more}")


def print_jobs(rows: list[dict[str, Any]], total: int | None = None) -> None:
    """The listed jobs; ``total``: how many the store holds (more than listed: say so)."""
    if not rows:
        console.print("no jobs yet; run `spotwise tune SPEC`")
        return
    t = listing("jobs", caption="times in UTC · cost vs on demand: spotwise status JOB")
    t.add_column("job", no_wrap=True)
    t.add_column("name", overflow="fold")
    t.add_column("state")  # "running (orchestrator gone)" wraps between its words
    t.add_column("policy", no_wrap=True)
    t.add_column("best", justify="right", no_wrap=True)
    t.add_column("$", justify="right", no_wrap=True)
    t.add_column("created", no_wrap=True)
    for j in rows:
        t.add_row(
            j["job_id"],
            j["name"],
            job_state_text(j),
            j["policy"],
            fmt(j["best_metric"]),
            listed_cost(j),
            short_time(j["created_at"]),
        )
    console.print(fit(t, console.width))
    if any(j.get("simulated") for j in rows):
        console.print(f"[dim]$*: {SIMULATED}[/]")
    if any(j.get("cost_is_estimate") for j in rows):
        console.print(
            "[dim]~$: an estimate, the job is not finished (its running instances as if they "
            "ended at its orchestrator's last save; `spotwise status JOB` says more)[/]"
        )
    for j in rows:
        if is_gone(j):
            console.print(
                f"[red]{j['job_id']}: its orchestrator is no longer running[/] (it crashed or was "
                f"killed): `spotwise cancel {j['job_id']}` releases what it still holds"
            )
        elif j.get("orchestrator") == "hidden":
            console.print(f"[yellow]{j['job_id']}: {HIDDEN}[/]")
        if quiet := quiet_note(j):
            console.print(f"[yellow]{quiet}[/]")
    if total is not None and total > len(rows):
        console.print(f"[dim]{len(rows)} of {total} jobs; --limit 0 for all[/]")


#: `status JOB`'s text lists this many of the newest instance lives, and every one still held
#: (review-af F7: a job with 5,500 lives printed every row, in 16 s); --json has them all
NEWEST_INSTANCES = 50


def _held(i: dict[str, Any]) -> bool:
    """An instance not ended (requested, pending, running, stopping: maybe billed); a state
    this spotwise does not know counts as held (never hidden)."""
    return i["state"] not in ("terminated", "revoked", "failed")


def shown_instances(rows: list[dict[str, Any]], show_all: bool = False) -> list[dict[str, Any]]:
    """The instance rows `status JOB` prints, oldest first as stored: the
    :data:`NEWEST_INSTANCES` newest, and every older one still held; all with ``show_all``."""
    if show_all or len(rows) <= NEWEST_INSTANCES:
        return rows
    old = len(rows) - NEWEST_INSTANCES
    return [i for i in rows[:old] if _held(i)] + rows[old:]


def print_status(j: dict[str, Any], show_all: bool = False) -> None:
    """One job; its instances: the newest :data:`NEWEST_INSTANCES` and every one still
    held (a line says how many were left out), or all of them with ``show_all``. With
    ``instances_total`` (``jobs.status(newest=…)`` read only those), its instances are the
    ones shown, out of that many."""
    console.print(
        f"[bold]job {j['job_id']}[/] ({j['name']}) {state_text(j['state'])} · policy {j['policy']}"
    )
    best = j.get("best")
    if best:
        number = f" (#{best['number']})" if best.get("number") is not None else ""
        console.print(
            f"best: {best['trial']}{number} {params_text(best['params'])} → {fmt(best['metric'])}"
        )
    console.print(
        f"trials {j['trials']} · completed {j['completed']} · revocations {j['revocations']} · "
        f"migrations {j['migrations']} · early-stopped {j['early_stopped']}"
    )
    console.print(f"cost ${j['cost_usd']:.4f} vs ${j['on_demand_cost_usd']:.4f} on demand")
    for note in cost_notes(j):
        console.print(f"[yellow]  {note}[/]" if "estimate" in note else f"[dim]  {note}[/]")
    if (running := j.get("running_usd") or 0.0) > 0:  # the part not billed final
        console.print(
            f"[yellow]  of which ${running:.4f} still running, estimated "
            f"(${j['billed_usd']:.4f} billed)[/]"
        )
    if over := (j.get("budget") or {}).get("exceeded_usd"):
        cap = j["budget"]["max_cost_usd"]
        console.print(f"[red]budget exceeded by ${over:.4f} (max_cost_usd {cap:g})[/]")
    if j.get("error"):
        console.print(f"[red]error:[/] {j['error']}")
    if j.get("orchestrator") == "gone":
        console.print(
            f"[red]its orchestrator is no longer running[/] (it crashed or was killed): "
            f"`spotwise cancel {j['job_id']}` releases what it still holds"
        )
    elif j.get("orchestrator") == "hidden":
        console.print(f"[yellow]{HIDDEN}[/]")
    if quiet := quiet_note(j):
        console.print(f"[yellow]{quiet}[/]")
    if j["instances"]:
        t = listing(
            "instances", caption=f"launch ids and more: spotwise status {j['job_id']} --json"
        )
        t.add_column("trial", no_wrap=True)
        for col in ("type", "zone"):  # whole unless an Azure size and region overflow: fold
            t.add_column(col, overflow="fold")
        for col in ("market", "state"):
            t.add_column(col, no_wrap=True)
        t.add_column("$", justify="right", no_wrap=True)
        total = j.get("instances_total", len(j["instances"]))
        shown = (
            j["instances"] if "instances_total" in j else shown_instances(j["instances"], show_all)
        )
        for i in shown:
            t.add_row(
                i["trial"],
                i.get("instance_type") or "—",
                i["zone"],
                i["market"],
                instance_text(i["state"], i["end_reason"]),
                f"{i['cost_usd']:.4f}",
            )
        console.print(fit(t, console.width))
        if left := total - len(shown):
            console.print(
                f"[dim]{len(shown)} of {total} instances shown (the "
                f"{NEWEST_INSTANCES} newest, and every one still held); {left} older ones left "
                f"out: spotwise status {j['job_id']} --all lists every one[/]"
            )


def print_trials(out: dict[str, Any]) -> None:
    # the short columns never wrap; the parameters take what width is left, wrapping between
    # parameters in a narrow terminal, never inside a number
    t = listing(f"trials of {out['job_id']}")
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("trial", no_wrap=True)
    t.add_column("params")
    for col in ("step", "metric"):  # metric: the final one once completed (JSON has both)
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("state", no_wrap=True)
    for col in ("rev", "$"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in out["trials"]:
        t.add_row(
            str(r["number"]),
            r["trial"],
            params_text(r["params"]),
            str(r["step"]),
            fmt(r["final_metric"] if r["final_metric"] is not None else r["metric"]),
            state_text(r["state"]) + (f" ({r['stop_reason']})" if r.get("stop_reason") else ""),
            str(r["revocations"]),
            f"{r['cost_usd']:.4f}",
        )
    console.print(fit(t, console.width))
    if out.get("simulated"):
        console.print(f"[dim]$: {SIMULATED}[/]")
