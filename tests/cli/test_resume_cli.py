"""`spotwise resume` on the command line: its exit codes follow `tune`'s, and a job that
cannot be resumed gets one line naming the fix, exit 2, and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spotwise import jobs
from spotwise.cli.app import app
from spotwise.job_rows import tune_json
from spotwise.store import Store


@pytest.mark.parametrize(
    ("summary", "code"),
    [
        ({"state": "succeeded"}, 0),
        ({"state": "failed"}, 1),
        ({"state": "succeeded", "leftover_instances": ["i-0abc"]}, 1),
        ({"state": "cancelled"}, 130),
    ],
)
def test_resume_exits_as_tune_does(
    monkeypatch: pytest.MonkeyPatch, summary: dict[str, Any], code: int
) -> None:
    seen: dict[str, Any] = {}

    def fake(job_id: str, **kw: Any) -> dict[str, Any]:
        seen.update(kw, job_id=job_id)
        return {"job_id": "j-1", **summary}

    monkeypatch.setattr(jobs, "resume", fake)
    args = ["resume", "j-1", "--max-cost", "12.5", "--deadline-hours", "6", "--json"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == code, done.output
    assert json.loads(done.stdout) == tune_json({"job_id": "j-1", **summary})  # docs/json.md
    assert seen == {"job_id": "j-1", "db": None, "max_cost_usd": 12.5, "deadline_hours": 6.0}


def _spotwise(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    return subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_job_that_cannot_be_resumed_gets_one_line_and_exit_2(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as store:
        job = store.create_job("x", "{}", str(tmp_path / "job.yaml"), "spot-greedy", "maximize")
        store.update_job(job.id, state="running")  # no pid: its orchestrator is gone
    done = _spotwise("resume", job.id, "--db", db)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: job {job.id}'s orchestrator exited without closing it: run `spotwise cancel "
        f"{job.id}` first (it releases the job's instances and closes its records), then "
        "resume it"
    ]
    assert done.stdout == ""
    with Store.open_existing(db) as store:
        assert store.get_job(job.id).state.value == "running"


def test_resume_of_an_unknown_job_exits_3(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    Store.open(db).close()
    done = _spotwise("resume", "j-nothere", "--db", db)
    assert done.returncode == 3, done.stderr
    assert "job 'j-nothere' not found" in done.stderr
