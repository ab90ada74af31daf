"""`spotwise resume` keeps the start-up floor its earlier run learned from lives that never
reported (s22; review-aq AQ7's floor, :mod:`spotwise.planner.startup_floor`).

The floor lived only in the orchestrator's memory (``TrialRun.unreported_life_s``): a job
whose lives were all revoked during their start-up was resumed planning on the 60 s default
again, and its deadline and budget admitted launches that could not report in time. It is now
read back from the earlier run's launch records (the market seconds each life was billed, its
end reason) and events (its ``launch``; an ``error`` with an exit code: a crash, which tells
nothing of the start-up). No schema change.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_helpers import planner_view, record_launch
from test_orchestrator import spec_dict
from test_running_totals import ScriptedMarket, run_scripted

from spotwise.planner.resume import plan_resume
from spotwise.providers.base import Market, Offer
from spotwise.spec import parse_spec
from spotwise.store import Store

SPOT = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 1.0, 3.0)


def _job(store: Store, tmp_path: Path) -> tuple[str, str]:
    """A cancelled job of 2 trials; the second cut at step 7 (checkpoint 6): queued again."""
    spec = parse_spec(spec_dict(tmp_path, trials=2, steps=10))
    job = store.create_job("m", spec.model_dump_json(), str(tmp_path / "job.yaml"), "x", "maximize")
    store.update_job(job.id, state="cancelled", ended_at=100.0, cost_usd=0.5)
    done = store.add_trial(job.id, 0, {"lr": 0.01})
    store.update_trial(done.id, state="completed", step=10, final_metric=0.9, metric=0.9)
    cut = store.add_trial(job.id, 1, {"lr": 0.02})
    store.update_trial(cut.id, state="cancelled", step=7, checkpoint_step=6)
    return job.id, cut.id


def _life(
    store: Store, job_id: str, tid: str, launch_id: str, at: float, end: str, seconds: float
) -> None:
    record_launch(
        store,
        job_id,
        tid,
        price_per_hour=1.0,
        id=launch_id,
        requested_at=1.0,
        launched_at=2.0,
        state="revoked" if end == "revoked" else "terminated",
        end_reason=end,
        market_seconds=seconds,
    )
    store.add_event(job_id, "launch", at, trial_id=tid, instance_id=launch_id, resume_step=0)


def test_resume_reads_back_the_longest_life_cut_short_before_its_first_report(
    tmp_path: Path,
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    job_id, cut = _job(store, tmp_path)
    t0 = 2_000_000.0  # the earlier run's market clock
    # L1 revoked after 1800 s, never reporting: the floor
    _life(store, job_id, cut, "L1", t0, "revoked", 1800.0)
    store.add_event(job_id, "revoked", t0 + 1800, trial_id=cut, launch="L1")
    # L2 crashed after 2500 s without a report (its own failure: no floor)
    _life(store, job_id, cut, "L2", t0 + 2000, "stopped", 2500.0)
    store.add_event(job_id, "error", t0 + 4500, trial_id=cut, exit_code=1, log="x")
    # L3 reported: its start-up was measured (100 s to its first report at step 1, then 10 s a
    # step), and its 5000 s are no floor
    _life(store, job_id, cut, "L3", t0 + 5000, "stopped", 5000.0)
    for step in range(1, 8):
        store.add_observation(
            cut, step, step / 10, 0.0, market_time=t0 + 5100 + 10 * (step - 1), instance_id="L3"
        )
    # L4 released on its notice after 1200 s, no report: shorter than L1
    _life(store, job_id, cut, "L4", t0 + 11000, "released on notice", 1200.0)

    plan = plan_resume(store, store.get_job(job_id))
    store.close()

    t = next(x for x in plan.trials if x.trial_id == cut)
    assert t.unreported_life_s == 1800.0
    assert (t.seconds_per_step, t.restart_overhead_s) == (10.0, 100.0)
    # the resumed run's first view: the floor (less the step its first report covers) stands
    # over the measured 100 s, not the 60 s default
    view = planner_view(0.0, [SPOT], plan.trials)
    assert view.restart_overhead_s == pytest.approx(1790.0)


def test_a_job_whose_lives_all_reported_keeps_no_floor(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    job_id, cut = _job(store, tmp_path)
    _life(store, job_id, cut, "L1", 0.0, "stopped", 900.0)
    store.add_observation(cut, 1, 0.1, 0.0, market_time=300.0, instance_id="L1")
    plan = plan_resume(store, store.get_job(job_id))
    store.close()
    assert all(t.unreported_life_s == 0.0 for t in plan.trials)


@pytest.mark.timeout(60)
def test_what_the_orchestrator_records_of_a_life_revoked_while_starting_is_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real loop on the scripted market: the first life is revoked 100 s after its launch
    (its start-up is 120 s: no report), the second runs the trial's 4 steps."""
    from spotwise.planner.startup_floor import unreported_before  # new in s22

    market = ScriptedMarket(steps=4, revoke_after={0: 100.0})
    summary, db = run_scripted(tmp_path, monkeypatch, market)
    assert summary["revocations"] == 1
    with Store.open_existing(db) as s:
        (trial,) = s.list_trials(summary["job_id"])
        rows = s.list_instances(summary["job_id"])
        got = unreported_before(
            trial.id, rows, s.observations(trial.id), s.events(summary["job_id"])
        )
    assert [r.end_reason for r in rows] == ["revoked", "completed"]
    assert got == 100.0  # the revoked life, as billed: launch to revocation
