"""`status`, `trials` and the tune/resume summary say what a job's dollars are (review-af F3,
F2, F11), as `report` already did.

* A job on the ``local`` provider traded on the replayed market: its dollars are simulated.
  `report` kept them apart (``replay``), but `status --json` (listing and JOB), `trials --json`
  and the tune summary carried a bare ``cost_usd``: a script summing the listing added them to
  real money. Each now carries ``simulated`` (report's rule, shared: :func:`job_facts.simulated`),
  and the text says so next to the $.
* A job not finished shows its orchestrator's running estimate (its running instances as if
  they ended at its last save; a dead orchestrator's is stale, `cancel` replaces it):
  ``cost_is_estimate`` in JSON, "estimate" in the text.
* A closed life whose trial was stopped (end_reason "stopped") read as state "stopped", like a
  stopped VM that still holds its disk: it is "ended (stopped)".

The store's rows are written directly (no job runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from shared_helpers import record_launch
from typer.testing import CliRunner

from spotwise import costs, job_facts, jobs
from spotwise.cli import render
from spotwise.cli.app import app
from spotwise.store import Store

DEAD_PID = 2**22 + 12345  # no process has it
NOW = 1_790_000_000.0


def _spec(provider: str) -> str:
    return json.dumps({"name": "digits", "providers": [{"name": provider}]})


def _store(tmp_path: Path) -> str:
    """``j-sim`` (a finished replay, $2.0336 simulated), ``j-real`` (a finished aws job,
    $3.50), ``j-dead`` (a replay "running" under a dead orchestrator: its last estimate
    $0.4230), ``j-away`` (an aws job running on another machine: its estimate $0.6716). Each
    finished job has one ended life."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    rows = [
        ("j-sim", "local", "succeeded", 2.0336),
        ("j-real", "aws", "succeeded", 3.5),
        ("j-dead", "local", "running", 0.4230),
        ("j-away", "aws", "running", 0.6716),
    ]
    with Store.open(db) as s:
        for n, (job_id, provider, state, cost) in enumerate(rows):
            s.create_job("digits", _spec(provider), "job.yaml", "spot-greedy", "maximize",
                         job_id=job_id)  # fmt: skip
            where = {"pid": DEAD_PID} if job_id == "j-dead" else {}
            if job_id == "j-away":  # its orchestrator runs elsewhere: alive, as far as we know
                where = {"pid": 4242, "host": "another-machine"}
            s.update_job(job_id, state=state, cost_usd=cost, on_demand_cost_usd=3 * cost,
                         created_at=NOW - 100 + n, **where)  # fmt: skip
            if state != "succeeded":
                continue
            t = s.add_trial(job_id, 0, {"lr": 0.1})
            s.update_trial(t.id, state="completed", cost_usd=cost)
            record_launch(
                s, job_id, t.id, price_per_hour=0.9, provider=provider, id=f"l-{job_id}",
                state="terminated", end_reason="stopped", launched_at=NOW - 3600,
                ended_at=NOW - 60, cost_usd=cost, on_demand_cost_usd=3 * cost,
                market_seconds=3600.0,
            )  # fmt: skip
    return db


def _cli(*args: str) -> tuple[int, str]:
    saved = render.console
    render.console = Console(width=80, highlight=False, color_system=None)
    try:
        done = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    finally:
        render.console = saved
    return done.exit_code, done.stdout


def test_status_json_says_which_jobs_dollars_are_simulated_and_which_an_estimate(
    tmp_path: Path,
) -> None:
    db = _store(tmp_path)
    code, text = _cli("status", "--db", db, "--json")
    assert code == 0, text
    listed = {j["job_id"]: j for j in json.loads(text)["jobs"]}
    got = {k: (j["simulated"], j["cost_is_estimate"]) for k, j in listed.items()}
    assert got == {
        "j-sim": (True, False),
        "j-real": (False, False),
        "j-dead": (True, True),  # a dead orchestrator's last estimate
        "j-away": (False, True),
    }
    # what a script sums: the real money only, once it is a bill
    money = [j["cost_usd"] for j in listed.values() if not j["simulated"]]
    assert sum(money) == pytest.approx(3.5 + 0.6716)
    billed = [
        j["cost_usd"] for j in listed.values() if not (j["simulated"] or j["cost_is_estimate"])
    ]
    assert billed == [3.5]
    for job_id, (sim, est) in got.items():
        one = json.loads(_cli("status", job_id, "--db", db, "--json")[1])
        assert (one["simulated"], one["cost_is_estimate"]) == (sim, est), job_id
    assert json.loads(_cli("trials", "j-sim", "--db", db, "--json")[1])["simulated"] is True
    assert json.loads(_cli("trials", "j-real", "--db", db, "--json")[1])["simulated"] is False


