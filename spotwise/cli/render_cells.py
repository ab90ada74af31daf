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
