"""A SIGINT ignored when the job starts stays ignored, as an ignored SIGHUP does (nohup).

A shell without job control (a script) ignores SIGINT for a command it starts with ``&``: the
terminal's Ctrl-C reaches the script's whole process group, and the shell keeps it from the
background job. `spotwise tune job.yaml &` in a script took the Ctrl-C meant for the script and
cancelled the job it had left running (a gap noted in the twenty-third session). SIGTERM, a
supervisor's stop, is always taken.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from spotwise.planner.signals import on_signals

ROOT = Path(__file__).resolve().parents[2]


class _Job:
    def __init__(self) -> None:
        self.cancels = 0

    def _request_cancel(self) -> None:
        self.cancels += 1


def test_a_sigint_ignored_at_the_start_stays_ignored() -> None:
    job = _Job()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        restore = on_signals(job._request_cancel)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # ignored by the kernel: nothing runs
        restore()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, old)
    assert job.cancels == 0


def test_a_sigint_handled_at_the_start_is_taken() -> None:
    """Python's own Ctrl-C handler (an interactive start) is replaced by the stop."""
    job = _Job()
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        restore = on_signals(job._request_cancel)
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        os.kill(os.getpid(), signal.SIGINT)
        restore()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, old)
    assert job.cancels == 1


_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from spotwise.planner.signals import on_signals
    heard = []
    on_signals(lambda: heard.append(1))
    print("ready", flush=True)
    deadline = time.monotonic() + 20
    while not heard and time.monotonic() < deadline:
        time.sleep(0.02)
    print("cancels", len(heard), flush=True)
    """
)


def test_a_background_job_of_a_script_keeps_running_through_the_scripts_ctrl_c() -> None:
    """The script's shell started the job with SIGINT ignored (as `cmd &` does): its group's
    Ctrl-C does not cancel it; the SIGTERM after it does, once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            "bash",
            "-c",
            f'{sys.executable} -c "$0" & wait',
            _CHILD,
        ],  # no job control: & ignores SIGINT
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: the test's Ctrl-C stays the test's
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the whole group
        os.killpg(proc.pid, signal.SIGTERM)  # bash waits on; the job hears the SIGTERM
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert out.strip() == "cancels 1", (out, err)
    assert "SIGTERM: stopping" in err, err
    assert "Ctrl-C: stopping" not in err, err  # the ignored SIGINT was not taken for a stop
