"""What a failed trial attempt's error says: its exit (a code, or the signal that killed it),
and, when its log is empty, whether the run folder's disk is full (the log could not be
written: pointing at it would send the user to an empty file). Split out of
:mod:`spotwise.planner.trialbook`, which uses it; the job's summary reads
:data:`DISK_FULL` to leave out its own "see the trial logs".
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

from spotwise.planner.runstate import TrialRun

MIN_FREE_BYTES = 1 << 20  # a run folder with less free is full: a trial's log cannot be written
DISK_FULL = "disk is full"  # in a trial's error when its run folder had no room for its log
OOM_HINT = "on Linux often the out-of-memory killer: see `dmesg`"


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal 99`` for a number Python has no name for."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_text(code: int, step: int, steps_total: int) -> str:
    """How a trial's process ended: ``exited with code 1`` or, for a negative code (the
    process was killed by that signal: POSIX ``Popen``), the signal by name."""
    where = f"at step {step} of {steps_total}"
    if code >= 0:
        return f"the trial exited with code {code} {where}"
    number = -code
    name = signal_name(number)
    if number == getattr(signal, "SIGKILL", 9):
        how = f"{name} (signal {number}; {OOM_HINT})"
    elif name.startswith("signal "):
        how = name
    else:
        how = f"{name} (signal {number})"
    return f"the trial was killed by {how} {where}"


def empty_log(log_file: Path | None) -> bool:
    """Whether the attempt left no output to read: no log file, or an empty one."""
    if log_file is None:
        return True
    try:
        return log_file.stat().st_size == 0
    except OSError:
        return True


def disk_full(run_dir: Path, job_id: str, log_file: Path | None, progressed: bool) -> str | None:
    """When the attempt's log is empty (or missing) and the run folder's filesystem has less
    than :data:`MIN_FREE_BYTES` free: what to do (one clause), else None. ``progressed``: the
    trial reported a step or saved a checkpoint (`spotwise resume` keeps such a trial failed,
    so the advice is to run the job again)."""
    if not empty_log(log_file):
        return None
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        return None
    if free >= MIN_FREE_BYTES:
        return None
    then = (
        "run the job again (`spotwise resume` keeps a trial that failed after reporting steps)"
        if progressed
        else f"`spotwise resume {job_id}`"
    )
    return (
        f"its log is empty: the run folder {run_dir}'s {DISK_FULL} ({free} bytes free): "
        f"free space, then {then}"
    )


def exit_error(code: int, t: TrialRun, run_dir: Path, job_id: str, log_file: Path | None) -> str:
    """A trial attempt's error when its process ended with ``code`` (see :func:`exit_text`):
    an exit 0 with steps left was not asked for; a failure with an empty log says so when the
    run folder's disk is full (:func:`disk_full`)."""
    text = exit_text(code, t.step, t.steps_total)
    if code == 0:
        return text + " without being asked to stop"
    full = disk_full(run_dir, job_id, log_file, max(t.step, t.furthest, t.checkpoint_step) > 0)
    return f"{text}; {full}" if full else text