def test_simulated_is_the_rule_report_keeps_replayed_dollars_apart_by(tmp_path: Path) -> None:
    """One rule for both: a job is simulated in `status` exactly when `report` puts its lives
    under ``replay``."""
    db = _store(tmp_path)
    out = costs.report(since="all", by="job", db=db, now=NOW)
    replayed = {g["key"] for g in out["replay"]["groups"]}
    real = {g["key"] for g in out["groups"]}
    assert (replayed, real) == ({"j-sim"}, {"j-real"})
    listed = jobs.status(None, db=db, limit=0)["jobs"]
    assert {j["job_id"] for j in listed if j["simulated"] and j["job_id"] in replayed | real} == (
        replayed
    )
    simulated = job_facts.simulated
    assert simulated(_spec("local")) and simulated({"providers": [{"name": "local"}]})
    assert not simulated(_spec("gcp"))
    assert not simulated("not json") and not simulated(json.dumps({"name": "x"}))


def test_the_listing_marks_simulated_and_estimated_dollars_in_80_columns(tmp_path: Path) -> None:
    db = _store(tmp_path)
    code, text = _cli("status", "--db", db)
    assert code == 0, text
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in text
    cost = {line.split()[0]: line.split() for line in lines if line.startswith("j-")}
    assert "2.0336*" in cost["j-sim"] and "3.5000" in cost["j-real"]
    assert "~0.4230*" in cost["j-dead"] and "~0.6716" in cost["j-away"]
    assert "3.5000*" not in text and "~3.5000" not in text
    flat = " ".join(text.split())
    assert "$*: simulated dollars: a replayed market (provider local), not money" in flat
    assert "~$: an estimate, the job is not finished" in flat


def test_status_job_says_simulated_and_estimate(tmp_path: Path) -> None:
    db = _store(tmp_path)
    flat = " ".join(_cli("status", "j-sim", "--db", db)[1].split())
    assert "cost $2.0336 vs $6.1008 on demand simulated dollars: a replayed market" in flat
    assert "estimate" not in flat
    flat = " ".join(_cli("status", "j-real", "--db", db)[1].split())
    assert "simulated" not in flat and "estimate" not in flat
    flat = " ".join(_cli("status", "j-dead", "--db", db)[1].split())
    assert "simulated dollars" in flat
    assert (
        "an estimate from before its orchestrator stopped: `spotwise cancel j-dead` bills its "
        "lives and replaces it"
    ) in flat
    flat = " ".join(_cli("status", "j-away", "--db", db)[1].split())
    assert "cost $0.6716 vs $2.0148 on demand an estimate: the job is not finished" in flat
    assert "simulated" not in flat


def test_a_life_ended_when_its_trial_stopped_reads_ended_not_stopped(tmp_path: Path) -> None:
    """end_reason "stopped" (its trial was stopped): not a stopped VM that holds its disk."""
    db = _store(tmp_path)
    text = _cli("status", "j-real", "--db", db)[1]
    row = next(line for line in text.splitlines() if "p3.2xlarge" in line)
    assert row.split()[-3:] == ["ended", "(stopped)", "3.5000"]
    assert (
        json.loads(_cli("status", "j-real", "--db", db, "--json")[1])["instances"][0]["end_reason"]
        == "stopped"
    )  # the JSON keeps the record's words


def test_trials_say_their_dollars_are_simulated(tmp_path: Path) -> None:
    db = _store(tmp_path)
    flat = " ".join(_cli("trials", "j-sim", "--db", db)[1].split())
    assert "$: simulated dollars: a replayed market (provider local), not money" in flat
    assert "simulated" not in _cli("trials", "j-real", "--db", db)[1]


def _summary(**more: Any) -> dict[str, Any]:
    return {
        "job_id": "j-1",
        "state": "succeeded",
        "policy": "spot-greedy",
        "best": None,
        "trials": 1,
        "completed": 1,
        "early_stopped": 0,
        "revocations": 0,
        "migrations": 0,
        "wall_seconds": 1.0,
        "cost_usd": 1.0,
        "on_demand_cost_usd": 4.0,
        **more,
    }


@pytest.mark.parametrize("provider", ["local", "aws"])
def test_the_tune_summary_says_simulated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    from spotwise.planner import orchestrator

    spec = tmp_path / "job.yaml"
    (tmp_path / "train.py").touch()  # a local job's script is looked for when the spec loads
    spec.write_text(
        "name: j\ncommand: [python, train.py]\nmetric: {name: acc}\nsteps: 4\ntrials: 1\n"
        "search_space: {lr: {type: real, low: 0.001, high: 0.1}}\n"
        f"providers: [{{name: {provider}}}]\n"
    )
    monkeypatch.setattr(orchestrator, "run_job", lambda *a, **k: _summary())
    out = jobs.tune(spec, db=f"sqlite:///{tmp_path / 's.db'}")
    assert out["simulated"] is (provider == "local")
    console = Console(width=80, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    render.print_summary(out)
    flat = " ".join(console.export_text().split())
    assert "cost $1.0000 vs $4.0000 on demand (75% saved)" in flat
    assert ("simulated dollars: a replayed market" in flat) is (provider == "local")
