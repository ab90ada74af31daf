"""What `spotwise resume` reads back from the store before anything runs: which jobs it
refuses (and that a refusal writes nothing), how each trial of the earlier run is carried over,
and what the search is told. No trial process runs here (see test_resume.py for the real loop).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import record_launch
from test_orchestrator import spec_dict

from spotwise import jobs
from spotwise.errors import ConfigError, SpecError
from spotwise.planner.policy import Phase
from spotwise.planner.resume import plan_resume
from spotwise.planner.search import Search
from spotwise.spec import SEEDS, parse_spec
from spotwise.store import JobState, Store


def _store(tmp_path: Path) -> Store:
    return Store.open(f"sqlite:///{tmp_path / 'state.db'}")


def _job(store: Store, tmp_path: Path, state: str = "cancelled", **spec: Any) -> str:
    accepted = parse_spec(spec_dict(tmp_path, trials=4, steps=10, **spec))
    job = store.create_job(
        "e2e", accepted.model_dump_json(), str(tmp_path / "job.yaml"), "spot-greedy", "maximize"
    )
    store.update_job(
        job.id, state=state, ended_at=50.0, cost_usd=1.5, on_demand_cost_usd=4.0, revocations=2
    )
    return job.id


def _trial(store: Store, job_id: str, number: int, state: str, **fields: Any) -> str:
    t = store.add_trial(job_id, number, {"lr": 0.001 * (number + 1)})
    store.update_trial(t.id, state=state, **fields)
    return t.id


def _launch(store: Store, job_id: str, trial_id: str, launched: bool = True) -> None:
    record_launch(
        store,
        job_id,
        trial_id,
        price_per_hour=1.0,
        provider="local",
        requested_at=1.0,
        state="terminated" if launched else "failed",
        launched_at=2.0 if launched else None,
    )


def test_each_trial_is_carried_over_as_it_ended_or_queued_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    job_id = _job(store, tmp_path)
    done = _trial(store, job_id, 0, "completed", step=10, final_metric=0.9, metric=0.9)
    early = _trial(store, job_id, 1, "stopped_early", step=4, metric=0.3, predicted_final=0.5)
    crashed = _trial(store, job_id, 2, "failed", step=0)
    cut = _trial(store, job_id, 3, "cancelled", step=8, checkpoint_step=6, cost_usd=0.25)
    refused = store.add_trial(job_id, 4, {"lr": 0.09}).id  # the spec asks 4: one too many
    store.update_trial(refused, state="failed")
    for tid in (done, early, crashed, cut, cut):
        _launch(store, job_id, tid)
    _launch(store, job_id, refused, launched=False)  # the cloud refused it: it never ran
    for step in range(1, 9):
        store.add_observation(cut, step, step / 10, wall_time=float(step))
    store.add_event(job_id, "error", 1.0, trial_id=crashed, exit_code=1, log="x")
    store.add_observation(done, 10, 0.9, wall_time=1.0)

    plan = plan_resume(store, store.get_job(job_id))

    by_id = {t.trial_id: t for t in plan.trials}
    assert [t.trial_id for t in plan.requeued] == [cut]
    t = by_id[cut]
    assert (t.phase, t.state, t.step, t.checkpoint_step) == (Phase.QUEUED, "pending", 6, 6)
    assert sorted(t.curve) == [1, 2, 3, 4, 5, 6]  # steps after its checkpoint are lost
    assert sorted(t.reported) == list(range(1, 9))  # what the earlier run judged it on
    assert t.attempt == 1 and t.lives_started == 2 and t.retrying  # next attempt: 2
    assert t.cost_usd == 0.25 and t.furthest == 0 and not t.carried and t.start_step == 6
    assert by_id[done].start_step == 10 and by_id[done].carried  # the earlier run's steps
    assert by_id[done].phase is Phase.DONE and by_id[done].final_metric == 0.9
    assert by_id[refused].lives_started == 0 and by_id[refused].attempt == 0
    # the search hears what the orchestrator told it: a final, a failure, a stopped trial's
    # prediction (apart: no final); nothing for a trial the cloud never ran
    assert plan.ended == [({"lr": 0.001}, 0.9), ({"lr": 0.003}, None)]
    assert plan.stopped == [({"lr": 0.002}, 0.5)]
    assert plan.totals["cost_usd"] == 1.5 and plan.totals["revocations"] == 2
    assert plan.search_spec.seed == 5  # seed 0, apart by the 5 trials already proposed
    assert store.get_job(job_id).state is JobState.CANCELLED  # planning writes nothing


def test_a_trial_a_limit_stopped_runs_again_one_the_policy_stopped_does_not(
    tmp_path: Path,
) -> None:
    """The budget or deadline stopped a trial: it was not judged a loser, so a resume (e.g.
    with a larger budget) runs it on from its checkpoint. One the policy stopped keeps its
    end; one stopped for a NaN/inf metric is told to the search as a failure."""
    store = _store(tmp_path)
    job_id = _job(store, tmp_path, state="failed")
    store.update_job(job_id, early_stopped=3)
    budget = _trial(store, job_id, 0, "stopped_early", step=5, checkpoint_step=4, metric=0.5)
    policy = _trial(store, job_id, 1, "stopped_early", step=3, metric=0.2, predicted_final=0.3)
    nan = _trial(store, job_id, 2, "stopped_early", step=2, metric=0.4)
    for tid, why in ((budget, "budget"), (policy, "asha"), (nan, "invalid metric")):
        store.add_event(job_id, "stop_early", 1.0, trial_id=tid, reason=why)
    # a limit reaching a trial already stopping keeps the first reason
    store.add_event(job_id, "stop_early", 2.0, trial_id=policy, reason="budget")

    plan = plan_resume(store, store.get_job(job_id))

    assert [t.trial_id for t in plan.requeued] == [budget]
    again = plan.requeued[0]
    assert (again.step, again.stop_reason, again.phase) == (4, None, Phase.QUEUED)
    by_id = {t.trial_id: t for t in plan.trials}
    assert by_id[policy].stop_reason == "asha" and by_id[policy].phase is Phase.DONE
    assert plan.ended == [({"lr": 0.003}, None)] and plan.stopped == [({"lr": 0.002}, 0.3)]
    assert plan.totals["early_stopped"] == 2  # the budget's stop is undone
    plan.claim(store, 1, "a", 10.0)
    assert store.get_job(job_id).early_stopped == 2  # in the claim: never counted twice


def test_the_resumed_count_of_early_stops_is_the_policys_whatever_the_job_counted(
    tmp_path: Path,
) -> None:
    """Since review-ac F1 a limit's stop is not counted as early-stopped; a job recorded before
    counted it. The resume counts the policy's stops that stand from the trials: 2 either way
    (it subtracted the requeued trials from the job's count: 1 for a job counted the new way)."""
    for counted in (2, 3):
        (tmp_path / str(counted)).mkdir()
        store = _store(tmp_path / str(counted))
        job_id = _job(store, tmp_path, state="failed")
        store.update_job(job_id, early_stopped=counted)
        for n, why in enumerate(("budget", "asha", "invalid metric")):
            tid = _trial(store, job_id, n, "stopped_early", step=3, metric=0.2)
            store.add_event(job_id, "stop_early", 1.0, trial_id=tid, reason=why)
        plan = plan_resume(store, store.get_job(job_id))
        assert plan.totals["early_stopped"] == 2, counted
        store.close()


def test_refusals_name_the_fix_and_write_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path)

    running = _job(store, tmp_path, state="running")  # its orchestrator died (no pid)
    with pytest.raises(ConfigError, match=rf"run `spotwise cancel {running}` first"):
        jobs.resume(running, db=store.url)

    held = _job(store, tmp_path)
    tid = _trial(store, held, 0, "cancelled")
    record_launch(
        store, held, tid, price_per_hour=1.0, requested_at=1.0, state="running",
        provider_instance_id="i-0held",
    )  # fmt: skip
    with pytest.raises(ConfigError, match=rf"holds 1 instance.*i-0held.*spotwise cancel {held}"):
        plan_resume(store, store.get_job(held))

    full = _job(store, tmp_path)
    for n in range(4):
        _trial(store, full, n, "completed" if n else "failed", step=10)
    with pytest.raises(ConfigError, match="nothing left to run: its 4 trials ended"):
        plan_resume(store, store.get_job(full))

    broke = _job(store, tmp_path, state="failed", budget={"max_cost_usd": 1.0})
    with pytest.raises(ConfigError, match=r"spent \$1.50 of its budget.*larger --max-cost"):
        plan_resume(store, store.get_job(broke))
    with pytest.raises(SpecError, match=r"--max-cost must be a number of dollars > 0, got 0\.0"):
        plan_resume(store, store.get_job(broke), max_cost_usd=0.0)
    with pytest.raises(SpecError, match="--deadline-hours must be a number of hours > 0"):
        plan_resume(store, store.get_job(broke), max_cost_usd=5.0, deadline_hours=float("nan"))

    gone = _job(store, tmp_path, workdir=str(tmp_path / "moved"))
    with pytest.raises(ConfigError, match="which no longer exists"):
        plan_resume(store, store.get_job(gone))

    states = {j.id: j.state.value for j in store.list_jobs()}
    assert states == {
        running: "running", held: "cancelled", full: "cancelled", broke: "failed",
        gone: "cancelled",
    }  # fmt: skip


