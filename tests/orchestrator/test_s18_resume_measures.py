"""`spotwise resume` keeps what the earlier run measured of its lives' wind-downs and of its
checkpoint saves (session 18).

Both lived only in the orchestrator's memory (``TrialRun.wind_downs``, ``checkpoint_saves``):
a resumed job planned on the defaults again (a 60 s wind-down, the view's checkpoint time),
so a job whose lives wind down for minutes admitted a trial the earlier run had refused and
ended above its cap. Now each measurement is recorded as it is made (job events
``wind_down`` and ``checkpoint_saved``, with the market seconds and the trial), and the resume
puts the job's newest 5 of each back in its trials' lists, ordered before the resumed run's
own (a replay's clock starts again at ``replay.start``: the earlier times are not this run's).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from test_orchestrator import spec_dict
from test_running_totals import SPOT, run_scripted, usd
from test_s17_budget_wind_down import WindingMarket

from spotwise.planner import orchestrator
from spotwise.planner.orchestrator import RunOptions, resume_job
from spotwise.planner.resume import plan_resume
from spotwise.planner.runstate import (
    Life,
    checkpoint_seconds,
    linger_limit_s,
    note_checkpoint_save,
    note_wind_down,
    wind_down_seconds,
)
from spotwise.providers.base import Market, Offer
from spotwise.spec import parse_spec
from spotwise.store import Store

SAVE_S = {2: 3.0, 4: 7.5, 6: 4.0}  # wall seconds each checkpoint save takes, by its step


class TimedSavesMarket(WindingMarket):
    """A :class:`WindingMarket` whose checkpoint events say how long each save took."""

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        out = super().progress(instance_id)
        for rec in out:
            if rec["type"] == "checkpoint":
                rec["seconds"] = SAVE_S[int(str(rec["step"]))]
        return out


def _events(db: str, job_id: str, kind: str) -> list[tuple[str | None, dict[str, Any]]]:
    with Store.open_existing(db) as s:
        return [(e.trial_id, e.detail) for e in s.events(job_id, kind=kind)]


@pytest.mark.timeout(60)
def test_each_wind_down_and_timed_save_is_recorded_as_a_job_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One trial of 6 steps, a save every 2 (3 s, 7.5 s, 4 s: market seconds at speedup 1),
    its life billed 600 s past its last step."""
    summary, db = run_scripted(tmp_path, monkeypatch, TimedSavesMarket(wind_s=600.0))
    job_id = summary["job_id"]
    with Store.open_existing(db) as s:
        (trial,) = s.list_trials(job_id)
    saves = _events(db, job_id, "checkpoint_saved")
    assert saves == [
        (trial.id, {"step": 2, "seconds": 3.0}),
        (trial.id, {"step": 4, "seconds": 7.5}),
        (trial.id, {"step": 6, "seconds": 4.0}),
    ]
    assert _events(db, job_id, "wind_down") == [(trial.id, {"seconds": 600.0})]


def _job(store: Store, tmp_path: Path) -> tuple[str, str, str]:
    """A cancelled job of 2 trials: one completed, one cut at its checkpoint (queued again)."""
    spec = parse_spec(spec_dict(tmp_path, trials=2, steps=10))
    job = store.create_job("m", spec.model_dump_json(), str(tmp_path / "job.yaml"), "x", "maximize")
    store.update_job(job.id, state="cancelled", ended_at=100.0, cost_usd=0.5)
    done = store.add_trial(job.id, 0, {"lr": 0.01})
    store.update_trial(done.id, state="completed", step=10, final_metric=0.9, metric=0.9)
    cut = store.add_trial(job.id, 1, {"lr": 0.02})
    store.update_trial(cut.id, state="cancelled", step=7, checkpoint_step=6)
    return job.id, done.id, cut.id


