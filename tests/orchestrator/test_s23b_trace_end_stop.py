"""A replayed market's end stops a job as its deadline does (s23 helper B, review-av F3).

Before, the orchestrator cancelled the job at the trace's end: state ``cancelled``, `tune` and
`resume` exiting 130 (Ctrl-C's code, which `make` and CI read as an interrupt by the user),
and `spotwise resume` ran it again on the same market from the same ``replay.start`` even when
nothing had been kept, to stop at the same end, billing another life each time. Now:

* the trials still running are stopped early for ``trace_end`` as the deadline stops them (the
  instance terminated at the pass that saw the end, billed up to it; checkpoints kept), no
  trial is created after it, and the job ends as a deadline leaves one: succeeded with a
  result, else failed with the reason ("the replayed trace ends at <time>: ...");
* `spotwise resume` runs the stopped trials again from their checkpoints, unless the run kept
  nothing (no trial ended, no checkpoint past where it began): then it is refused in one line,
  exit 2, nothing written;
* the orchestrator reads the market's end from the catalog (:func:`market_end`), not by
  importing the replay's class.

The market is :class:`ScriptedMarket`'s (60 market s a pass; a life starts up in 120 s, then
makes a step every 60 s, checkpointing every 2 steps), with each trial's checkpoint its own and
a catalog that ends at ``end``.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest.mock import MagicMock

import pytest
import yaml
from test_running_totals import SPOT, ScriptedMarket, run_scripted, usd
from test_s22f_replay_market import GAP_S, TICKS, TINY, write_trace
from typer.testing import CliRunner

from spotwise import jobs
from spotwise.cli.app import app
from spotwise.errors import ConfigError
from spotwise.planner import orchestrator
from spotwise.planner.runstate import LIMITS
from spotwise.planner.stops import TRACE_END
from spotwise.providers.base import TAG_TRIAL, Instance, LaunchRequest, market_end
from spotwise.providers.replay import ReplayMarket
from spotwise.store import Store
from spotwise.traces import load_traces

T0 = 1_000_000.0  # the scripted market's clock before the job opens it
L = T0 + 180.0  # a run's first launch: its first pass (the clock read at its start before)
R = T0 + 300.0  # a resumed run's first launch (its claim reads the clock twice more)


class EndingMarket(ScriptedMarket):
    """The scripted market, ending at ``end`` (its catalog's ``end_time``), each trial resuming
    from its own checkpoint (``checkpoints``: trial id → step)."""

    def __init__(self, steps: int, end: float, checkpoints: dict[str, int] | None = None) -> None:
        super().__init__(steps)
        self.end = end
        self.checkpoints: dict[str, int] = dict(checkpoints or {})
        self.trial_of: dict[str, str] = {}

    def launch(self, request: LaunchRequest) -> Instance:
        trial = request.tags[TAG_TRIAL]
        self.checkpoint = self.checkpoints.get(trial, 0)
        inst = super().launch(request)
        self.trial_of[inst.instance_id] = trial
        return inst

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        trial = self.trial_of[instance_id]
        self.checkpoint = self.checkpoints.get(trial, 0)
        out = super().progress(instance_id)
        self.checkpoints[trial] = self.checkpoint
        return out

    def backend(self) -> Any:
        b = super().backend()
        b.catalog = SimpleNamespace(name="replay", end_time=self.end)
        return b


def _records(db: str, job_id: str) -> tuple[Any, list[Any], list[Any], list[Any]]:
    with Store.open_existing(db) as s:
        return (
            s.get_job(job_id),
            s.list_instances(job_id),
            s.events(job_id, kind="trace_end"),
            s.events(job_id, kind="resumed"),
        )


def _resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, market: ScriptedMarket, db: str, job_id: str
) -> dict[str, Any]:
    monkeypatch.setattr(orchestrator, "open_backend", lambda *a, **kw: market.backend())
    return jobs.resume(job_id, db=db, run_root=tmp_path / "runs")


def test_the_trace_end_is_one_of_the_jobs_limits() -> None:
    # what makes resume run its trials again, the summary count them under `limits`, and
    # the budget guard and the early-stop count leave them out, as the deadline's
    assert TRACE_END in LIMITS


@pytest.mark.timeout(60)
def test_a_running_trial_is_stopped_at_the_end_and_the_job_fails_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """One trial of 10 steps, launched at L: steps every 60 s from L + 180 s; the market ends
    at L + 420 s, at step 5 (step 4 checkpointed)."""
    caplog.set_level(logging.WARNING, logger="spotwise.planner")
    market = EndingMarket(steps=10, end=L + 420.0)
    summary, db = run_scripted(tmp_path, monkeypatch, market)
    job, lives, ends, _ = _records(db, summary["job_id"])

    why = "the replayed trace ends at 1970-01-12 13:56 UTC (9 min of market time after this run"
    why += " began)"
    assert summary["state"] == "failed", summary  # as a deadline that left no result: exit 1
    assert summary["error"].startswith(why + ": the market has no data after it")
    assert "providers.0.replay.start earlier or fewer steps" in summary["error"]
    assert job.error == summary["error"]
    # stopped as the deadline stops a trial: a limit of the job, not the policy's early stop
    assert summary["limits"] == {"trace_end": {"stopped": 1, "never_started": 0}}
    assert (summary["early_stopped"], summary["completed"]) == (0, 0)
    (trial,) = jobs.trials(summary["job_id"], db=db)["trials"]
    assert (trial["state"], trial["stop_reason"]) == ("stopped_early", "trace_end")
    # the warning and the event, once; the event says what the run began from
    (end,) = ends
    assert end.detail["message"] == summary["error"]
    assert end.detail["end"] == L + 420.0 and end.time == L + 420.0
    assert end.detail["from_steps"] == {trial["trial"]: 0} and end.detail["ended"] == 0
    assert sum(why in r.getMessage() for r in caplog.records) == 1
    # its instance terminated at the pass that saw the end, billed up to it, not run on
    (life,) = lives
    assert (life.market_seconds, life.end_reason) == (420.0, "stopped")
    assert summary["cost_usd"] == pytest.approx(usd(420.0, SPOT), abs=1e-9)
    assert market.launched == [L]  # nothing launched after the end
    assert market.lives["i-0"]["terminated_at"] == L + 420.0
    assert market.checkpoints == {trial["trial"]: 4}  # kept: a resume starts from it
    assert summary["resumable"] is True


@pytest.mark.timeout(60)
def test_with_a_result_the_job_succeeds_and_creates_no_trial_after_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three trials of 4 steps one at a time: the first completes (its life exits at its last
    step, L + 360 s), the second is launched in the next pass and is starting up when the
    market ends a pass later; the third is never created."""
    market = EndingMarket(steps=4, end=L + 480.0)
    summary, db = run_scripted(tmp_path, monkeypatch, market, trials=3)
    job, lives, ends, _ = _records(db, summary["job_id"])

    assert summary["state"] == "succeeded", summary  # exit 0, as a deadline with a result
    assert job.error is None and summary.get("error") is None
    assert (summary["trials"], summary["completed"], summary["best"]["number"]) == (2, 1, 0)
    assert summary["limits"] == {"trace_end": {"stopped": 1, "never_started": 0}}
    assert market.launched == [L, L + 420.0]
    assert [(r.market_seconds, r.end_reason) for r in lives] == [
        (360.0, "completed"),
        (60.0, "stopped"),
    ]
    (end,) = ends
    assert end.detail["ended"] == 1  # the first trial had completed: a resume is accepted
    assert summary["resumable"] is True
    rows = jobs.trials(summary["job_id"], db=db)["trials"]
    ends_of = [(t["state"], t["stop_reason"]) for t in rows]
    assert ends_of == [("completed", None), ("stopped_early", "trace_end")]


@pytest.mark.timeout(60)
def test_resume_runs_the_trials_the_end_stopped_from_their_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run ends at L + 420 s with the trial's checkpoint at step 4 (see the first
    test); the resume replays the market from its start again (a fresh clock) and the trial
    completes from step 4: 6 steps, not 10."""
    first = EndingMarket(steps=10, end=L + 420.0)
    summary, db = run_scripted(tmp_path, monkeypatch, first)
    again = EndingMarket(steps=10, end=T0 + 1800.0, checkpoints=first.checkpoints)
    out = _resume(tmp_path, monkeypatch, again, db, summary["job_id"])

    assert out["state"] == "succeeded", out
    assert out["resumed"]["previous_state"] == "failed"
    assert out["completed"] == 1 and out["limits"] == {}
    (life,) = again.lives.values()
    assert life["start"] == 4  # its checkpoint, not step 0
    assert again.launched == [R]
    _, lives, ends, resumes = _records(db, summary["job_id"])
    # the start-up and 6 steps, not 10
    assert [(r.market_seconds, r.end_reason) for r in lives] == [
        (420.0, "stopped"),
        (120.0 + 6 * 60.0, "completed"),
    ]
    assert len(ends) == 1 and len(resumes) == 1


@pytest.mark.timeout(60)
def test_resume_of_a_run_that_kept_nothing_before_the_end_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The market ends a pass after the trial's launch, while it is still starting up: nothing
    is kept, so a resume would replay the same market and stop at the same end, billing
    another life."""
    market = EndingMarket(steps=10, end=L + 60.0)
    summary, db = run_scripted(tmp_path, monkeypatch, market)
    assert summary["state"] == "failed", summary
    assert summary["error"].startswith("the replayed trace ends at ")
    assert summary["resumable"] is False  # the summary does not offer `spotwise resume`
    before = _records(db, summary["job_id"])

    again = EndingMarket(steps=10, end=L + 60.0)
    with pytest.raises(ConfigError) as refused:
        _resume(tmp_path, monkeypatch, again, db, summary["job_id"])
    said = str(refused.value)
    assert said == (
        f"job {summary['job_id']} stopped at the end of its replayed trace (1970-01-12 13:50 UTC) "
        "with no trial ended and no checkpoint past where that run started it: a resume replays "
        "the same market from providers.0.replay.start and would stop there again; run "
        "`spotwise tune` with providers.0.replay.start earlier or fewer steps"
    )
    assert "\n" not in said and refused.value.exit_code == 2
    # nothing written, nothing launched
    after = _records(db, summary["job_id"])
    assert (after[0].state, after[0].ended_at, after[0].error) == (
        before[0].state,
        before[0].ended_at,
        before[0].error,
    )
    assert len(after[1]) == len(before[1]) == 1 and after[3] == []
    assert again.launched == []


