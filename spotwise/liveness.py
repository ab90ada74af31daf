"""Whether a job's orchestrator is still alive, and where: what `spotwise cancel` signals,
what `status` flags as no longer running. Split from :mod:`spotwise.jobs`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def orchestrator_state(job: Any) -> str:
    """Where a job's orchestrator is: ``here`` (alive on this machine), ``elsewhere`` (recorded
    on another machine: its pid means nothing here) or ``gone``.

    Alive here: the process now holding ``job.pid`` started when the orchestrator recorded
    (``job.pid_start``, :func:`~spotwise.providers.local_records.process_start`); any other
    process with that pid (the pid was reused after the orchestrator died) is not it, so
    `spotwise cancel` closes the job as orphaned and signals nothing. A job recorded before
    that column (revision 0003, no token) is judged by :func:`orchestrator_alive`."""
    import socket

    from spotwise.providers.local_records import process_start

    if job.host and job.host != socket.gethostname():
        return "elsewhere"
    if not job.pid:
        return "gone"
    start = getattr(job, "pid_start", None)
    if start is not None:
        return "here" if process_start(job.pid) == start else "gone"
    return "here" if orchestrator_alive(job.pid) else "gone"


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
