"""A life that says nothing from its launch is ended at the job's "no word" limit (helper E, s22).

An agent that never starts (a failing AWS ``setup`` line, spotwise missing from the image, an
import error) reports no exit code, and its VM is not listed ended: the life ran on, billed,
with no cost cap or deadline to stop it, and the start-up floor and the policy's start-up
spare called it "starting" for ever. Now such a life is released at the limit (default 30
min, ``budget.start_timeout_minutes``, never below 3x a measured start-up), billed to it, and
its attempt failed with a reason naming the limit; two such attempts fail the trial, and the
job ends.

The real loop runs on the scripted market of ``test_running_totals`` (60 market s a pass, $1/h,
billed per second): here its trials never write a record. A last test runs a real local job
whose command sleeps without the SDK.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_running_totals import SPOT, ScriptedMarket, run_scripted, usd

from spotwise import jobs
from spotwise.store import Store

NO_WORD_S = 1800.0  # the default limit (spotwise.planner.no_word), on a cloud
GIVE_UP_S = 20_000.0  # market seconds after which a test's market says the job hangs


class SilentMarket(ScriptedMarket):
    """Lives whose trial (or agent) never writes anything: no record, no exit, never listed
    ended until terminated. ``talks``: the lives (by launch number) that run as the scripted
    market's do, with a start-up of ``startup_s``; ``heard``: lives whose agent's status the
    provisioner says it has read (its optional ``agent_heard``)."""

    def __init__(
        self,
        steps: int = 2,
        talks: tuple[int, ...] = (),
        startup_s: float = 120.0,
        heard: tuple[int, ...] = (),
    ) -> None:
        super().__init__(steps)
        self.talks, self.startup_s, self.heard = talks, startup_s, heard
        self.t0 = self.t

    def now(self) -> float:
        if self.t - self.t0 > GIVE_UP_S:  # the old loop never ended such a job
            raise AssertionError(f"the job still runs {GIVE_UP_S:.0f} market s in: it hangs")
        return super().now()

    def _number(self, instance_id: str) -> int:
        return int(instance_id.split("-")[1])

    def _step_at(self, life: dict[str, Any], step: int) -> float:
        return float(life["at"] + self.startup_s + (step - life["start"]) * 60.0)

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        if self._number(instance_id) in self.talks:
            return super().progress(instance_id)
        return []

    def agent_heard(self, instance_id: str) -> bool:
        return self._number(instance_id) in self.heard


def _records(db: str, job_id: str) -> tuple[Any, list[Any], list[Any], list[Any]]:
    with Store.open_existing(db) as s:
        (trial, *_) = s.list_trials(job_id)
        return (
            trial,
            s.list_instances(job_id),
            s.events(job_id, kind="no_word"),
            s.events(job_id, kind="error"),
        )


@pytest.mark.timeout(60)
def test_a_silent_life_is_released_at_the_set_limit_and_two_fail_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    market = SilentMarket()
    summary, db = run_scripted(tmp_path, monkeypatch, market, budget={"start_timeout_minutes": 10})
    assert summary["state"] == "failed", summary
    first, second = market.launched
    # each life is terminated in the pass that finds it 600 s old, and billed to there
    for iid, at in (("i-0", first), ("i-1", second)):
        assert market.lives[iid]["terminated_at"] == at + 600.0
    assert second == first + 600.0  # relaunched at once: one failure is not the trial's end
    assert summary["cost_usd"] == pytest.approx(usd(2 * 600.0, SPOT), abs=1e-9)
    trial, rows, said, errors = _records(db, summary["job_id"])
    assert trial.state.value == "failed"
    assert [(e.detail["limit_s"], e.detail["silent_s"]) for e in said] == [(600.0, 600.0)] * 2
    assert len(errors) == 2 and all(e.detail["exit_code"] is None for e in errors)
    assert (
        errors[0]
        .detail["error"]
        .startswith(
            "its trial reported nothing in 10 min of market time from its start "
            "(budget.start_timeout_minutes): ended as a failed attempt"
        )
    )
    assert all(r.state == "terminated" and r.market_seconds == 600.0 for r in rows)
    assert [r.cost_usd for r in rows] == [pytest.approx(usd(600.0, SPOT))] * 2
    assert "budget.start_timeout_minutes" in (summary["error"] or "")


@pytest.mark.timeout(60)
def test_the_default_limit_ends_a_silent_life_on_a_cloud_after_30_minutes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No limit set, no budget, no deadline: before, the job billed until someone cancelled."""
    from spotwise.planner import orchestrator

    monkeypatch.setattr(orchestrator, "preflight", lambda *a, **kw: None)  # no GCP to check
    market = SilentMarket()
    gcp = [{"name": "gcp", "regions": ["us-east-1"], "options": {"project": "p"}}]
    summary, db = run_scripted(tmp_path, monkeypatch, market, providers=gcp)
    assert summary["state"] == "failed", summary
    first, second = market.launched
    assert market.lives["i-0"]["terminated_at"] == first + NO_WORD_S
    assert market.lives["i-1"]["terminated_at"] == second + NO_WORD_S
    assert summary["cost_usd"] == pytest.approx(usd(2 * NO_WORD_S, SPOT), abs=1e-9)
    _, _, said, errors = _records(db, summary["job_id"])
    assert [e.detail["limit_s"] for e in said] == [NO_WORD_S] * 2
    assert (
        errors[0]
        .detail["error"]
        .startswith(
            "its instance sent no word (no agent status, no trial record) in 30 min from its "
            "launch (budget.start_timeout_minutes): released as a failed attempt; check the "
            "instance's console/serial log"
        )
    )


