"""`spotwise trials` without a JOB shows the job most recently active (the latest of its start,
last heartbeat and end), not the newest created: after `spotwise resume` of an older job, that
job's trials (review-af F11); the text says which job it shows."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from spotwise import jobs
from spotwise.cli.app import app
from spotwise.store import Store

NOW = 1_795_500_000.0


def _jobs(tmp_path: Path) -> tuple[str, str, str]:
    """Three finished jobs: `old`, created first and resumed last (its start and heartbeat
    the latest); `new`, created last, finished before that resume; `never`, never started."""
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with Store.open(db) as s:
        ids = {}
        for name, created in (("old", NOW - 7200), ("never", NOW - 3000), ("new", NOW - 600)):
            j = s.create_job(name, "{}", "job.yaml", "spot-greedy", "maximize")
            s.update_job(j.id, created_at=created)
            s.add_trial(j.id, 0, {"lr": 0.1 if name == "old" else 0.2})
            ids[name] = j.id
        s.update_job(ids["new"], state="succeeded", started_at=NOW - 590, ended_at=NOW - 300)
        # resumed 100 s ago: started again, still running (its last heartbeat 5 s ago)
        s.update_job(ids["old"], state="running", started_at=NOW - 100, heartbeat_at=NOW - 5)
        s.update_job(ids["never"], state="pending")
    return db, ids["old"], ids["new"]


def test_trials_shows_the_job_most_recently_active(tmp_path: Path) -> None:
    db, old, new = _jobs(tmp_path)
    assert jobs.trials(None, db=db)["job_id"] == old
    done = CliRunner().invoke(app, ["trials", "--db", db, "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["job_id"] == old
    done = CliRunner().invoke(app, ["trials", "--db", db], env={"COLUMNS": "200"})
    assert f"trials of {old}" in done.stdout and "0.1" in done.stdout
    assert jobs.trials(new, db=db)["job_id"] == new  # a JOB named: that one


def test_its_end_counts_too_and_a_job_never_started_counts_its_creation(tmp_path: Path) -> None:
    db, _, new = _jobs(tmp_path)
    with Store.open(db) as s:  # the new job ended after the old one's last heartbeat
        s.update_job(new, ended_at=NOW)
    assert jobs.trials(None, db=db)["job_id"] == new
    with Store.open(db) as s:  # created after everything else happened, never started
        j = s.create_job("fresh", "{}", "job.yaml", "spot-greedy", "maximize")
        s.update_job(j.id, created_at=NOW + 10)
    assert jobs.trials(None, db=db)["job_id"] == j.id
