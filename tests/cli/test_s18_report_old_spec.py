"""`spotwise report` reads a replay job recorded by an older spotwise (review-af F9).

Before 2026-11-23 every local job's stored spec carried ``replay.seed`` (a field nothing read,
since dropped: a new spec naming it is refused). `report` validated the stored replay block as
a new spec, so any window holding such a job's life failed with "internal error" and exit 1 --
`--check`'s "something is held" code -- with nothing on stdout, the real clouds' money
included. A stored spec is read back as it was recorded (``spec.STORED``), as `status` does.
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


def _old_replay_job(tmp_path: Path) -> str:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    spec = json.dumps(
        {
            "providers": [
                {"name": "local", "replay": {"speedup": 300.0, "billing": "aws", "seed": 7}}
            ],
        }
    )
    with Store.open(db) as s:
        s.create_job("j-old", spec, "job.yaml", "spot-greedy", "maximize", job_id="j-old")
        s.update_job("j-old", state="succeeded", cost_usd=0.5)
        record_life(
            s,
            "j-old",
            1,
            "l-1",
            requested_at=NOW - 2 * H,
            launched_at=NOW - 2 * H,
            state="terminated",
            ended_at=NOW - H,
            cost_usd=0.5,
            on_demand_cost_usd=1.5,
            market_seconds=H,
        )
    return db


def test_report_reads_a_replay_job_recorded_with_the_old_seed_field(tmp_path: Path) -> None:
    db = _old_replay_job(tmp_path)
    out = costs.report(since="all", by="job", db=db, now=NOW)
    (row,) = out["replay"]["groups"]
    assert row["key"] == "j-old" and row["cost_usd"] == pytest.approx(0.5)
    assert out["totals"]["lives"] == 0  # simulated dollars stay apart from real ones

    res = CliRunner().invoke(
        app, ["report", "--since", "all", "--by", "job", "--check", "--json", "--db", db]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["replay"]["totals"]["cost_usd"] == pytest.approx(0.5)