def test_a_larger_budget_is_stored_with_the_job_when_it_is_claimed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    budget = {"max_cost_usd": 1.0, "deadline_hours": 24.0}
    job_id = _job(store, tmp_path, state="failed", budget=budget)
    assert plan_resume(store, store.get_job(job_id), max_cost_usd=3.0).spec.budget.model_dump() == {
        "max_cost_usd": 3.0, "deadline_hours": 24.0,
    }  # fmt: skip
    plan = plan_resume(store, store.get_job(job_id), max_cost_usd=3.0, deadline_hours=2.5)
    assert plan.spec.budget.max_cost_usd == 3.0 and plan.spec.budget.deadline_hours == 2.5
    plan.claim(store, 123, "here", 10.0)
    job = store.get_job(job_id)
    assert json.loads(job.spec_json)["budget"] == {"max_cost_usd": 3.0, "deadline_hours": 2.5}
    assert (job.state, job.pid, job.host, job.ended_at) == (JobState.PENDING, 123, "here", None)
    (mark,) = store.events(job_id, kind="resumed")  # written with the claim, in its transaction
    assert (mark.time, mark.detail["previous_state"], mark.detail["spent_usd"]) == (
        10.0, "failed", 1.5,
    )  # fmt: skip


def test_a_job_a_cancel_billed_since_it_was_read_is_not_claimed(tmp_path: Path) -> None:
    """`spotwise cancel` of the finished job billed an instance that outlived its record while
    the resume was starting: the plan's spend is stale, and the claim must not take it."""
    store = _store(tmp_path)
    job_id = _job(store, tmp_path)
    cut = _trial(store, job_id, 0, "cancelled", step=3)
    plan = plan_resume(store, store.get_job(job_id))
    store.update_job(job_id, cost_usd=4.0)  # what sweep_finished's _sum_job writes
    with pytest.raises(ConfigError, match="changed since it was read"):
        plan.claim(store, 1, "a", 10.0)
    assert store.get_trial(cut).state.value == "cancelled"
    assert store.events(job_id, kind="resumed") == []


