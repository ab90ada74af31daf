"""How `spotwise cancel` waits for a running job's orchestrator it asked to stop (SIGTERM
here, a request written to the job's row for one on another machine: review-ax AX1), and
what it answers, or why it refuses a job asked to stop that has not answered. Split from
:mod:`spotwise.jobs` so that each file stays readable."""

from __future__ import annotations

import time
from typing import Any

from spotwise.liveness import age_text, hidden_text, stale_heartbeat_s, where_text
from spotwise.release_text import not_ours_text


def await_stop(
    store: Any, job: Any, wait_s: float, seen: int | None, remote: bool, *, end: bool = True
) -> dict[str, Any]:
    """Wait up to ``wait_s`` for the job's orchestrator, asked to stop, to end the job (``end``:
    to write its ``ended_at`` too: a cancel asked through the database wrote the state), then
    say what its drain left (``seen``: the last ``not_ours`` event before it was asked; None:
    another cancel asked it). ``remote``: it runs on another machine."""
    from spotwise.planner.job_summary import not_ours_since

    if seen is None:
        seen, _ = not_ours_since(store, job.id)
    pid = job.pid
    who = f"the orchestrator{f' on {where_text(job)}' if remote else ''} (pid {pid})"
    deadline = time.monotonic() + wait_s
    while True:
        job = store.get_job(job.id)
        if job.state.is_terminal() and (job.ended_at is not None or not end):
            break
        if time.monotonic() >= deadline:
            return {
                "job_id": job.id,
                "state": job.state.value,
                "cancelled": False,
                "stopping": True,  # not done yet: the CLI exits non-zero
                "message": f"asked {who} to stop; it is still stopping after {wait_s:g} s"
                + (f" (its heartbeat is {age_text(job)})" if end else "")
                + f": see `spotwise status {job.id}`",
            }
        time.sleep(0.2)
    _, left = not_ours_since(store, job.id, after=seen)
    # what its drain could not terminate keeps its record open: may still be billed
    held = [r.provider_instance_id or r.id for r in store.list_instances(job.id, True)]
    still = (
        f"; {len(held)} instance(s) its drain could not confirm released, may still be "
        f"billed: {', '.join(held)} (run `spotwise cancel {job.id}` again)"
        if held
        else ""
    )
    asked = f"asked {who} through the database: it" if end else "the orchestrator"
    return {
        "job_id": job.id,
        "state": job.state.value,
        "cancelled": True,
        **({"not_ours": left} if left else {}),
        **({"open_instances": held} if held else {}),
        "message": f"{asked} checkpointed and stopped every trial" + still + not_ours_text(left),
    }


def unanswered(job: Any, where: str) -> tuple[str, str]:
    """Why a cancel of a job asked to stop, whose orchestrator has not ended it and has been
    silent too long, is refused (`--force` closes it), and the hint."""
    age, alive = age_text(job), f"{stale_heartbeat_s():g} s"
    if where == "hidden":
        return (
            hidden_text(job) + f"; it was asked to stop and has not ended the job (its "
            f"heartbeat is {age}: alive under {alive})",
            f"`spotwise cancel --force {job.id}` if it is not the orchestrator (that closes "
            "the job and releases its instances)",
        )
    return (
        f"job {job.id} was asked to stop and its orchestrator on {where_text(job)} (pid "
        f"{job.pid}) has not ended it: its heartbeat is {age} (alive under {alive})",
        lost_hint(job) + " and closes the job",
    )


def lost_hint(job: Any) -> str:
    """The hint of a cancel refused because the job's machine may be lost."""
    return (
        f"if that machine is lost, `spotwise cancel --force {job.id}` releases the job's "
        "instances from here"
    )