def test_the_market_end_is_read_from_the_catalog_not_the_replays_class(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "timestamp,availability_zone,instance_type,spot_available\n"
        "2023-01-01 00:00:00,us-east-1a,p3.2xlarge,1\n"
        "2023-01-01 00:01:00,us-east-1a,p3.2xlarge,1\n"
    )
    market = ReplayMarket(load_traces(trace))
    assert market_end(market) == market.end_time == 1672531200.0 + 120.0
    # a live cloud's catalog has no end; nor does one that answers anything (a mock)
    assert market_end(SimpleNamespace(name="aws")) is None
    assert market_end(MagicMock()) is None
    assert market_end(SimpleNamespace(end_time=True)) is None
    assert "ReplayMarket" not in inspect.getsource(orchestrator)
    assert "providers.replay" not in inspect.getsource(orchestrator)


@pytest.mark.timeout(120)
def test_tune_exits_1_not_130_and_says_the_trace_end(tmp_path: Path) -> None:
    """The real replay (test_s22f's 3 h trace) from 400 market s before its end at 200x: the
    trial (20 steps of 0.5 wall s, no checkpoint) is running when the market ends."""
    write_trace(tmp_path / "trace.csv")
    spec = {
        "name": "s23b",
        "command": ["python", str(TINY)],
        "metric": {"name": "score", "direction": "maximize"},
        "steps": 20,
        "trials": 1,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
        "checkpoint": {"every": 5, "location": str(tmp_path / "ckpt")},
        "env": {"TINY_TRIAL_STEP_S": "0.5"},
        "policy": "spot-greedy",
        "providers": [
            {
                "name": "local",
                "zones": ["us-east-1a"],
                "markets": ["on-demand"],
                "replay": {
                    "trace": str(tmp_path / "trace.csv"),
                    "start": (TICKS * GAP_S - 400.0) / 3600.0,
                    "speedup": 200.0,
                    "forecast": "none",
                },
            }
        ],
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    done = CliRunner().invoke(app, ["tune", str(tmp_path / "job.yaml"), "--db", db])
    assert done.exit_code == 1, done.output  # failed, as a deadline with no result; not 130
    out = " ".join(done.output.split())  # the console wraps long lines
    assert "failed" in out and "the replayed trace ends at 2023-01-01 03:00 UTC (" in out
    assert "trace end: 1 trial(s) stopped" in out
    assert "continue it: spotwise resume" not in out  # nothing kept: a resume is refused
    with Store.open_existing(db) as s:
        (job,) = s.list_jobs()
        (life,) = s.list_instances(job.id)
    assert life.market == "on-demand" and life.end_reason == "stopped"
    # it ran until the end (started up, reported steps), ended at the pass that saw it
    assert 100.0 < life.market_seconds < 400.0 + 600.0, life.market_seconds


@pytest.mark.timeout(60)
def test_an_end_before_any_trial_is_made_fails_the_job_for_it_and_refuses_a_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The market ends before the run's first pass: no trial is made ("no trial ran" was the
    error when the first pass came after the end), and a resume would meet the same end."""
    market = EndingMarket(steps=10, end=L - 60.0)
    summary, db = run_scripted(tmp_path, monkeypatch, market)
    assert (summary["state"], summary["trials"], market.launched) == ("failed", 0, [])
    assert summary["error"].startswith("the replayed trace ends at 1970-01-12 13:48 UTC (60 s of ")
    assert summary["resumable"] is False
    with pytest.raises(ConfigError, match="stopped at the end of its replayed trace"):
        _resume(tmp_path, monkeypatch, EndingMarket(steps=10, end=L - 60.0), db, summary["job_id"])
