"""A hangup (a closed terminal, a dropped ssh session) stops a running job as Ctrl-C does
(review-ba BA1), and each stop signal is answered on stderr (BA3).

SIGHUP kept Python's default action: `tune` died at once (rc -1), no drain, the job `running`
and its cloud instances billed on until `spotwise cancel`. Now SIGINT, SIGTERM and SIGHUP all
cancel: the trials checkpoint, every life is terminated and billed, the job ends `cancelled`
(exit 130); the terminal being gone (writes fail with EIO, or EPIPE on a pipe whose reader
left) aborts neither the drain nor the end. The first signal says the job is stopping and for
up to how long; a second that it is still stopping (none skips the stop).

The real CLI in a subprocess (its own session, as a terminal's job) on the replayed local
market with tiny trials (no torch); each a few wall seconds."""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_orchestrator import TINY, spec_dict, write_spec, write_trace

import spotwise
from spotwise.planner.drain import STOP_TIMEOUT_WALL_S
from spotwise.planner.runstate import on_signals
from spotwise.store import Store
from spotwise.store.models import TERMINAL_INSTANCE_STATES

ROOT = Path(spotwise.__file__).resolve().parent.parent  # the tree under test, for the child
_STARTED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    """A tune a failed test left running is stopped (its drain ends its trials)."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _as_a_terminal_starts_it() -> None:
    """In the child before exec: SIGINT and SIGHUP at their defaults, as a command typed at a
    terminal gets them (a test run started with them ignored, e.g. `.ci/run &` from a script,
    would pass that on, and the job would keep them ignored as it should)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


class _Hung(Exception):
    pass


@contextmanager
def _guard(sig: int) -> Iterator[list[int]]:
    """``sig`` raises :class:`_Hung` unless something else handles it (the default action
    would kill the test run); yields the signals the guard saw."""
    seen: list[int] = []

    def hung(signum: int, frame: Any) -> None:
        seen.append(signum)
        raise _Hung(f"signal {signum} reached the default handling")

    old = signal.signal(sig, hung)
    try:
        yield seen
    finally:
        signal.signal(sig, old)


class _Job:
    """Stands in for the orchestrator: its bound ``_request_cancel`` is what it routes."""

    job_id = "j-5c0ffee"

    def __init__(self) -> None:
        self.cancels = 0

    def _request_cancel(self) -> None:
        self.cancels += 1


def test_sighup_asks_the_job_to_cancel_and_says_so(capfd: pytest.CaptureFixture[str]) -> None:
    """BA1: SIGHUP was not routed: the default action ended tune with no drain."""
    job = _Job()
    with _guard(signal.SIGHUP) as seen:
        restore = on_signals(job._request_cancel)
        try:
            os.kill(os.getpid(), signal.SIGHUP)
        finally:
            restore()
        assert signal.getsignal(signal.SIGHUP).__name__ == "hung"  # type: ignore[union-attr]
    assert (seen, job.cancels) == ([], 1)
    err = capfd.readouterr().err
    assert "SIGHUP: stopping job j-5c0ffee" in err, err


def test_a_sighup_ignored_at_the_start_stays_ignored() -> None:
    """`nohup spotwise tune ...` asked the job to outlive its terminal: not a cancel."""
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        restore = on_signals(_Job()._request_cancel)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        restore()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


def test_the_first_signal_says_what_the_stop_does_and_a_second_that_it_goes_on(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """BA3: the first Ctrl-C was not acknowledged and a second was silently ignored for the
    30-60 s of the stop (when users reach for kill -9, which leaves cloud instances billed).
    Up to: the loop's wait for the trials to exit and the drain's for the noticed instances
    (30 s each), and a terminate's kill grace (5 s) after each."""
    job = _Job()
    up_to = round(2 * STOP_TIMEOUT_WALL_S + 2 * 5.0)
    assert up_to == 70
    with _guard(signal.SIGINT) as seen:
        restore = on_signals(job._request_cancel)
        try:
            os.kill(os.getpid(), signal.SIGINT)
            first = capfd.readouterr().err
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            later = capfd.readouterr().err
        finally:
            restore()
    assert (seen, job.cancels) == ([], 3)  # each one asks again: the loop acts once
    (line,) = first.strip().splitlines()
    assert line.startswith("spotwise: Ctrl-C: stopping job j-5c0ffee: its trials checkpoint")
    assert f"up to ~{up_to} s" in line
    assert "Another Ctrl-C does not skip it" in line
    assert (
        "kill -9 would leave its instances running, billed, until `spotwise cancel j-5c0ffee`"
        in line
    )
    second, third = later.strip().splitlines()
    for again in (second, third):
        assert again.startswith("spotwise: still stopping (0 s of up to ~70 s)"), again
        assert "does not skip it" in again


# ---- the real CLI, its terminal gone -------------------------------------------------------


def _spec(tmp_path: Path) -> Path:
    write_trace(tmp_path / "trace.csv")
    spec = spec_dict(
        tmp_path,
        command=["python", str(TINY)],
        steps=400,  # 40 wall s a trial: still running when the terminal goes
        trials=2,
        parallel=2,
        env={"TINY_TRIAL_STEP_S": "0.1"},
    )
    return write_spec(tmp_path, spec)


def _rows(db: str) -> tuple[Any, list[Any], list[Any]]:
    with Store.open_existing(db) as s:
        (job,) = s.list_jobs()
        return job, s.list_trials(job.id), s.list_instances(job.id)


def _running(db: str, trials: int) -> bool:
    """Every trial runs on a life and has reported a step."""
    try:
        _, rows, lives = _rows(db)
    except Exception:  # no database, no job yet
        return False
    running = [i for i in lives if i.state == "running"]
    stepped = [t for t in rows if (t.step or 0) >= 1]
    return len(running) == trials and len(stepped) == trials


def _alive(job_id: str) -> list[int]:
    """Processes whose environment names the job (its trials)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if f"SPOTWISE_JOB_ID={job_id}".encode() in env.split(b"\0"):
            found.append(int(pid))
    return found


def _tune(tmp_path: Path, out: int, err: int) -> tuple[subprocess.Popen[bytes], str]:
    """Start `spotwise tune` writing to ``out`` and ``err``."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SPOTWISE_HOME": str(tmp_path / "home"),
        "TERM": "xterm-256color",
        "COLUMNS": "100",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "spotwise", "tune", str(_spec(tmp_path)), "--db", db],
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # a terminal's job: the test's own signals stay its own
        preexec_fn=_as_a_terminal_starts_it,
    )
    _STARTED.append(proc)
    return proc, db


