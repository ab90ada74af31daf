"""review-al F6: on PostgreSQL (READ COMMITTED) the one-statement sum
``UPDATE trial SET cost_usd = (SELECT SUM ...)`` reads the records as of the statement's start.
Started while another process had closed a record and summed the trial without committing yet,
it waited for that trial's row and then wrote its older sum over the other's: the trial missed
the other's bill until the next cancel. The trial's (and the job's) row is locked first, so the
sum is read after the other commits. (SQLite serialises writers: there it cannot happen.)"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa
from shared_helpers import record_launch

from spotwise.store import Store


@pytest.mark.parametrize("what", ["trial", "job"])
def test_a_sum_waiting_for_another_processs_sum_reads_its_bill(
    pg_server: str, fresh_url: str, backend: str, what: str
) -> None:
    if backend != "postgresql":
        pytest.skip("the race is PostgreSQL's (READ COMMITTED snapshots per statement)")
    with Store.open(fresh_url) as store:
        job = store.create_job("j", "{}", "job.yaml", "spot-greedy", "maximize")
        trial = store.add_trial(job.id, 0, {"lr": 0.1})
        for n in (0, 1):
            record_launch(store, job.id, trial.id, price_per_hour=0.9, id=f"l-{n}", cost_usd=0.5)
        table, key = ("trial", trial.id) if what == "trial" else ("job", job.id)
        column = "trial_id" if what == "trial" else "job_id"
        other = sa.create_engine(fresh_url)
        with other.connect() as conn:  # the other process: bills l-1 and sums, not committed
            conn.exec_driver_sql("UPDATE instance SET cost_usd = 2.0 WHERE id = 'l-1'")
            conn.exec_driver_sql(
                f"UPDATE {table} SET cost_usd = (SELECT SUM(cost_usd) FROM instance "
                f"WHERE {column} = %(key)s) WHERE id = %(key)s",
                {"key": key},
            )
            done: list[float] = []
            sum_it = (
                store.update_trial_cost_to_lives
                if what == "trial"
                else lambda k: store.update_job_cost_to_records(k).cost_usd
            )
            waiting = threading.Thread(target=lambda: done.append(sum_it(key)))
            waiting.start()
            time.sleep(0.5)  # this process's sum is waiting for the row now
            assert not done
            conn.commit()
        waiting.join(10)
        other.dispose()
        assert done == [pytest.approx(2.5)]  # 0.5 + 2.0: the other's bill is in
        row = store.get_trial(trial.id) if what == "trial" else store.get_job(job.id)
        assert row.cost_usd == pytest.approx(2.5)