def test_resume_puts_the_jobs_newest_measurements_back_before_its_own(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    job_id, done, cut = _job(store, tmp_path)
    t0 = 2_000_000.0  # the earlier run's market clock
    # 7 timed saves in the order recorded: the two slow first ones are no longer the newest 5
    for i, (tid, seconds) in enumerate(
        [(done, 90.0), (done, 80.0), (done, 5.0), (cut, 6.0), (done, 9.0), (cut, 7.0), (cut, 8.0)]
    ):
        store.add_event(job_id, "checkpoint_saved", t0 + i, trial_id=tid, step=2, seconds=seconds)
    store.add_event(job_id, "wind_down", t0 + 50, trial_id=done, seconds=700.0)
    store.add_event(job_id, "wind_down", t0 + 60, trial_id=cut, seconds=30.0)
    # what cannot be a measurement is not one
    store.add_event(job_id, "wind_down", t0 + 61, trial_id=cut, seconds=math.inf)
    store.add_event(job_id, "wind_down", t0 + 62, trial_id=cut, seconds="long")
    store.add_event(job_id, "wind_down", t0 + 63, trial_id=None, seconds=5000.0)
    store.add_event(job_id, "wind_down", t0 + 64, trial_id="t-other", seconds=5000.0)

    plan = plan_resume(store, store.get_job(job_id))
    store.close()

    by_id = {t.trial_id: t for t in plan.trials}
    assert [s for _, s in by_id[done].checkpoint_saves] == [5.0, 9.0]
    assert [s for _, s in by_id[cut].checkpoint_saves] == [6.0, 7.0, 8.0]
    assert checkpoint_seconds(plan.trials) == 9.0  # the slowest of the newest 5
    assert [s for _, s in by_id[done].wind_downs] == [700.0]
    assert [s for _, s in by_id[cut].wind_downs] == [30.0]
    assert wind_down_seconds(plan.trials) == 700.0  # not the 60 s default
    assert linger_limit_s(plan.trials, 60.0, 1.0) == 2100.0  # 3 x the measured 700 s
    # the resumed run's clock starts again (a replay's, at its start: before t0), and what it
    # measures is the newest all the same: 5 fast saves push the earlier ones out
    again = by_id[cut]
    for k in range(5):
        note_checkpoint_save(again, 1.0, 1.0, 1_000_000.0 + k)
    assert checkpoint_seconds(plan.trials) == 1.0
    offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 1.0, 3.0)
    for k in range(5):
        life = Life("l", "i", offer, 1_000_000.0, 0, 0, done_at=1_000_000.0 + 100 * k)
        note_wind_down(again, life, 1_000_000.0 + 100 * k + 20.0)
    assert wind_down_seconds(plan.trials) == 20.0


@pytest.mark.timeout(60)
def test_a_resumed_job_admits_on_the_wind_down_its_earlier_run_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two trials one at a time, each life 120 s start-up + 6 steps of 60 s + 600 s winding
    down (1080 s), at $1/h. The first run's cap (1500 s) holds one life: the second trial is
    projected at 1080 + 120 + 360 + 600 s (the measured wind-down) and stopped by the budget.
    Resumed with a cap of 1800 s, it must be refused again: before, the resumed run projected
    it on the 60 s default (1620 s), ran it, and the job cost 2160 s, above the cap."""
    summary, db = run_scripted(
        tmp_path,
        monkeypatch,
        WindingMarket(wind_s=600.0),
        trials=2,
        budget={"max_cost_usd": usd(1500.0, SPOT)},
    )
    assert summary["cost_usd"] == pytest.approx(usd(1080.0, SPOT), abs=1e-6)
    assert summary["limits"] == {"budget": {"stopped": 1, "never_started": 1}}

    cap = usd(1800.0, SPOT)
    market = WindingMarket(wind_s=600.0)  # its clock starts again, as a replay's does
    monkeypatch.setattr(orchestrator, "open_backend", lambda *a, **kw: market.backend())
    with Store.open_existing(db) as store:
        plan = plan_resume(store, store.get_job(summary["job_id"]), max_cost_usd=cap)
        assert [t.number for t in plan.requeued] == [1]
        again = resume_job(plan, store, RunOptions(poll_s=0.0, run_root=tmp_path / "runs"))
    assert market.launched == []  # the measured wind-down does not fit: not launched
    assert again["cost_usd"] <= cap, again
    assert again["cost_usd"] == pytest.approx(usd(1080.0, SPOT), abs=1e-6)
