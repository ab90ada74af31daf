"""Whether a job's orchestrator is still alive, and where: what `spotwise cancel` signals,
what `status` flags as no longer running. Split from :mod:`spotwise.jobs`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: Wall seconds added to the longest a live orchestrator can go without a heartbeat (one store
#: write waiting out another process's lock: :func:`stale_heartbeat_s`): the 2 s totals' save
#: that carries the heartbeat, the 5 s heartbeat of its own, a slow pass.
HEARTBEAT_MARGIN_S = 60.0


def stale_heartbeat_s() -> float:
    """Wall seconds past which a job's heartbeat (``heartbeat_at``) no longer says its
    orchestrator is alive: the longest one store write of a running job can wait on another
    process's lock (its patience, :data:`~spotwise.store.records.LOCK_PATIENCE_S`, plus the
    busy timeout of the try that began just before it ran out, plus the pause between tries),
    during which it writes no heartbeat, plus :data:`HEARTBEAT_MARGIN_S` (review-az AZ6: 90 s
    was shorter than the 300 s patience, so a live orchestrator waiting out a lock looked lost
    and `cancel --force` was let through). Younger, `spotwise cancel --force` is refused (the
    job is alive on its machine: review-ax AX1) and a plain cancel of a job on another machine
    asks its orchestrator through the database. Read from the store's constants when asked (as
    :data:`STALE_HEARTBEAT_S`): importing the store here would load SQLAlchemy with the CLI."""
    from spotwise.store.db import PG_LOCK_TIMEOUT_S, SQLITE_BUSY_TIMEOUT_S
    from spotwise.store.records import LOCK_PATIENCE_S, LOCK_RETRY_PAUSE_S

    one_try = max(SQLITE_BUSY_TIMEOUT_S, PG_LOCK_TIMEOUT_S)
    return float(LOCK_PATIENCE_S + one_try + LOCK_RETRY_PAUSE_S + HEARTBEAT_MARGIN_S)


def __getattr__(name: str) -> float:
    """``STALE_HEARTBEAT_S``: :func:`stale_heartbeat_s` (391 s with the store's constants)."""
    if name == "STALE_HEARTBEAT_S":
        return stale_heartbeat_s()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def orchestrator_state(job: Any) -> str:
    """Where a job's orchestrator is: ``here`` (alive on this machine), ``elsewhere`` (recorded
    on another machine, or in another pid namespace of this one, a container: its pid means
    nothing here), ``hidden`` (a live process holds its pid but this user cannot read when it
    started: another user's, with ``/proc`` mounted ``hidepid``; it may be the orchestrator) or
    ``gone``.

    Alive here: the process now holding ``job.pid`` started when the orchestrator recorded
    (``job.pid_start``, :func:`~spotwise.providers.local_records.process_start`); any other
    process with that pid (the pid was reused after the orchestrator died) is not it, so
    `spotwise cancel` closes the job as orphaned and signals nothing. Only a pid no process
    holds (``os.kill(pid, 0)``: no such process) is gone when the start cannot be read. A job
    recorded before that column (revision 0003, no token) is judged by
    :func:`orchestrator_alive`."""
    import socket

    from spotwise.providers import local_records as lr

    if job.host and job.host != socket.gethostname():
        return "elsewhere"
    if not job.pid:
        return "gone"
    recorded = getattr(job, "pid_start", None)
    if recorded is None:
        return "here" if orchestrator_alive(job.pid) else "gone"
    if other_namespace(recorded):
        return "elsewhere"
    now = lr.read_start(job.pid)
    if now is None:  # no process, or one we cannot see: only the kernel can say which
        return _probe(job.pid)
    return "here" if now != lr.ENDED and lr.same_start(recorded, now) else "gone"


def other_namespace(recorded: str) -> str:
    """The pid namespace ``recorded`` (a start token) was read in when it is not this
    process's (both known), else ""."""
    from spotwise.providers import local_records as lr

    theirs, ours = lr.token_namespace(recorded), lr.pid_namespace()
    return theirs if theirs and ours and theirs != ours else ""


def where_text(job: Any) -> str:
    """Where an ``elsewhere`` orchestrator runs, for a message: its host, or its host's other
    pid namespace (a container sharing the host's name)."""
    ns = other_namespace(job.pid_start or "") if getattr(job, "pid_start", None) else ""
    return f"{job.host} in another pid namespace ({ns}: a container)" if ns else f"{job.host}"


def hidden_text(job: Any) -> str:
    """What a ``hidden`` orchestrator is, for a message."""
    return (
        f"job {job.id}'s orchestrator (pid {job.pid}) may still run: a live process holds its "
        "pid, and this user cannot read when it started (another user's process, /proc "
        "mounted hidepid)"
    )


def _probe(pid: int) -> str:
    """``gone`` when no process holds ``pid``, else ``hidden``: it runs, and cannot be told
    from the orchestrator."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except OSError:  # PermissionError: another user's process
        return "hidden"
    return "hidden"


def orchestrator_alive(pid: int) -> bool:
    """Whether ``pid`` looks like a spotwise orchestrator: the rule for a job recorded with no
    start token (before revision 0003), which a reused pid can pass (a live process whose
    command line names spotwise; off Linux, any live process of this user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        return b"spotwise" in cmdline.read_bytes()
    return True


def heartbeat_age(job: Any, now: float | None = None) -> float | None:
    """Wall seconds since the job's orchestrator last said it was alive; None: never (no
    heartbeat on record)."""
    import time

    beat = getattr(job, "heartbeat_at", None)
    if beat is None:
        return None
    return max((time.time() if now is None else now) - beat, 0.0)


def alive_beat(job: Any, now: float | None = None) -> float | None:
    """The heartbeat's age when it is fresh (under :func:`stale_heartbeat_s`): its orchestrator
    is alive, wherever it runs; else None."""
    age = heartbeat_age(job, now)
    return age if age is not None and age < stale_heartbeat_s() else None


def age_text(job: Any) -> str:
    """The job's heartbeat age, for a message."""
    age = heartbeat_age(job)
    return "not on record" if age is None else f"{age:.0f} s old"


def not_finished_text(job: Any) -> str:
    """Why a job that is not finished cannot be resumed, and what to do instead."""
    where = orchestrator_state(job)
    if where == "here":
        return f"job {job.id} is still running (pid {job.pid}): `spotwise status {job.id}` shows it"
    if where == "elsewhere":
        return (
            f"job {job.id} runs on {where_text(job)} (pid {job.pid}): resume it once it has "
            f"stopped (if that machine is lost, `spotwise cancel --force {job.id}` closes it "
            "first)"
        )
    if where == "hidden":
        return hidden_text(job) + ": resume it once it has stopped"
    return (
        f"job {job.id}'s orchestrator exited without closing it: run `spotwise cancel {job.id}` "
        "first (it releases the job's instances and closes its records), then resume it"
    )


def unclosed_text(job: Any) -> str:
    """Why a job asked to stop (``cancelled``, no ``ended_at``: only a cancel's request writes
    a finished state without its end) whose orchestrator never wrote its end (its machine died
    after the request; it crashed mid-drain) is not resumed, and the cancel that closes it as
    a dead orchestrator's (its finished trials completed, the others cancelled, its records
    released). A resume took the half-closed job: a finished trial, still ``running``, ran
    again (money)."""
    where, ask = orchestrator_state(job), f"`spotwise cancel {job.id}`"
    said = f"job {job.id} is cancelled but its orchestrator never closed it"
    then = f", then `spotwise resume {job.id}`"
    if where == "here":  # alive, silent: `spotwise cancel` waits for its end
        return (
            f"{said} and still runs here (pid {job.pid}, heartbeat {age_text(job)}): wait "
            f"until `spotwise status {job.id}` shows it ended ({ask} waits for it){then}"
        )
    if where == "gone":
        return f"{said} (it exited): run {ask} first (it closes the job){then}"
    force = f"`spotwise cancel --force {job.id}`"
    if where == "hidden":
        return f"{hidden_text(job)}: if it is not the orchestrator, run {force} first{then}"
    return (
        f"{said} on {where_text(job)} (pid {job.pid}, heartbeat {age_text(job)}): if that "
        f"machine is lost, run {force} first (it closes the job){then}"
    )
