"""`spotwise status` without a job id, and the params of `trials`/`status` (review-u findings
7 and 11): the listing was capped at 20 jobs without a word, showed a job whose orchestrator
had died as plain "running", and params came out in alphabetical order, not the spec's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from spotwise import jobs
from spotwise.cli import render
from spotwise.cli.app import app
from spotwise.errors import SpecError
from spotwise.store import Store

DEAD_PID = 2**22 + 12345  # no process has it
SPACE = {  # the digits example's order, not alphabetical
    "lr": {"type": "real", "low": 0.001, "high": 0.5, "log": True},
    "hidden": {"type": "int", "low": 32, "high": 256},
    "weight_decay": {"type": "real", "low": 1e-6, "high": 1e-2, "log": True},
    "dropout": {"type": "real", "low": 0.0, "high": 0.5},
}


def _store(tmp_path: Path, n: int = 25) -> str:
    """``n`` finished jobs, the newest of which (j-dead) is "running" under a dead pid."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    spec = json.dumps({"name": "digits-mlp", "search_space": SPACE})
    with Store.open(db) as s:
        for i in range(n):
            job_id = "j-dead" if i == n - 1 else f"j-{i:04d}"
            s.create_job("digits-mlp", spec, "job.yaml", "asha", "maximize", job_id=job_id)
            s.update_job(job_id, state="succeeded", created_at=1_790_000_000.0 + i)
        s.update_job("j-dead", state="running", pid=DEAD_PID)
        trial = s.add_trial(
            "j-0000", 0, {"lr": 0.3, "hidden": 128, "weight_decay": 1e-6, "dropout": 0.1}
        )
        s.update_trial(trial.id, state="completed", final_metric=0.97)
        s.update_job("j-0000", best_trial_id=trial.id, best_metric=0.97)
    return db


def _run(*args: str, width: int = 80) -> tuple[int, str]:
    """Exit code and output of ``spotwise ARGS`` on a terminal ``width`` columns wide (the
    listings print through :data:`render.console`, sized when it was made)."""
    saved = render.console
    render.console = Console(width=width, highlight=False, color_system=None)
    try:
        done = CliRunner().invoke(app, list(args), env={"COLUMNS": str(width)})
    finally:
        render.console = saved
    return done.exit_code, done.stdout


def test_the_listing_says_how_many_jobs_it_left_out(tmp_path: Path) -> None:
    db = _store(tmp_path)
    code, text = _run("status", "--db", db, "--json")
    assert code == 0, text
    out = json.loads(text)
    assert (len(out["jobs"]), out["total"], out["left_out"]) == (20, 25, 5)
    assert out["jobs"][0]["job_id"] == "j-dead"  # newest first

    code, text = _run("status", "--db", db)
    assert code == 0 and "20 of 25 jobs; --limit 0 for all" in text

    out = json.loads(_run("status", "--db", db, "--limit", "0", "--json")[1])
    assert (len(out["jobs"]), out["total"], out["left_out"]) == (25, 25, 0)
    out = json.loads(_run("status", "--db", db, "--limit", "3", "--json")[1])
    assert [j["job_id"] for j in out["jobs"]] == ["j-dead", "j-0023", "j-0022"]
    code, text = _run("status", "--db", db, "--limit", "0")
    assert code == 0 and "of 25 jobs" not in text and "j-0000" in text

    with pytest.raises(SpecError, match="--limit must be 0"):
        jobs.status(None, db=db, limit=-1)
    assert _run("status", "--db", db, "--limit", "-1")[0] == 2


def test_a_job_whose_orchestrator_died_is_flagged_in_the_listing(tmp_path: Path) -> None:
    db = _store(tmp_path, n=3)
    out = json.loads(_run("status", "--db", db, "--json")[1])
    dead = next(j for j in out["jobs"] if j["job_id"] == "j-dead")
    assert (dead["state"], dead["orchestrator"]) == ("running", "gone")  # as `status JOB` says
    # a finished job's is null (docs/json.md: every key is there)
    assert all(j["orchestrator"] is None for j in out["jobs"] if j["job_id"] != "j-dead")
    code, text = _run("status", "--db", db)
    assert code == 0
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("j-dead"))
    assert "running (orchestrator" in lines[row] and "gone)" in lines[row + 1]  # wrapped, whole
    flat = " ".join(text.split())
    assert (
        "j-dead: its orchestrator is no longer running (it crashed or was killed): "
        "`spotwise cancel j-dead` releases what it still holds"
    ) in flat
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    assert "of 3 jobs" not in text  # all listed: nothing to say


def test_trials_and_status_show_params_in_the_spec_order(tmp_path: Path) -> None:
    db = _store(tmp_path, n=2)
    want = ["lr", "hidden", "weight_decay", "dropout"]
    (trial,) = json.loads(_run("trials", "j-0000", "--db", db, "--json")[1])["trials"]
    assert list(trial["params"]) == want
    best = json.loads(_run("status", "j-0000", "--db", db, "--json")[1])["best"]
    assert list(best["params"]) == want
    assert best["number"] == 0  # the number `spotwise tune` and `trials` name it by
    for args in (("trials", "j-0000"), ("status", "j-0000")):
        code, text = _run(*args, "--db", db, width=200)
        assert code == 0, text
        flat = " ".join(text.split())
        assert "lr=0.3 hidden=128 weight_decay=1e-06 dropout=0.1" in flat, text


def test_trials_say_why_a_trial_was_stopped_early(tmp_path: Path) -> None:
    """review-ac F1: a budget's stop showed as `stopped_early` like a policy's judgement; the
    reason is now beside it (text and --json), the first stop of the run that stopped it."""
    db = _store(tmp_path, n=2)
    with Store.open(db) as s:
        for n, why in ((1, "budget"), (2, "asha")):
            t = s.add_trial(
                "j-0000", n, {"lr": 0.1, "hidden": 64, "weight_decay": 1e-4, "dropout": 0.2}
            )
            s.update_trial(t.id, state="stopped_early", step=3)
            s.add_event("j-0000", "stop_early", 1.0, trial_id=t.id, reason=why)
            s.add_event("j-0000", "stop_early", 2.0, trial_id=t.id, reason="deadline")  # later
    rows = json.loads(_run("trials", "j-0000", "--db", db, "--json")[1])["trials"]
    assert [(r["number"], r["state"], r["stop_reason"]) for r in rows] == [
        (0, "completed", None),
        (1, "stopped_early", "budget"),
        (2, "stopped_early", "asha"),
    ]
    code, text = _run("trials", "j-0000", "--db", db, width=120)
    assert code == 0
    assert "stopped_early (budget)" in text and "stopped_early (asha)" in text
