"""How a running job hears that it must stop: SIGINT (Ctrl-C), SIGTERM (`kill`, a supervisor's
stop) and SIGHUP (its terminal closed, an ssh session dropped) each ask it to cancel. Its loop
then has every trial checkpoint and exit, and its drain terminates and bills every instance
before it exits (exit 130): nothing it bought is left running.

A hangup used to end the process at once (Python's default action), its cloud instances
running on, billed, until `spotwise cancel` (review-ba BA1). A SIGHUP that was ignored when the
job started (``nohup``) stays ignored: the user asked the job to outlive its terminal. So does a
SIGINT ignored at start: a shell without job control ignores it for a command started with
``&`` (``spotwise tune job.yaml &`` in a script), so that the terminal's Ctrl-C, which reaches
the script's whole process group, stops the script and not the job it left running.

Each signal is answered with one line on stderr (review-ba BA3): the first says what the stop
does and how long it can take (:func:`stop_seconds`), each later one that it is still stopping.
No number of signals skips the stop: releasing what was bought is what keeps the money safe,
and ``kill -9`` is the deliberate way out (its instances are left to `spotwise cancel JOB`).
The line is written with :func:`os.write`: the handler may run in the middle of a buffered
write to stderr. A terminal gone (``EIO``: the hangup's) or a stderr pipe whose reader is gone
(``EPIPE``) is pointed at ``/dev/null``, so that no later write (a log line, the live table's
last picture, the summary, the interpreter's last flush) fails the drain or the exit code.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from spotwise.providers import stopping

#: The signals that cancel a running job.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The local provider's wait for a terminated trial's processes before it kills them, wall s
#: (``LocalProvider.kill_grace_s``): a terminate call may take this long.
KILL_GRACE_WALL_S = 5.0
#: Stop signals left ignored when they were at start (SIGTERM is a supervisor's stop: always
#: taken).
_KEPT_IGNORED = (signal.SIGINT, signal.SIGHUP)
_NAMES: dict[int, str] = {
    signal.SIGINT: "Ctrl-C",
    signal.SIGTERM: "SIGTERM",
    signal.SIGHUP: "SIGHUP",
}


def stop_seconds() -> int:
    """How long a job can take to stop after a signal, wall seconds: its loop waits up to
    :data:`~spotwise.planner.drain.STOP_TIMEOUT_WALL_S` for each trial to checkpoint and exit
    (then terminates it: a kill grace), and its drain as long for the instances a notice is
    taking (then terminates the rest: a kill grace). A cloud create being waited for hears
    the stop within :data:`~spotwise.providers.stopping.HEAR_EVERY_S` (it no longer waits out
    ``operation_timeout_s``: review-bb F1). A slow provider API adds to it."""
    from spotwise.planner.drain import STOP_TIMEOUT_WALL_S

    return round(2 * STOP_TIMEOUT_WALL_S + 2 * KILL_GRACE_WALL_S)


def first_line(signum: int, job_id: str | None, up_to_s: int) -> str:
    """What the first signal is answered with."""
    job = f"job {job_id}" if job_id else "the job"
    cancel = f"spotwise cancel {job_id or 'JOB'}"
    return (
        f"spotwise: {_NAMES.get(signum, f'signal {signum}')}: stopping {job}: its trials "
        f"checkpoint, then its instances are terminated and billed; this can take up to "
        f"~{up_to_s} s. Another Ctrl-C does not skip it (kill -9 would leave its instances "
        f"running, billed, until `{cancel}`)."
    )


def again_line(waited_s: float, up_to_s: int) -> str:
    """What each later signal is answered with."""
    return (
        f"spotwise: still stopping ({waited_s:.0f} s of up to ~{up_to_s} s): its instances "
        "are being terminated and billed; Ctrl-C again does not skip it."
    )


def _silence(fd: int) -> None:
    """Point ``fd`` at /dev/null: what is written there from now on succeeds."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _write_or_silence(fd: int, data: bytes) -> None:
    """Write ``data`` to ``fd``; a dead terminal or a reader gone silences it instead."""
    try:
        data = data[os.write(fd, data) :]  # once even when empty: a dead terminal says EIO
        while data:
            data = data[os.write(fd, data) :]
    except OSError:  # EIO (a hung-up terminal), EPIPE (no reader), EBADF (closed)
        with contextlib.suppress(OSError):
            _silence(fd)


class _Stopping:
    """The handler of :data:`STOP_SIGNALS`: answer the signal, then ask the job to cancel."""

    def __init__(self, callback: Callable[[], None], job_id: str | None) -> None:
        self.callback = callback
        self.job_id = job_id
        self.up_to_s = stop_seconds()  # now: no import inside a signal handler
        self.first_wall: float | None = None
        self.lead = "\n" if _isatty(2) else ""  # after the live table's line or the ^C echo

    def __call__(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGHUP:
            _write_or_silence(1, b"")  # a hung-up terminal refuses even an empty write (EIO)
        if self.first_wall is None:
            self.first_wall = time.monotonic()
            line = first_line(signum, self._job(), self.up_to_s)
        else:
            line = again_line(time.monotonic() - self.first_wall, self.up_to_s)
        _write_or_silence(2, f"{self.lead}{line}\n".encode(errors="replace"))
        stopping.set()  # a cloud create being waited for ends its wait (review-bb F1)
        self.callback()

    def _job(self) -> str | None:
        """The job's id: given, else the orchestrator's whose ``_request_cancel`` this routes
        (it is set before the handler is installed)."""
        found = self.job_id or getattr(getattr(self.callback, "__self__", None), "job_id", None)
        return found if isinstance(found, str) else None


def _isatty(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def on_signals(callback: Callable[[], None], job_id: str | None = None) -> Callable[[], None]:
    """Route :data:`STOP_SIGNALS` to ``callback`` (main thread only), each answered with a
    line on stderr (``job_id`` names the job there); returns the restorer. A SIGHUP or SIGINT
    ignored when it is called (``nohup``; ``cmd &`` in a script) stays ignored."""
    handler = _Stopping(callback, job_id)
    old: dict[int, Any] = {}
    stopping.clear()  # a job of this process that ended before asked nothing of this one
    try:
        for sig in STOP_SIGNALS:
            if sig in _KEPT_IGNORED and signal.getsignal(sig) == signal.SIG_IGN:
                continue
            old[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: leave signals alone
        pass

    def restore() -> None:
        for sig, was in old.items():
            signal.signal(sig, was)
        stopping.clear()

    return restore