@pytest.mark.timeout(60)
def test_the_limit_is_never_below_three_measured_start_ups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trial 0 starts up in 900 s (its first report at +960 s) and completes; trial 1 is
    silent: its lives are ended at 3 x 960 s, not at the 30 min default."""
    market = SilentMarket(steps=1, talks=(0,), startup_s=900.0)
    summary, db = run_scripted(tmp_path, monkeypatch, market, trials=2)
    assert summary["completed"] == 1, summary
    _, _, said, _ = _records(db, summary["job_id"])
    assert [e.detail["limit_s"] for e in said] == [3 * 960.0] * 2
    assert [market.lives[i]["terminated_at"] - market.lives[i]["at"] for i in ("i-1", "i-2")] == [
        3 * 960.0
    ] * 2


@pytest.mark.timeout(60)
def test_a_life_whose_agent_was_heard_is_not_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its provisioner read its agent's status: the trial is starting (a long download), not
    broken; it reports after 40 min and completes."""
    market = SilentMarket(steps=1, talks=(0,), startup_s=2400.0, heard=(0,))
    summary, db = run_scripted(tmp_path, monkeypatch, market)
    assert (summary["state"], summary["completed"]) == ("succeeded", 1), summary
    assert _records(db, summary["job_id"])[2] == []


# ---- the local provider, the real loop ------------------------------------------------------
SLEEPS = "import os, sys, time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(600)\n"


@pytest.mark.timeout(120)
def test_a_local_trial_that_never_reports_is_ended_and_the_job_ends(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_trial_errors import _write_trace

    _write_trace(tmp_path / "trace.csv")
    script = tmp_path / "sleeps.py"
    script.write_text(SLEEPS)
    spec = {
        "name": "silent",
        "command": ["python", str(script)],
        "metric": {"name": "score", "direction": "maximize"},
        "steps": 5,
        "trials": 1,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": [
            {"name": "local", "replay": {"trace": str(tmp_path / "trace.csv"), "speedup": 60.0}}
        ],
        "checkpoint": {"every": 1, "location": str(tmp_path / "ckpt")},
        "budget": {"start_timeout_minutes": 1},  # 1 wall second at 60x
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    wall = time.monotonic()
    summary = jobs.tune(path, db=db, run_root=tmp_path / "runs")
    assert time.monotonic() - wall < 60
    assert summary["state"] == "failed", summary
    assert "its trial reported nothing in 1 min of market time (1 wall s" in summary["error"]
    with Store.open_existing(db) as s:
        rows = s.list_instances(summary["job_id"])
        (trial,) = s.list_trials(summary["job_id"])
    assert trial.state.value == "failed" and len(rows) == 2
    for r in rows:  # released at the limit (a pass is about 3 market s at 60x)
        assert r.state == "terminated"
        assert 60.0 <= r.market_seconds < 90.0
    # nothing is left running: each life's process is gone
    logs = tmp_path / "runs" / summary["job_id"] / "logs"
    pids = [int(f.read_text().split()[1]) for f in logs.glob("*.log") if f.read_text()]
    assert pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