def test_of_two_resumes_of_one_job_the_second_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    job_id = _job(store, tmp_path)
    cut = _trial(store, job_id, 0, "cancelled", step=3)
    first = plan_resume(store, store.get_job(job_id))
    second = plan_resume(store, store.get_job(job_id))
    first.claim(store, 1, "a", 10.0)
    assert store.get_trial(cut).state.value == "pending"
    with pytest.raises(ConfigError, match="changed since it was read"):
        second.claim(store, 2, "b", 10.0)
    assert store.get_job(job_id).pid == 1


def test_a_plan_read_before_another_resume_ran_and_ended_is_refused(tmp_path: Path) -> None:
    """Resume A claims and runs; it is cancelled again (same state, a later end); resume B,
    planned before A ran, must not take the job over with its stale trials and spend."""
    store = _store(tmp_path)
    job_id = _job(store, tmp_path)
    store.update_job(job_id, ended_at=100.0)
    _trial(store, job_id, 0, "cancelled", step=3)
    a = plan_resume(store, store.get_job(job_id))
    b = plan_resume(store, store.get_job(job_id))
    a.claim(store, 1, "a", 10.0)
    store.update_job(job_id, state="cancelled", ended_at=200.0, cost_usd=3.0)  # A ended
    with pytest.raises(ConfigError, match="changed since it was read"):
        b.claim(store, 2, "b", 10.0)
    job = store.get_job(job_id)
    assert (job.state.value, job.pid, job.cost_usd) == ("cancelled", 1, 3.0)
    assert plan_resume(store, job).totals["cost_usd"] == 3.0  # a fresh plan sees A's spend


