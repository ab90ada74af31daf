"""No local trial outlives its orchestrator: it dies with it (Linux, PR_SET_PDEATHSIG), and
what survives is found from the pid records and killed by reconcile — never a stranger whose
pid matches a record. Real processes throughout; waits are generous, nothing asserts timing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import contract
import numpy as np
import pytest
from orphan_parent import parent_script

from spotwise.errors import ProviderError
from spotwise.providers import local_exec
from spotwise.providers.base import LaunchRequest, Market, our_tags
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.local_records import (
    MARKER_ENV,
    ProcRecord,
    process_start,
    read_records,
    reconcile_job,
    write_record,
)
from spotwise.providers.replay import MarketClock, ReplayMarket
from spotwise.traces import TraceSet

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux-only"
)
JOB = "job-orphans"
WAIT = 30.0
SLEEP = "import time; time.sleep(60)"
# argv[1]: a file written once the program is ready for signals
READY_SLEEP = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(60)"
READY_IGNORE_TERM = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    "open(sys.argv[1], 'w').close(); time.sleep(60)"
)
# a trial that starts a child of its own (in its process group), writes the child's pid, sleeps
SPAWNS = (
    "import subprocess, sys, time;"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
    "open(sys.argv[1] + '.tmp', 'w').write(str(p.pid));"
    "import os; os.replace(sys.argv[1] + '.tmp', sys.argv[1]);"
    "time.sleep(60)"
)

# An orchestrator stand-in: a provisioner on a one-zone market launches one trial, says which,
# and waits to be killed. argv: records dir, trial argv as JSON.
PARENT = parent_script(JOB)


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    return contract.wait_for(predicate, timeout, what)


def running(pid: int, start: str) -> bool:
    """Whether the process recorded as (pid, start) still runs (a zombie does not)."""
    return process_start(pid) == start


@pytest.fixture
def market() -> ReplayMarket:
    t0 = 1_700_000_000.0
    traces = TraceSet(
        ["us-east-1a"], t0 + 10.0 * np.arange(40), np.ones((1, 40), dtype=bool),
        np.ones((1, 40)), instance_type="p3.2xlarge", on_demand_price=5.0, gap_seconds=10.0,
    )  # fmt: skip
    return ReplayMarket(traces)


@pytest.fixture
def prov(market: ReplayMarket, tmp_path: Path) -> Iterator[LocalProvisioner]:
    p = LocalProvisioner(
        market, MarketClock(market.start_time, 1.0), kill_grace_s=0.5,
        records_dir=tmp_path / "records",
    )  # fmt: skip
    yield p
    p.shutdown()


def request(market: ReplayMarket, argv: tuple[str, ...], token: str = "tok-1") -> LaunchRequest:
    (o,) = market.offers(at=market.start_time, market=Market.ON_DEMAND)
    return LaunchRequest(o, argv, {}, our_tags(JOB, "trial-1", token), token, "")


def only_record(records: Path) -> ProcRecord:
    (pair,) = read_records(records, JOB)
    return pair[1]


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[Callable[[tuple[str, ...]], subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(trial: tuple[str, ...]) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
        proc = subprocess.Popen(
            [sys.executable, "-c", PARENT, str(tmp_path / "records"), json.dumps(trial)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"the orchestrator stand-in exited {proc.wait()}"
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    reconcile_job(JOB, tmp_path / "records", grace_s=1.0)  # a failed test leaves nothing behind


# ---- dying with the orchestrator -------------------------------------------------------------
@linux_only
def test_trial_dies_when_its_orchestrator_is_sigkilled(
    orchestrator: Callable[[tuple[str, ...]], subprocess.Popen[str]], tmp_path: Path
) -> None:
    parent = orchestrator((sys.executable, "-c", SLEEP))
    rec = only_record(tmp_path / "records")
    assert rec.launcher_pid == parent.pid and rec.pgid == rec.pid
    assert running(rec.pid, rec.start)

    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    wait_for(lambda: not running(rec.pid, rec.start), "the orphaned trial to die", timeout=10)
    assert reconcile_job(JOB, tmp_path / "records") == []  # nothing left to kill
    assert read_records(tmp_path / "records", JOB) == []  # and the stale record is gone


@linux_only
def test_reconcile_kills_what_the_trial_started_after_its_orchestrator_died(
    orchestrator: Callable[[tuple[str, ...]], subprocess.Popen[str]], tmp_path: Path
) -> None:
    child_file = tmp_path / "grandchild.pid"
    parent = orchestrator((sys.executable, "-c", SPAWNS, str(child_file)))
    rec = only_record(tmp_path / "records")
    grandchild = int(wait_for(lambda: child_file.exists() and child_file.read_text(), "child"))
    grandchild_start = process_start(grandchild)
    assert grandchild_start is not None

    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    wait_for(lambda: not running(rec.pid, rec.start), "the trial to die with its orchestrator")
    assert running(grandchild, grandchild_start)  # PR_SET_PDEATHSIG is not inherited

    assert reconcile_job(JOB, tmp_path / "records", grace_s=2.0) == [rec.instance_id]
    wait_for(lambda: not running(grandchild, grandchild_start), "the group to be killed")
    assert read_records(tmp_path / "records", JOB) == []


@linux_only
def test_exec_helper_runs_nothing_if_its_launcher_is_already_gone(tmp_path: Path) -> None:
    go_r, go_w = os.pipe()
    status_r, status_w = os.pipe()
    wrong_parent = os.getppid()  # not the helper's parent (this process is)
    try:
        out = subprocess.run(
            [sys.executable, "-I", "-S", local_exec.__file__, str(go_r), str(status_w),
             str(wrong_parent)],
            pass_fds=(go_r, status_w), timeout=WAIT,
        )  # fmt: skip
    finally:
        for fd in (go_r, go_w, status_r, status_w):
            os.close(fd)
    assert out.returncode == local_exec.EXIT_ORPHANED


# ---- reconcile ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("program", "killed_by"), [(READY_SLEEP, signal.SIGTERM), (READY_IGNORE_TERM, signal.SIGKILL)]
)
def test_reconcile_kills_a_recorded_trial_still_running(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path, program: str, killed_by: int
) -> None:
    ready = tmp_path / "ready"
    inst = prov.launch(request(market, (sys.executable, "-c", program, str(ready))))
    rec = only_record(tmp_path / "records")
    assert rec.instance_id == inst.instance_id and rec.start == process_start(rec.pid)
    wait_for(ready.exists, "the program to be ready")

    # the orchestrator "crashed": only the record is left to go by
    assert reconcile_job(JOB, tmp_path / "records", grace_s=1.0) == [inst.instance_id]
    (seen,) = wait_for(lambda: [i for i in prov.describe() if i.exit_code is not None], "exit")
    assert seen.exit_code == -killed_by
    assert read_records(tmp_path / "records", JOB) == []


def test_reconcile_never_signals_a_pid_whose_start_time_differs(tmp_path: Path) -> None:
    iid = "local-tok-stranger"
    env = {**os.environ, MARKER_ENV: iid}  # even carrying our mark: the start time decides
    stranger = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True, env=env)
    try:
        records = tmp_path / "records"
        start = wait_for(lambda: process_start(stranger.pid), "the process to start")
        write_record(records, ProcRecord(
            instance_id=iid, job_id=JOB, pid=stranger.pid, pgid=stranger.pid,
            start=start + "-not-this-one", tags=our_tags(JOB, "trial-1", "tok-stranger"),
            argv=[sys.executable, "-c", SLEEP], launcher_pid=os.getpid(), created_at=time.time(),
        ))  # fmt: skip
        assert reconcile_job(JOB, records, grace_s=1.0) == []
        time.sleep(0.3)
        assert stranger.poll() is None  # untouched
        assert process_start(stranger.pid) == start
        assert read_records(records, JOB) == []  # the stale record is dropped
    finally:
        stranger.kill()
        stranger.wait()


def test_reconcile_leaves_other_jobs_alone(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    inst = prov.launch(request(market, (sys.executable, "-c", SLEEP)))
    assert reconcile_job("job-someone-else", tmp_path / "records") == []
    assert only_record(tmp_path / "records").instance_id == inst.instance_id
    assert [i.exit_code for i in prov.describe()] == [None]


# ---- records -----------------------------------------------------------------------------------
def test_a_launch_is_recorded_until_its_process_ends(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    inst = prov.launch(request(market, (sys.executable, "-c", SLEEP)))
    rec = only_record(tmp_path / "records")
    assert rec.job_id == JOB and rec.tags["spotwise:launch"] == "tok-1"
    assert rec.pgid == rec.pid and rec.start == process_start(rec.pid)
    assert rec.argv == [sys.executable, "-c", SLEEP] and rec.launcher_pid == os.getpid()
    if sys.platform.startswith("linux"):  # the trial itself carries the mark
        environ = Path(f"/proc/{rec.pid}/environ").read_bytes().split(b"\0")
        assert f"{MARKER_ENV}={inst.instance_id}".encode() in environ
    prov.terminate([inst.instance_id])
    assert read_records(tmp_path / "records", JOB) == []


def test_a_program_that_cannot_start_leaves_no_record(
    prov: LocalProvisioner, market: ReplayMarket, tmp_path: Path
) -> None:
    with pytest.raises(ProviderError, match="cannot start"):
        prov.launch(request(market, (str(tmp_path / "no-such-program"),)))
    assert read_records(tmp_path / "records", JOB) == []
    assert prov.describe() == []
