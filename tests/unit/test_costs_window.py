"""`spotwise report` windows are half-open, ``(now - since, now]``: a life that ended exactly on
a boundary is counted in one window, never in two (over a real SQLite store)."""

from __future__ import annotations

import json
from pathlib import Path

from spotwise import costs
from spotwise.store import Store

H = 3600.0
DAY = 24 * H
T = 1_790_000_000.0  # the life ends exactly here


def _store(tmp_path: Path) -> str:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    spec = json.dumps({"providers": [{"name": "aws", "region": "us-east-1"}]})
    with Store.open(db) as s:
        job = s.create_job("j", spec, "job.yaml", "spot-greedy", "maximize", job_id="j-edge")
        s.update_job(job.id, state="succeeded")
        t = s.add_trial(job.id, 0, {"lr": 0.1})
        s.record_launch(
            id="l-edge", job_id=job.id, trial_id=t.id, provider="aws", region="us-east-1",
            zone="us-east-1a", instance_type="p3.2xlarge", market="spot",
            offer_key="aws:us-east-1a:p3.2xlarge:spot", price_per_hour=0.95,
            requested_at=T - 2 * H,
        )  # fmt: skip
        s.update_instance(
            "l-edge", state="terminated", ended_at=T, launched_at=T - 2 * H, cost_usd=1.5,
            on_demand_cost_usd=4.0, market_seconds=2 * H, provider_instance_id="i-edge",
        )  # fmt: skip
    return db


def _lives(db: str, now: float) -> int:
    # `--until now`: the window ends at `now` itself (the default ends SETTLE_S before it,
    # tests/unit/test_s22i_report_settle.py), so this tests the boundary at `now`
    return int(costs.report(since="24h", until="now", db=db, now=now)["totals"]["lives"])


def test_a_life_ending_on_a_window_boundary_is_counted_in_one_window(tmp_path: Path) -> None:
    db = _store(tmp_path)
    assert _lives(db, T) == 1  # the window (T - 24h, T] holds its end
    assert _lives(db, T + DAY) == 0  # (T, T + 24h] does not: not counted twice
    assert _lives(db, T - 1.0) == 0  # not ended yet in (T - 1 - 24h, T - 1]
    assert _lives(db, T + DAY - 1.0) == 1  # (T - 1, T + 24h - 1] holds it
    every = costs.report(since="all", until="now", db=db, now=T)["totals"]
    assert (every["lives"], every["cost_usd"]) == (1, 1.5)


def test_store_lists_lives_ended_strictly_after_the_start(tmp_path: Path) -> None:
    db = _store(tmp_path)
    with Store.open(db) as s:
        assert [r.id for r in s.list_instances(None, ended_since=T - 1.0)] == ["l-edge"]
        assert s.list_instances(None, ended_since=T) == []