def _hang_up_when_running(
    proc: subprocess.Popen[bytes],
    db: str,
    drain: Callable[[], None],
    cut: Callable[[], None],
    sig: int = signal.SIGHUP,
) -> int:
    deadline = time.monotonic() + 60
    while not _running(db, trials=2):
        assert proc.poll() is None, f"tune ended before its trials ran: rc {proc.returncode}"
        assert time.monotonic() < deadline, "the trials never ran"
        drain()
    cut()  # the terminal goes: its writes fail from now on
    proc.send_signal(sig)  # as the kernel or the shell then sends it
    return proc.wait(timeout=60)


def _assert_cancelled_and_released(rc: int, db: str) -> None:
    job, trials, lives = _rows(db)
    assert rc == 130, (rc, job.state.value, job.error)  # was -1: killed by SIGHUP, no drain
    assert (job.state.value, job.error) == ("cancelled", None)
    assert job.ended_at is not None
    assert len(lives) == 2 and all(i.state in TERMINAL_INSTANCE_STATES for i in lives), [
        (i.instance_id, i.state) for i in lives
    ]
    assert all(i.extra_bills_json is None for i in lives)  # each billed once, by the drain
    assert job.cost_usd > 0
    assert job.cost_usd == pytest.approx(sum(i.cost_usd or 0.0 for i in lives))
    assert {t.state.value for t in trials} == {"cancelled"}
    assert all((t.step or 0) >= 1 for t in trials)
    if Path("/proc").is_dir():
        assert _alive(job.id) == []


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_a_closed_terminal_stops_the_job_and_releases_its_instances(tmp_path: Path) -> None:
    """tune on a pseudo-terminal (the live table drawn): the terminal closes (its master
    side: every later write fails with EIO), then SIGHUP."""
    master, slave = os.openpty()
    closed: list[bool] = []

    def drain() -> None:  # read what tune draws, or it blocks on a full terminal
        if closed:
            return
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            try:
                os.read(master, 1 << 16)
            except OSError as e:  # EIO: no writer left
                assert e.errno == errno.EIO

    def cut() -> None:
        os.close(master)
        closed.append(True)

    try:
        proc, db = _tune(tmp_path, slave, slave)
    finally:
        os.close(slave)
    rc = _hang_up_when_running(proc, db, drain, cut)
    _assert_cancelled_and_released(rc, db)


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT], ids=["hangup", "ctrl-c"])
def test_a_stop_with_both_outputs_on_a_gone_pipe_ends_cancelled(tmp_path: Path, sig: int) -> None:
    """`spotwise tune job.yaml 2>&1 | tee log`: the ssh session drops (or Ctrl-C reaches the
    whole pipeline), tee is gone (EPIPE on every write), then the signal. Ctrl-C was drained
    already, but exited 141 (the summary's broken pipe) where 130 was due."""
    r, w = os.pipe()
    closed: list[bool] = []

    def drain() -> None:
        if closed:
            return
        ready, _, _ = select.select([r], [], [], 0.05)
        if ready:
            os.read(r, 1 << 16)

    def cut() -> None:
        os.close(r)
        closed.append(True)

    try:
        proc, db = _tune(tmp_path, w, w)
    finally:
        os.close(w)
    rc = _hang_up_when_running(proc, db, drain, cut, sig)
    _assert_cancelled_and_released(rc, db)
