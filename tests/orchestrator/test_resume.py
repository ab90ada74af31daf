"""`spotwise resume` end to end: a job is cancelled mid-run (as Ctrl-C or `spotwise cancel`
would), then resumed: the finished trial keeps its result and cost, the cancelled one goes on
from its checkpoint, the rest of the plan runs, and the job's bill covers both runs.

Real trial processes (steady_trial.py: checkpoints, resumes), a real SQLite store, the local
provider on a replayed market (test_orchestrator's trace: one zone at $1/h, one at $2/h)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import skopt  # noqa: F401  (imported before the market clock starts: see test_orchestrator)
from test_orchestrator import TINY, metric, spec_dict, write_spec, write_trace

from spotwise import jobs
from spotwise.errors import ConfigError
from spotwise.planner import orchestrator
from spotwise.store import Store

STEPS = 12


def _cancel_when(trial_number: int, step: int, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An on_update that asks the orchestrator to cancel (its signal path) once trial
    ``trial_number`` has reported ``step``."""
    handle: dict[str, Any] = {}
    real = orchestrator.on_signals

    def capture(callback: Any) -> Any:
        handle["cancel"] = callback
        return real(callback)

    monkeypatch.setattr(orchestrator, "on_signals", capture)

    def on_update(snap: dict[str, Any]) -> None:
        rows = [r for r in snap["trials"] if r["number"] == trial_number]
        if rows and rows[0]["step"] >= step and "cancel" in handle:
            handle.pop("cancel")()

    return on_update


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cancelled_job_resumes_from_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_trace(tmp_path / "trace.csv", avail_ticks=900)  # no revocation: only the cancel
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = spec_dict(
        tmp_path,
        trials=3,
        steps=STEPS,
        search={"optimizer": "random", "seed": 7},
        env={"STEADY_TRIAL_STEP_S": "0.1"},
    )
    path = write_spec(tmp_path, spec)
    first = jobs.tune(
        path, db=db, run_root=tmp_path / "runs", on_update=_cancel_when(1, 4, monkeypatch)
    )
    assert first["state"] == "cancelled" and first["resumable"], first
    job_id = first["job_id"]
    with Store.open_existing(db) as store:
        before = {t.number: t for t in store.list_trials(job_id)}
        job_before = store.get_job(job_id)
    assert sorted(before) == [0, 1]  # the third trial was never created
    assert before[0].state == "completed" and before[0].final_metric == metric(STEPS)
    assert before[1].state == "cancelled"
    ckpt = before[1].checkpoint_step
    assert 4 <= ckpt < STEPS  # it saved on the stop request

    monkeypatch.undo()  # the resumed run is not cancelled
    out = jobs.resume(job_id[:6], db=db, run_root=tmp_path / "runs")

    assert out["state"] == "succeeded" and not out["resumable"], out
    assert out["job_id"] == job_id
    assert out["resumed"] == {"previous_state": "cancelled", "requeued_trials": [before[1].id]}
    with Store.open_existing(db) as store:
        after = {t.number: t for t in store.list_trials(job_id)}
        job = store.get_job(job_id)
        records = store.list_instances(job_id)
        events = store.events(job_id)
        t1_obs = store.observations(before[1].id)
    assert sorted(after) == [0, 1, 2]
    assert all(t.state == "completed" for t in after.values())
    assert all(t.final_metric == metric(STEPS) for t in after.values())
    # the finished trial was not run again: same cost, one launch, as before
    assert after[0].cost_usd == before[0].cost_usd
    assert sum(1 for r in records if r.trial_id == before[0].id) == 1
    # the cancelled trial went on from its checkpoint, on a new instance, under its own id
    launches = [e for e in events if e.kind == "launch" and e.trial_id == before[1].id]
    assert len(launches) == 2
    assert launches[1].detail["resume_step"] == ckpt
    assert launches[1].detail["attempt"] == 1  # attempt 0's files are the first run's
    second_life = [r.id for r in records if r.trial_id == before[1].id][1]
    resumed_steps = [o.step for o in t1_obs if o.instance_id == second_life]
    assert min(resumed_steps) == ckpt + 1 and max(resumed_steps) == STEPS
    assert after[1].migrations == 0  # a resume is not a migration
    # a new point for the third trial, not the first run's first one again
    assert after[2].params != after[0].params and after[2].params != after[1].params
    # one bill for both runs: the job's cost is its records' sum, and it grew
    assert job.cost_usd == pytest.approx(sum(r.cost_usd for r in records))
    assert job.cost_usd > job_before.cost_usd
    assert job.started_at == job_before.started_at and job.ended_at is not None
    assert job.best_metric == metric(STEPS) and job.best_trial_id == before[0].id
    assert [e.kind for e in events].count("resumed") == 1

    # finished now: a second resume has nothing to run, and says so
    with pytest.raises(ConfigError, match="nothing left to run: its 3 trials ended"):
        jobs.resume(job_id, db=db, run_root=tmp_path / "runs")


@pytest.mark.timeout(120)
def test_a_job_whose_command_was_broken_runs_on_once_it_is_mended(tmp_path: Path) -> None:
    """Every trial crashed (the script was missing): the job stopped as broken. The user
    writes the script and resumes: the two trials the broken command killed run again with
    their own ids and parameters (review-ao F11: their failures said nothing of their points),
    and the job's third trial runs the mended command, although two failures and no reported
    step is the rule that stops a broken job (it judges this run's trials only)."""
    write_trace(tmp_path / "trace.csv")
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit(1)\n")  # broken (a missing one is refused at load)
    spec = spec_dict(tmp_path, command=["python", str(script)], steps=5, trials=3)
    path = write_spec(tmp_path, spec)
    first = jobs.tune(path, db=db, run_root=tmp_path / "runs")
    assert first["state"] == "failed" and "every trial failed (2)" in first["error"], first
    assert first["resumable"]  # its third trial was never made

    script.write_text(TINY.read_text())  # mended
    out = jobs.resume(first["job_id"], db=db, run_root=tmp_path / "runs")

    assert out["state"] == "succeeded", out
    with Store.open_existing(db) as store:
        trials = store.list_trials(first["job_id"])
        records = store.list_instances(first["job_id"])
    again = [trials[0].id, trials[1].id]
    assert out["resumed"] == {"previous_state": "failed", "requeued_trials": again}
    assert [t.state.value for t in trials] == ["completed"] * 3
    assert [t.final_metric for t in trials] == [0.05] * 3  # tiny_trial: step / 100
    assert sum(1 for r in records if r.trial_id in again) == 6  # 2 crashed lives each, then 1
