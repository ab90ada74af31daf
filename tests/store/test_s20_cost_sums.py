"""A trial's and a job's cost set to their records' sum in one statement
(:meth:`~spotwise.store.bills.BillWrites.update_trial_cost_to_lives`,
:meth:`~spotwise.store.bills.BillWrites.update_job_cost_to_records`), on SQLite and
PostgreSQL: the sum is the records' as the statement writes, whatever the caller read before;
a trial or job with no record is set to 0; an unknown id is named."""

from __future__ import annotations

import pytest
from shared_helpers import record_launch

from spotwise.errors import NotFoundError
from spotwise.store import Store


def test_the_sums_are_the_records_as_written(fresh_url: str) -> None:
    with Store.open(fresh_url) as first, Store.open(fresh_url) as second:
        job = first.create_job("j", "{}", "job.yaml", "spot-greedy", "maximize")
        a, b = (first.add_trial(job.id, n, {"lr": 0.1}) for n in (0, 1))
        for n, (trial, usd, od) in enumerate([(a, 0.25, 1.0), (a, 0.5, 2.0), (b, 1.25, 4.0)]):
            record_launch(
                first, job.id, trial.id, price_per_hour=0.9, id=f"l-{n}", cost_usd=usd,
                on_demand_cost_usd=od,
            )  # fmt: skip
        first.update_trial(a.id, cost_usd=9.0)  # what neither record holds: not kept
        empty = first.add_trial(job.id, 2, {"lr": 0.1})
        first.update_trial(empty.id, cost_usd=3.0)
        # the other process's bill, after this one read the records (it reads nothing here)
        second.update_instance("l-1", cost_usd=0.75)
        assert first.update_trial_cost_to_lives(a.id) == pytest.approx(1.0)
        assert first.update_trial_cost_to_lives(empty.id) == 0.0
        written = first.update_job_cost_to_records(job.id)
        assert (written.cost_usd, written.on_demand_cost_usd) == (
            pytest.approx(2.25),
            pytest.approx(7.0),
        )
        assert second.get_trial(a.id).cost_usd == pytest.approx(1.0)
        assert second.get_trial(b.id).cost_usd == 0.0  # not summed: as it was
        assert second.get_job(job.id).cost_usd == pytest.approx(2.25)
        with pytest.raises(NotFoundError, match="trial 't-none' not found"):
            first.update_trial_cost_to_lives("t-none")
        with pytest.raises(NotFoundError, match="job 'j-none' not found"):
            first.update_job_cost_to_records("j-none")
