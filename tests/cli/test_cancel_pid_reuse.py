"""`spotwise cancel` signals a job's orchestrator only if the process holding the recorded pid
is the one that recorded it (its start token, recorded with the pid since revision 0003): after
the orchestrator died, the OS may give its pid to any process, another job's orchestrator or a
trial among them, and a command line naming spotwise proves nothing (review-z F2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from spotwise import jobs
from spotwise.providers.local_records import LINUX, process_start
from spotwise.store import Store
from spotwise.store.db import head_revision

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from shared_helpers import running_local_job  # noqa: E402 (needs the path above)

# a process that says when its SIGTERM handler is set, and writes the signal to argv[1]
CHILD = (
    "import pathlib, signal, sys, time\n"
    "def stop(*_):\n"
    "    pathlib.Path(sys.argv[1]).write_text('SIGTERM')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "print('ready', flush=True)\n"
    "time.sleep(30)\n"
)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))  # local pid records


def _start(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen[str], Path]:
    """A child running :data:`CHILD` from ``tmp_path/spotwise`` (a folder named spotwise, as a
    checkout or venv is), its handler set; and the file its SIGTERM writes."""
    cwd = tmp_path / "spotwise"
    cwd.mkdir(exist_ok=True)
    flag = tmp_path / f"sigterm-{len(list(tmp_path.glob('sigterm-*')))}"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(flag), *argv], cwd=cwd, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc, flag


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(5)


def _running_job(db: str, pid: int, **fields: Any) -> str:
    return running_local_job(db, pid, **fields)


def _earlier_start(pid: int) -> str:
    """The start token of a process that held ``pid`` before the live one (a dead orchestrator
    whose pid was given again): the live one's, a second earlier."""
    token = process_start(pid)
    assert token is not None
    if not LINUX:
        return "Thu Jan  1 00:00:00 1970"
    boot, _, ticks = token.rpartition(":")
    return f"{boot}:{int(ticks) - 100}"


def test_a_process_given_the_dead_orchestrators_pid_is_not_signalled(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """It names spotwise (`spotwise tune job-B.yaml`, run from a folder named spotwise): the
    old rule took it for the orchestrator and sent it SIGTERM, and job A stayed running."""
    stranger, flag = _start(tmp_path, "spotwise", "tune", "job-B.yaml")
    children.append(stranger)
    db = f"sqlite:///{tmp_path / 's.db'}"
    job = _running_job(db, stranger.pid, pid_start=_earlier_start(stranger.pid))

    assert jobs.status(job, db=db)["orchestrator"] == "gone"  # status flags it, cancel agrees
    out = jobs.cancel(job, db=db, wait_s=0)

    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    assert out["message"].startswith("orchestrator was not running; job marked cancelled")
    with Store.open_existing(db) as s:
        assert s.get_job(job).error == "cancelled after its orchestrator had exited"
    stranger.send_signal(signal.SIGKILL)
    assert stranger.wait(5) == -signal.SIGKILL  # it was still sleeping: no SIGTERM came
    assert not flag.exists()


def test_the_recorded_orchestrator_is_signalled_whatever_its_command_line(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    orchestrator, flag = _start(tmp_path)  # no "spotwise" in its arguments: the old rule
    # took it for gone (where the interpreter's own path names no spotwise folder)
    children.append(orchestrator)
    db = f"sqlite:///{tmp_path / 's.db'}"
    job = _running_job(db, orchestrator.pid, pid_start=process_start(orchestrator.pid))

    assert jobs.status(job, db=db)["orchestrator"] == "here"
    out = jobs.cancel(job, db=db, wait_s=0)

    assert out["cancelled"] is False and out["state"] == "running"  # it has not ended yet
    assert out["message"].startswith(f"asked the orchestrator (pid {orchestrator.pid}) to stop")
    assert orchestrator.wait(5) == 0 and flag.read_text() == "SIGTERM"


def test_tune_and_resume_record_the_orchestrators_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.planner.resume import ResumePlan

    rows = ["timestamp,availability_zone,instance_type,spot_available,"
            "spot_price_usd_per_hour,on_demand_price_usd_per_hour"]  # fmt: skip
    rows += [f"2023-03-01 00:{m:02d}:00,us-east-1a,p3.2xlarge,1,1.0,5.0" for m in range(60)]
    (tmp_path / "trace.csv").write_text("\n".join(rows) + "\n")
    replay = {"trace": str(tmp_path / "trace.csv"), "speedup": 30.0}
    spec = {
        "name": "a",
        "command": ["python", "-c", "raise SystemExit(1)"],  # fails at once: only the rows matter
        "metric": {"name": "m"},
        "steps": 2,
        "trials": 1,
        "search_space": {"lr": {"type": "real", "low": 0.1, "high": 0.2}},
        "providers": [{"name": "local", "replay": replay}],
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    db = f"sqlite:///{tmp_path / 's.db'}"
    me = process_start(os.getpid())

    job = jobs.tune(tmp_path / "job.yaml", db=db, run_root=tmp_path / "runs")["job_id"]
    with Store.open_existing(db) as s:
        assert (s.get_job(job).pid, s.get_job(job).pid_start) == (os.getpid(), me)
        s.update_job(job, state="cancelled", pid_start="an earlier run's")
        (trial,) = s.list_trials(job)
        s.update_trial(trial.id, state="cancelled")  # something for the resume to run

    claimed: list[Any] = []
    claim = ResumePlan.claim

    def spy(plan: ResumePlan, store: Any, *args: Any, **kwargs: Any) -> None:
        claim(plan, store, *args, **kwargs)
        claimed.append(store.get_job(job).pid_start)  # the claim itself records it

    monkeypatch.setattr(ResumePlan, "claim", spy)
    jobs.resume(job, db=db, run_root=tmp_path / "runs")
    assert claimed == [me]
    with Store.open_existing(db) as s:
        assert s.get_job(job).pid_start == me


def test_a_database_of_revision_0002_upgrades_and_its_jobs_keep_the_old_rule(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """A job recorded before the token has none (NULL): judged as before, by a live pid whose
    command line names spotwise."""
    from alembic import command

    from spotwise.store.db import alembic_config, make_engine

    legacy, _ = _start(tmp_path, "spotwise", "tune", "job.yaml")
    children.append(legacy)
    db = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(db)
    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), "0002")
        conn.exec_driver_sql(
            "INSERT INTO job (id, name, spec_json, spec_path, policy, state, created_at, "
            "direction, cost_usd, on_demand_cost_usd, revocations, migrations, early_stopped, "
            f"pid) VALUES ('j-old', 'old', '{{}}', 'job.yaml', 'spot-greedy', 'running', 1.0, "
            f"'maximize', 0, 0, 0, 0, 0, {legacy.pid})"
        )
        conn.commit()
    engine.dispose()

    with Store.open(db) as s:
        with s.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").all() == [
                (head_revision(),)  # upgraded to the newest revision, 0003's column among them
            ]
            assert "pid_start" in {c["name"] for c in sa.inspect(conn).get_columns("job")}
        old = s.get_job("j-old")
    assert (old.pid, old.pid_start) == (legacy.pid, None)
    assert jobs.orchestrator_state(old) == "here"