def test_a_trial_stopped_by_the_policy_after_a_resume_stays_stopped(tmp_path: Path) -> None:
    """Run 1's budget stopped the trial (queued again by resume 1); run 2's policy pruned it:
    resume 2 must not pay to run the loser again."""
    store = _store(tmp_path)
    job_id = _job(store, tmp_path, state="failed")
    store.update_job(job_id, early_stopped=1)
    tid = _trial(store, job_id, 0, "stopped_early", step=5, metric=0.2, predicted_final=0.3)
    store.add_event(job_id, "stop_early", 1.0, trial_id=tid, reason="budget")
    store.add_event(job_id, "resumed", 2.0, requeued=[tid], previous_state="failed")
    store.add_event(job_id, "stop_early", 3.0, trial_id=tid, reason="asha rung 3")
    plan = plan_resume(store, store.get_job(job_id))
    assert plan.requeued == []
    assert plan.trials[0].stop_reason == "asha rung 3"
    assert plan.stopped == [({"lr": 0.001}, 0.3)] and plan.totals["early_stopped"] == 1
    assert plan.ended == []  # a stopped trial's value is no final


def test_only_a_trial_whose_own_process_failed_is_told_as_a_failure(tmp_path: Path) -> None:
    store = _store(tmp_path)
    job_id = _job(store, tmp_path)
    own, vanished, refused = (_trial(store, job_id, n, "failed") for n in range(3))
    for tid in (own, vanished):
        _launch(store, job_id, tid)
    _launch(store, job_id, refused, launched=False)
    store.add_event(job_id, "error", 1.0, trial_id=own, exit_code=None, log="x")
    store.add_event(job_id, "error", 2.0, trial_id=own, exit_code=3, log="x")  # the last: own
    store.add_event(job_id, "error", 3.0, trial_id=vanished, exit_code=None, log="x")
    store.add_event(job_id, "error", 4.0, trial_id=refused, error="terminate failed: x")
    plan = plan_resume(store, store.get_job(job_id))
    assert plan.ended == [({"lr": 0.001}, None)]
    assert [t.crashed for t in plan.trials] == [True, False, False]


def test_dead_orchestrator_job_resumes_after_cancel_closes_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    job_id = _job(store, tmp_path, state="running")
    running = _trial(store, job_id, 0, "running", step=5, checkpoint_step=4)
    out = jobs.cancel(job_id, db=store.url)
    assert out["state"] == "cancelled"
    plan = plan_resume(store, store.get_job(job_id))
    assert [t.trial_id for t in plan.requeued] == [running]
    assert plan.requeued[0].step == 4


def test_search_replay_tells_every_result_at_once_and_keeps_requeued_points_pending() -> None:
    spec = parse_spec(spec_dict(Path("/tmp"))).search
    search = Search(
        {"lr": parse_spec(spec_dict(Path("/tmp"))).search_space["lr"]}, spec, "maximize"
    )
    search.replay([({"lr": 0.01}, 0.8), ({"lr": 0.02}, None), ({"lr": 0.05}, 0.6)], [{"lr": 0.03}])
    assert search.told == 3
    # skopt minimises -metric; a failure is told the worst value seen (-0.6)
    assert list(search._opt.yi) == [-0.8, -0.6, -0.6]
    assert search._pending == [[0.03]]
    search.tell({"lr": 0.03}, 0.7)  # the requeued trial ends: no longer pending
    assert search._pending == [] and search.told == 4
    only_failures = Search({"lr": parse_spec(spec_dict(Path("/tmp"))).search_space["lr"]}, spec)
    only_failures.replay([({"lr": 0.02}, None)], [])  # no value to compare with: not told
    assert only_failures.told == 0


