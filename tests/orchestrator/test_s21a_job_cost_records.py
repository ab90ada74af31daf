"""A job's end sets its cost to its records' sum (s20 report_G section 3, case (a)).

A `spotwise cancel` of a finished job bills an instance that outlived its record and sets the
job's cost to its records' sum; a `spotwise resume` of that job that had already read the
job's totals and claimed it runs on with its own count, which every save of its totals and its
end wrote over the cancel's sum: the bill stayed on the record and the trial, and was gone from
the job row (`status`, `tune`'s and `resume`'s summary). The run's end now sets the job's cost
and on-demand figure to its records' sums in one statement, and the summary gives the row's
figures. Where a failure may have left a bill counted but not recorded (a drain step, a crash:
case (b)), the run's own count stays. A local replayed market and a real trial process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shared_helpers import record_launch
from test_orchestrator import spec_dict, write_spec, write_trace

from spotwise import jobs
from spotwise.planner.ledger import Ledger
from spotwise.planner.orchestrator import RunOptions, resume_job
from spotwise.planner.resume import plan_resume
from spotwise.spec import parse_spec
from spotwise.store import Store

TRIAL = """
from spotwise import sdk
for step in range(1, sdk.steps() + 1):
    sdk.report(step, step / 100)
sdk.done(sdk.steps())
"""
EARLIER, EARLIER_OD = 0.5, 1.5  # the earlier run's life
CANCEL, CANCEL_OD = 0.75, 2.0  # what the cancel's sweep adds to that life's record


def _spec(tmp_path: Path) -> dict[str, Any]:
    write_trace(tmp_path / "trace.csv")
    (tmp_path / "trial.py").write_text(TRIAL)
    return spec_dict(tmp_path, command=["python", str(tmp_path / "trial.py")], steps=3)


def _cancelled_job(db: str, tmp_path: Path) -> str:
    """A cancelled local job: its one trial cut before its first step, its life l-0 closed,
    billed $0.50 (on-demand reference $1.50), as the job's totals say."""
    spec = parse_spec(_spec(tmp_path))
    with Store.open(db) as s:
        path = str(write_spec(tmp_path, _spec(tmp_path)))
        job = s.create_job("e2e", spec.model_dump_json(), path, "spot-greedy", "maximize")
        s.update_job(
            job.id, state="cancelled", ended_at=4.0, cost_usd=EARLIER, on_demand_cost_usd=EARLIER_OD
        )
        trial = s.add_trial(job.id, 0, {"lr": 0.01})
        s.update_trial(trial.id, state="cancelled", cost_usd=EARLIER)
        record_launch(
            s, job.id, trial.id, id="l-0", price_per_hour=1.0, provider="local",
            requested_at=1.0, launched_at=2.0, ended_at=3.0, state="terminated",
            end_reason="stopped", provider_instance_id="i-0", cost_usd=EARLIER,
            on_demand_cost_usd=EARLIER_OD, market_seconds=1800.0,
        )  # fmt: skip
    return job.id


def _cancel_bills_l0(db: str, job_id: str) -> None:
    """What a cancel's sweep of the job writes (it read the job as finished): a part of
    l-0's bill, then the trial's and the job's cost set to their records' sums."""
    with Store.open_existing(db) as o:
        row = o.get_instance("l-0")
        assert o.rebill_instance_if_unchanged(
            row,
            cost_usd=row.cost_usd + CANCEL,
            on_demand_cost_usd=row.on_demand_cost_usd + CANCEL_OD,
            market_seconds=row.market_seconds + 2700.0,
        )
        o.update_trial_cost_to_lives(row.trial_id)
        o.update_job_cost_to_records(job_id)


def test_a_bill_a_cancel_wrote_after_the_resume_read_its_totals_stays_in_the_job(
    tmp_path: Path,
) -> None:
    """The resumed run read $0.50 and claimed the job; then the cancel billed l-0 $0.75 more.
    The job row and the resumed run's summary are the records' sums, $0.75 included (was:
    the run's own count, $0.75 short, while the record and the trial held it)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job_id = _cancelled_job(db, tmp_path)
    billed: list[int] = []

    def on_update(_: dict[str, Any]) -> None:
        if not billed:  # in the resumed run's loop: its totals read, the job claimed
            billed.append(1)
            _cancel_bills_l0(db, job_id)

    with Store.open_existing(db) as store:
        plan = plan_resume(store, store.get_job(job_id))
        opts = RunOptions(run_root=tmp_path / "runs", on_update=on_update)
        out = resume_job(plan, store, opts)
        job = store.get_job(job_id)
        records = store.list_instances(job_id)
        trial_cost = sum(t.cost_usd for t in store.list_trials(job_id))
    assert billed and out["state"] == "succeeded", out
    assert len(records) == 2  # l-0 and the resumed run's life
    resumed = next(r.cost_usd for r in records if r.id != "l-0")
    assert resumed > 0
    assert job.cost_usd == pytest.approx(EARLIER + CANCEL + resumed)  # was without CANCEL
    assert job.cost_usd == sum(r.cost_usd for r in records)
    assert job.on_demand_cost_usd == sum(r.on_demand_cost_usd for r in records)
    assert job.on_demand_cost_usd >= EARLIER_OD + CANCEL_OD
    assert trial_cost == pytest.approx(job.cost_usd)
    # what `resume` prints is the row's (as `status` gives it)
    assert (out["cost_usd"], out["on_demand_cost_usd"]) == (job.cost_usd, job.on_demand_cost_usd)


UNRECORDED = 0.25  # counted by the run, never written to a record (its write failed)


@pytest.mark.parametrize("where", ["drain", "loop"])
def test_a_run_that_failed_keeps_its_own_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A drain step (the stray sweep) or the loop (a life's bill) fails after counting $0.25
    that no record holds: the job row keeps the run's own count, not the records' sum, which
    would leave out what the cloud did bill (case (b))."""
    boom = RuntimeError(f"{where} bug")
    name = "_sweep_strays" if where == "drain" else "_bill"
    real = getattr(Ledger, name)

    def counted_then_failed(self: Ledger, *a: Any, **kw: Any) -> None:
        real(self, *a, **kw)
        self.spent_usd += UNRECORDED
        raise boom

    monkeypatch.setattr(Ledger, name, counted_then_failed)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with pytest.raises(RuntimeError, match=f"{where} bug"):
        jobs.tune(write_spec(tmp_path, _spec(tmp_path)), db=db, run_root=tmp_path / "runs")
    with Store.open_existing(db) as store:
        (job,) = store.list_jobs()
        records = sum(r.cost_usd for r in store.list_instances(job.id))
    assert job.state.value == "failed"
    assert records > 0
    assert job.cost_usd == pytest.approx(records + UNRECORDED)
