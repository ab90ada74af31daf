"""A trial write checked on the job's owner cannot be overtaken by a takeover's claim (s24
helper C): the job's row is locked before its owner is read, so a claim another process has
written but not committed yet is waited for and then seen (the write refused), not read as
it was before and written over. (SQLite serialises writers: there it cannot happen.)"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from spotwise.store import Store

ME = {"pid": 1, "host": "box-1", "pid_start": "pid:[1]|boot:1"}


@pytest.mark.parametrize("write", ["trial", "observation"])
def test_a_write_waiting_for_a_takeover_claim_sees_it(
    pg_server: str, fresh_url: str, backend: str, write: str
) -> None:
    if backend != "postgresql":
        pytest.skip("the race is PostgreSQL's (READ COMMITTED: a row read before a commit)")
    with Store.open(fresh_url) as store:
        job = store.create_job("j", "{}", "job.yaml", "spot-greedy", "maximize")
        trial = store.add_trial(job.id, 0, {"lr": 0.1})
        store.update_job(job.id, state="running", **ME)
        store.update_trial(trial.id, state="running", step=4)
        other = sa.create_engine(fresh_url)
        with other.connect() as conn:  # the other process's claim, not committed yet
            conn.exec_driver_sql(
                "UPDATE job SET pid = 99999, host = 'box-2' WHERE id = %(id)s", {"id": job.id}
            )
            conn.exec_driver_sql("UPDATE trial SET step = 2 WHERE id = %(id)s", {"id": trial.id})
            done: list[bool] = []

            def mine() -> None:
                if write == "trial":
                    fields = {"state": "cancelled", "step": 9}
                    done.append(store.update_trial_if_owner(job.id, ME, trial.id, fields))
                else:
                    done.append(store.add_observation_if_owner(job.id, ME, trial.id, 9, 0.5, 1.0))

            waiting = threading.Thread(target=mine)
            waiting.start()
            time.sleep(0.5)  # this write waits for the job's row now
            assert not done
            conn.commit()
        waiting.join(10)
        other.dispose()
        assert done == [False]  # the row names the other now: nothing written
        row = store.get_trial(trial.id)
        assert (row.state.value, row.step) == ("running", 2)
        assert store.observations(trial.id) == []
