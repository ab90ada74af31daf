"""review-ao F11: a job whose command was broken (every trial crashed before reporting a step:
the rule "two failures, no step reported" stopped it) is resumed once the script is mended.
The trials the broken command killed are queued again with their own id and parameters (the
seeded first points, often the best) and are not told to the search as failures; a trial that
reported steps before it failed, or one a cloud failed, keeps its end as before.

The first test runs real trial processes on the local provider's replay (test_orchestrator's
trace); the others read a store written by hand (nothing runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import skopt  # noqa: F401  (imported before the market clock starts: see test_orchestrator)
from shared_helpers import record_launch
from test_orchestrator import TINY, spec_dict, write_spec, write_trace

from spotwise import jobs
from spotwise.planner.policy import Phase
from spotwise.planner.resume import plan_resume
from spotwise.planner.search import Search
from spotwise.spec import parse_spec
from spotwise.store import Store


@pytest.mark.timeout(120)
def test_the_trials_a_broken_command_killed_run_again_once_it_is_mended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_trace(tmp_path / "trace.csv")
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    script = tmp_path / "train.py"
    script.write_text("import nonexistent_mod_s21i  # noqa\n")  # fails at import
    spec = spec_dict(tmp_path, command=["python", str(script)], steps=5, trials=3)
    first = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    assert first["state"] == "failed" and "every trial failed (2)" in first["error"], first
    job_id = first["job_id"]
    with Store.open_existing(db) as store:
        before = store.list_trials(job_id)
    assert [t.state.value for t in before] == ["failed", "failed"]

    told: list[Any] = []
    real = Search.replay

    def spy(self: Search, ended: Any, pending: Any, stopped: Any = ()) -> None:
        told.append((list(ended), list(pending)))
        real(self, ended, pending, stopped)

    monkeypatch.setattr(Search, "replay", spy)
    script.write_text(TINY.read_text())  # mended
    out = jobs.resume(job_id, db=db, run_root=tmp_path / "runs")

    assert out["state"] == "succeeded", out
    assert out["resumed"] == {
        "previous_state": "failed",
        "requeued_trials": [before[0].id, before[1].id],
    }
    # the search hears no failure: the two points are pending (being run again)
    assert told == [([], [before[0].params, before[1].params])]
    with Store.open_existing(db) as store:
        after = store.list_trials(job_id)
        records = store.list_instances(job_id)
    assert len(after) == 3  # the spec's trials: nothing launched beyond them
    assert [t.state.value for t in after] == ["completed"] * 3
    assert [(t.id, t.params) for t in after[:2]] == [(t.id, t.params) for t in before]
    assert [t.final_metric for t in after] == [0.05] * 3  # tiny_trial: step / 100
    # two crashed lives each in the first run, one that completed in the resumed run
    per_trial = [sum(1 for r in records if r.trial_id == t.id) for t in after]
    assert per_trial == [3, 3, 1]


@pytest.mark.timeout(120)
def test_a_broken_run_whose_every_planned_trial_was_made_still_says_to_resume(
    tmp_path: Path,
) -> None:
    """With trials 2 the broken run made every planned trial: its summary said resumable false
    (no "continue it" line) though `resume` runs both again once the command is mended."""
    write_trace(tmp_path / "trace.csv")
    script = tmp_path / "train.py"
    script.write_text("import nonexistent_mod_s21i  # noqa\n")
    spec = spec_dict(tmp_path, command=["python", str(script)], steps=5, trials=2)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    out = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    assert out["state"] == "failed" and "every trial failed (2)" in out["error"], out
    assert out["resumable"] is True


# --- the store as the orchestrator writes it, by hand ---------------------------------------


def _store(tmp_path: Path) -> tuple[Store, str]:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    accepted = parse_spec(spec_dict(tmp_path, trials=4, steps=10))
    job = store.create_job(
        "e2e", accepted.model_dump_json(), str(tmp_path / "job.yaml"), "spot-greedy", "maximize"
    )
    store.update_job(job.id, state="failed", cost_usd=1.0, on_demand_cost_usd=4.0)
    return store, job.id


def _trial(store: Store, job_id: str, number: int, **fields: Any) -> str:
    t = store.add_trial(job_id, number, {"lr": 0.001 * (number + 1)})
    store.update_trial(t.id, **{"state": "failed", **fields})
    return t.id


def _life(
    store: Store,
    job_id: str,
    tid: str,
    code: int | None = 1,
    steps: tuple[int, ...] = (),
    failed: bool = True,
) -> None:
    """One life of the trial as the orchestrator records it: its launch (record and event),
    its reports, and, ``failed``, its end (an error event with its exit code)."""
    rec = record_launch(
        store, job_id, tid, price_per_hour=1.0, provider="local", requested_at=1.0,
        state="terminated", launched_at=2.0,
    )  # fmt: skip
    store.add_event(job_id, "launch", 2.0, trial_id=tid, instance_id=rec.id, resume_step=0)
    for step in steps:
        store.add_observation(tid, step, step / 10, wall_time=3.0, instance_id=rec.id)
    if failed:
        store.add_event(job_id, "error", 4.0, trial_id=tid, instance_id=rec.id, exit_code=code)


def test_only_failures_of_a_run_judged_broken_before_any_step_are_queued_again(
    tmp_path: Path,
) -> None:
    store, job_id = _store(tmp_path)
    a, b, cloud = (_trial(store, job_id, n) for n in range(3))
    for tid in (a, a, b, b):
        _life(store, job_id, tid)
    _life(store, job_id, cloud, code=None)  # its instance vanished: the cloud's failure
    _life(store, job_id, cloud, code=None)

    plan = plan_resume(store, store.get_job(job_id))

    assert [t.trial_id for t in plan.requeued] == [a, b]
    again = plan.requeued[0]
    assert (again.phase, again.state, again.step, again.params) == (
        Phase.QUEUED, "pending", 0, {"lr": 0.001},
    )  # fmt: skip
    assert again.attempt == 1 and again.retrying and not again.crashed and not again.carried
    assert plan.ended == []  # neither told as a failure; the cloud's says nothing either
    assert {t.trial_id: t.state for t in plan.trials}[cloud] == "failed"
    plan.claim(store, 1, "host", 10.0)
    states = {t.id: t.state.value for t in store.list_trials(job_id)}
    assert states == {a: "pending", b: "pending", cloud: "failed"}


def test_a_failure_in_a_run_where_a_trial_reported_steps_keeps_its_end(tmp_path: Path) -> None:
    """The command worked (another trial reported steps): a trial that crashed before its
    first step may have crashed on its parameters (out of memory): told as a failure."""
    store, job_id = _store(tmp_path)
    a, b = (_trial(store, job_id, n) for n in range(2))
    worked = _trial(store, job_id, 2, state="completed", step=10, final_metric=0.9)
    for tid in (a, a, b, b):
        _life(store, job_id, tid)
    _life(store, job_id, worked, code=0, steps=(5, 10))

    plan = plan_resume(store, store.get_job(job_id))

    assert plan.requeued == []
    assert plan.ended == [({"lr": 0.001}, None), ({"lr": 0.002}, None), ({"lr": 0.003}, 0.9)]


def test_one_failure_or_a_trial_that_made_progress_keeps_its_end(tmp_path: Path) -> None:
    """One failure is not the broken-command rule; a trial that reported steps (or checkpointed
    past where it started) then crashed ran the command: both stay failed and told."""
    store, job_id = _store(tmp_path)
    lone = _trial(store, job_id, 0)
    _life(store, job_id, lone)
    _life(store, job_id, lone)
    plan = plan_resume(store, store.get_job(job_id))
    assert plan.requeued == [] and plan.ended == [({"lr": 0.001}, None)]

    (tmp_path / "2").mkdir()
    store, job_id = _store(tmp_path / "2")
    a = _trial(store, job_id, 0, step=0)
    b = _trial(store, job_id, 1, step=3, checkpoint_step=2)  # NaN reports: no observation
    for tid in (a, a, b, b):
        _life(store, job_id, tid)
    plan = plan_resume(store, store.get_job(job_id))
    assert [t.trial_id for t in plan.requeued] == [a]
    assert plan.ended == [({"lr": 0.002}, None)]


def test_a_broken_first_run_is_read_by_a_later_resume_as_of_its_own_run(tmp_path: Path) -> None:
    """Run 1 was broken (both trials crashed at import); run 2, resumed before this fix, ran a
    new trial that reported steps and was cancelled. Run 2's steps do not make run 1's
    failures the parameters': a resume now runs them again (and the cancelled one)."""
    store, job_id = _store(tmp_path)
    a, b = (_trial(store, job_id, n) for n in range(2))
    for tid in (a, a, b, b):
        _life(store, job_id, tid)
    store.add_event(job_id, "resumed", 5.0, requeued=[], previous_state="failed")
    c = _trial(store, job_id, 2, state="cancelled", step=4, checkpoint_step=4)
    _life(store, job_id, c, steps=(2, 4), failed=False)

    plan = plan_resume(store, store.get_job(job_id))

    assert [t.trial_id for t in plan.requeued] == [a, b, c]
    assert plan.ended == []
