"""Whether a job's orchestrator is still alive, and where: what `spotwise cancel` signals,
what `status` flags as no longer running. Split from :mod:`spotwise.jobs`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


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