def test_resumed_seed_wraps_round_to_a_valid_seed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    job_id = _job(store, tmp_path, search={"seed": SEEDS - 1})
    for n in range(3):
        _trial(store, job_id, n, "completed" if n else "cancelled", step=10)
    assert plan_resume(store, store.get_job(job_id)).search_spec.seed == 2


def test_a_trials_speed_and_start_up_come_from_its_latest_life(tmp_path: Path) -> None:
    """Measured in the earlier run (market seconds): 30 s a step on its second life, which
    first reported 100 s after its launch, 2 steps past its checkpoint."""
    store = _store(tmp_path)
    job_id = _job(store, tmp_path)
    tid = _trial(store, job_id, 0, "cancelled", step=7, checkpoint_step=6)
    store.add_event(job_id, "launch", 1000.0, trial_id=tid, instance_id="L1", resume_step=0)
    for step in (1, 2, 3, 4):  # first life: 10 s a step
        store.add_observation(tid, step, 0.1, 0.0, market_time=1100.0 + 10 * step, instance_id="L1")
    store.add_event(job_id, "launch", 5000.0, trial_id=tid, instance_id="L2", resume_step=4)
    for step in (6, 7):
        store.add_observation(
            tid, step, 0.1, 0.0, market_time=5100.0 + 30 * (step - 6), instance_id="L2"
        )
    (t,) = plan_resume(store, store.get_job(job_id)).trials
    assert t.seconds_per_step == 30.0
    assert (t.restart_overhead_s, t.restart_steps) == (100.0, 2)
    never = _trial(store, job_id, 1, "cancelled")
    assert plan_resume(store, store.get_job(job_id)).trials[1].trial_id == never
    assert plan_resume(store, store.get_job(job_id)).trials[1].seconds_per_step is None


def test_a_trials_speed_on_each_instance_type_is_carried_over(tmp_path: Path) -> None:
    """Its latest life on each type it ran on (the planner compares offers by them): 10 s a
    step on a T4, then 30 s and 20 s on two V100 lives (the later one counts)."""
    store = _store(tmp_path)
    job_id = _job(store, tmp_path)
    tid = _trial(store, job_id, 0, "cancelled", step=9, checkpoint_step=8)
    lives = [("L1", "g4dn.xlarge", 10.0), ("L2", "p3.2xlarge", 30.0), ("L3", "p3.2xlarge", 20.0)]
    for n, (launch_id, itype, sps) in enumerate(lives):
        store.record_launch(
            id=launch_id,
            job_id=job_id,
            trial_id=tid,
            provider="local",
            region="r",
            zone="r-a",
            instance_type=itype,
            market="spot",
            offer_key=f"local:r-a:{itype}:spot",
            price_per_hour=1.0,
            state="terminated",
        )
        for k in range(3):
            at = 1000.0 * (n + 1) + sps * k
            store.add_observation(tid, 3 * n + k, 0.1, 0.0, market_time=at, instance_id=launch_id)
    (t,) = plan_resume(store, store.get_job(job_id)).trials
    assert t.step_s == {"g4dn.xlarge": 10.0, "p3.2xlarge": 20.0}
    assert t.seconds_per_step == 20.0


def test_carried_params_keep_the_spec_order(tmp_path: Path) -> None:
    """Stored as JSON with sorted keys; shown beside the new trials' in the spec's order."""
    store = _store(tmp_path)
    space = {
        "lr": {"type": "real", "low": 0.001, "high": 0.1},
        "dropout": {"type": "real", "low": 0.0, "high": 0.5},
    }
    job_id = _job(store, tmp_path, search_space=space)
    store.add_trial(job_id, 0, {"lr": 0.01, "dropout": 0.2})
    (t,) = plan_resume(store, store.get_job(job_id)).trials
    assert list(t.params) == ["lr", "dropout"]
