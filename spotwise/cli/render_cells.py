"""The words in the cells and notes of `spotwise status`, `trials` and `tune`'s output: a value,
a state, a job's cost and what its orchestrator is doing, as rich markup. Pure formatting of
one row's values (no console, nothing printed, rich not imported): :mod:`spotwise.cli.render`
lays them out in tables and prints them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

STATE_STYLE = {
    "pending": "dim",
    "running": "cyan",
    "waiting": "yellow",
    "completed": "green",
    "stopped_early": "magenta",
    "failed": "red",
    "cancelled": "red",
    "succeeded": "green",
}

#: what "simulated" means wherever a job's dollars are shown (report's words)
SIMULATED = "simulated dollars: a replayed market (provider local), not money"

HIDDEN = (
    "its orchestrator may still run: a live process holds its pid, and this user cannot read "
    "it (another user's process, or /proc mounted hidepid)"
)


def fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def params_text(p: dict[str, Any]) -> str:
    return " ".join(f"{k}={fmt(v, 3)}" for k, v in p.items())


def state_text(s: str) -> str:
    return f"[{STATE_STYLE.get(s, 'white')}]{s}[/]"


def short_time(ts: float) -> str:
    """``MM-DD HH:MM`` (UTC): a date that fits a listing."""
    return datetime.fromtimestamp(ts, UTC).strftime("%m-%d %H:%M")


def instance_text(state: str, end_reason: str | None) -> str:
    """One word for an instance: its state, or how it ended once terminated."""
    if not end_reason or end_reason == state:
        return state
    if state == "terminated":
        # completed, revoked, reconciled...; "stopped" (its trial was stopped) would read as a
        # stopped VM that still holds its disk: it ended
        return "ended (stopped)" if end_reason == "stopped" else end_reason
    return f"{state} ({end_reason})"  # e.g. still running after a cancel: worth the width


def cost_notes(j: dict[str, Any]) -> list[str]:
    """What a job's cost is, when it is not a final bill in real money: simulated (the
    replayed market), and an estimate (a job not finished: its running instances as if they
    ended at its orchestrator's last save; a dead orchestrator's is stale until cancel)."""
    notes = [SIMULATED] if j.get("simulated") else []
    if j.get("cost_is_estimate"):
        if j.get("orchestrator") == "gone":
            notes.append(
                "an estimate from before its orchestrator stopped: `spotwise cancel "
                f"{j['job_id']}` bills its lives and replaces it"
            )
        else:
            notes.append(
                "an estimate: the job is not finished, its running instances counted as if "
                "they ended at its orchestrator's last save (every few seconds)"
            )
    return notes


def is_gone(job: dict[str, Any]) -> bool:
    """A job not finished whose orchestrator is no longer running (a crash, a kill -9)."""
    return job.get("orchestrator") == "gone"


def listed_cost(job: dict[str, Any]) -> str:
    """A job's $ in the listing: ``~`` before an estimate, ``*`` after simulated dollars
    (the footnotes under the table say what they mean)."""
    est = "~" if job.get("cost_is_estimate") else ""
    return f"{est}{job['cost_usd']:.4f}{'*' if job.get('simulated') else ''}"


def job_state_text(job: dict[str, Any]) -> str:
    if is_gone(job):
        return f"[red]{job['state']} (orchestrator gone)[/]"
    if job.get("orchestrator") == "hidden":
        return f"[yellow]{job['state']} (orchestrator hidden)[/]"
    return state_text(job["state"])


#: the states of a trial not finished, in the order a big job's live table lists them
UNFINISHED = ("running", "waiting", "pending")
#: the finished trials a big job's live table shows under its unfinished ones, best first
BEST_FINISHED = 5
_FINISHED = frozenset({"completed", "stopped_early", "failed", "cancelled"})


def live_rows(snap: dict[str, Any], room: int) -> tuple[list[dict[str, Any]], str | None]:
    """The trials `tune`'s live table shows in ``room`` lines, and the line that says what it
    left out (None when it left nothing). All of them in number order where they fit (a small
    job); else every unfinished trial first (running, waiting, pending, each by number: as
    many as fit, the line taking one), then the :data:`BEST_FINISHED` best finished ones
    (completed by the snapshot's ``direction``, best first; without it the latest), then the
    line: how many more, and the command that lists them all (review-bd BD2: 150 trials in
    24 lines showed trials 0-18, finished, and never the running ones)."""
    trials: list[dict[str, Any]] = snap["trials"]
    if len(trials) <= room:
        return trials, None
    rank = {s: i for i, s in enumerate(UNFINISHED)}  # a state unknown here: unfinished, last
    waiting = sorted(
        (r for r in trials if r["state"] not in _FINISHED),
        key=lambda r: (rank.get(r["state"], len(UNFINISHED)), r["number"]),
    )
    room = max(0, room - 1)
    done = [r for r in trials if r["state"] in _FINISHED]
    sign = {"maximize": -1.0, "minimize": 1.0}.get(snap.get("direction") or "")

    def best(r: dict[str, Any]) -> tuple[int, float, int]:
        m = r["metric"]
        if sign is None or r["state"] != "completed" or not isinstance(m, int | float) or m != m:
            return (1, 0.0, -r["number"])  # no rank by metric (NaN, none): the latest first
        return (0, sign * m, r["number"])  # ties: the earlier trial, as the job's best

    first = waiting[:room]
    best_done = sorted(done, key=best)[: min(BEST_FINISHED, room - len(first))]
    more = [
        f"{n} more {what}"
        for n, what in (
            (len(waiting) - len(first), "unfinished"),
            (len(done) - len(best_done), "finished"),
        )
        if n
    ]
    return first + best_done, f"{' and '.join(more)} (spotwise trials {snap['job_id']})"
