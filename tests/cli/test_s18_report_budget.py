"""`spotwise report --by job` says when a job's cost ended above its budget cap (session 18).

`tune`'s summary and `status JOB` said it (``costs.budget_of``); the cron report, the view
of every job's spend, did not. Now a job's row carries ``budget_usd`` (its cap) and
``exceeded_usd`` (its whole cost above the cap: all its lives, not only the window's) in
--json, as `status` names them, and the text shows the job in red with a line saying by how
much. `--check` still exits 0 on it: it means "an instance may still be billed, release it",
and an overrun is money already spent, with nothing left to release.

The store's rows are written directly (no job runs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shared_helpers import record_life
from typer.testing import CliRunner

from spotwise import costs
from spotwise.cli.app import app
from spotwise.store import Store

NOW = 1_790_000_000.0
H = 3600.0


def _spec(cap: float | None, provider: str = "aws") -> str:
    return json.dumps(
        {
            "providers": [{"name": provider}],
            "budget": {"max_cost_usd": cap, "deadline_hours": None},
        }
    )


def _store(tmp_path: Path) -> str:
    """Four finished jobs, each with one life that ended an hour ago: ``j-over`` (cap $1.00,
    its whole cost $1.25: a life of $0.75 two days ago and one of $0.50 in the window),
    ``j-within`` (cap $2, cost $0.40), ``j-nocap`` (no cap), and ``j-sim`` (a replay, cap
    $0.10, simulated cost $0.30)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    jobs = [
        ("j-over", _spec(1.0), 1.25, [(NOW - 48 * H, 0.75), (NOW - H, 0.5)]),
        ("j-within", _spec(2.0), 0.4, [(NOW - H, 0.4)]),
        ("j-nocap", _spec(None), 9.0, [(NOW - H, 9.0)]),
        ("j-sim", _spec(0.1, "local"), 0.3, [(NOW - H, 0.3)]),
    ]
    with Store.open(db) as s:
        n = 0
        for job_id, spec, cost, lives in jobs:
            s.create_job(job_id, spec, "job.yaml", "spot-greedy", "maximize", job_id=job_id)
            s.update_job(job_id, state="succeeded", cost_usd=cost)
            for ended, life_cost in lives:
                n += 1
                record_life(
                    s,
                    job_id,
                    n,
                    f"l-{n}",
                    requested_at=ended - H,
                    launched_at=ended - H,
                    state="terminated",
                    ended_at=ended,
                    cost_usd=life_cost,
                    on_demand_cost_usd=3 * life_cost,
                    market_seconds=H,
                )
    return db


def test_a_jobs_row_carries_its_cap_and_its_overrun(tmp_path: Path) -> None:
    db = _store(tmp_path)
    out = costs.report(since="24h", by="job", db=db, now=NOW)
    rows = {g["key"]: g for g in [*out["groups"], *out["replay"]["groups"]]}
    # the window holds $0.50 of j-over's lives; its overrun is of the whole job's $1.25
    assert rows["j-over"]["cost_usd"] == pytest.approx(0.5)
    assert rows["j-over"]["budget_usd"] == 1.0
    assert rows["j-over"]["exceeded_usd"] == pytest.approx(0.25)
    assert rows["j-within"]["budget_usd"] == 2.0 and "exceeded_usd" not in rows["j-within"]
    assert "budget_usd" not in rows["j-nocap"] and "exceeded_usd" not in rows["j-nocap"]
    assert rows["j-sim"]["budget_usd"] == pytest.approx(0.1)  # simulated dollars, its own cap
    assert rows["j-sim"]["exceeded_usd"] == pytest.approx(0.2)
    # the names `status JOB` gives them
    assert costs.budget_of(_spec(1.0), 1.25) == {"max_cost_usd": 1.0, "exceeded_usd": 0.25}
    # only the per-job view: a provider's group holds several jobs, no one cap
    by_provider = costs.report(since="24h", by="provider", db=db, now=NOW)
    assert all("budget_usd" not in g for g in by_provider["groups"])


def test_the_text_and_json_of_report_by_job_say_it_and_check_does_not_fail(
    tmp_path: Path,
) -> None:
    db = _store(tmp_path)
    runner = CliRunner()
    args = ["report", "--since", "all", "--by", "job", "--check", "--db", db]
    done = runner.invoke(app, [*args, "--json"])
    assert done.exit_code == 0, done.output  # spent money, nothing held: the check passes
    rows = {g["key"]: g for g in json.loads(done.stdout)["groups"]}
    assert (rows["j-over"]["budget_usd"], rows["j-over"]["exceeded_usd"]) == (1.0, 0.25)

    done = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    text = " ".join(done.stdout.split())
    assert "j-over: budget exceeded by $0.2500: the job cost $1.2500 in all (max_cost_usd 1)" in (
        text
    )
    assert "j-sim: budget exceeded by $0.2000: the job cost $0.3000 in all (max_cost_usd 0.1)" in (
        text
    )
    assert "j-within: budget" not in text and "j-nocap: budget" not in text
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
