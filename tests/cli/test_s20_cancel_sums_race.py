"""A cancel sets a trial's cost to its lives' sum, and the job's to its records', in one
statement each (review-aj, s20 brief gap 2).

Each was a read of the records followed by a write of their sum: a bill another process wrote
in between (another cancel's sweep billing a life of the same trial) was in the database but
not in the sum written last, and the trial's and the job's cost missed it until the next
cancel. Two stores on one SQLite file: this cancel's, whose k-th read after its own first bill
lets the other process's bill (and that process's own sums) land, as if it had been read just
before; and the other's."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import record_launch
from test_s18_heartbeat import PRICE as LOCAL_PRICE
from test_s18_heartbeat import SPEEDUP, _alive, _dead_local_job
from test_s19_cancel_race_sweep import PRICE, _finished, _listing

from spotwise.release import _release
from spotwise.release_sweep import sweep_finished
from spotwise.store import Store

READS = ("list_instances", "get_instance", "list_trials", "get_trial", "get_job", "events")
HOUR = 3600.0


class _Interleaved:
    """A store whose ``k``-th read after its first bill written (a record closed or billed
    again) runs ``other`` (another process's writes) right after the read: the caller goes on
    with what it read before they landed. ``other`` runs after the caller ended otherwise
    (:meth:`done`), so that every case has both processes' bills."""

    def __init__(self, store: Store, k: int, other: Callable[[], None]) -> None:
        self.store, self.k, self.other = store, k, other
        self.billed, self.reads, self.fired = False, 0, False

    def _fire(self) -> None:
        if not self.fired:
            self.fired = True
            self.other()

    def done(self) -> None:
        self._fire()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        if name in READS:

            def read(*a: Any, **kw: Any) -> Any:
                out = method(*a, **kw)
                if self.billed:
                    self.reads += 1
                    if self.reads == self.k:
                        self._fire()
                return out

            return read
        if name == "rebill_instance_if_unchanged":

            def bill(*a: Any, **kw: Any) -> Any:
                out = method(*a, **kw)
                self.billed = self.billed or out is not None
                return out

            return bill
        return method


@pytest.mark.parametrize("k", range(1, 6))
def test_a_bill_another_process_writes_while_a_dead_jobs_cancel_sums_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    """A dead local job: l-0 died with its orchestrator (billed here up to the heartbeat, 30
    wall s: $2.25); l-1, of the same trial, closed by the orchestrator at $0.10. Another
    process bills l-1 $0.50 more (a part of its own) and sets the trial and the job to their
    sums, at the cancel's k-th read after it closed l-0: the trial and the job hold all three
    bills (was: k = 1 lost the $0.50 from the trial, k = 2…5 from the job)."""
    now = time.time()
    t0 = now - 40.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job_id, (trial,) = _dead_local_job(db, [t0], heartbeat_at=t0 + 30.0)
    with Store.open(db) as s:
        record_launch(
            s, job_id, trial, price_per_hour=LOCAL_PRICE, provider="local", id="l-1",
            state="terminated", end_reason="stopped", launched_at=t0 + 1.0, ended_at=t0 + 2.0,
            provider_instance_id="local-1", market_seconds=SPEEDUP, cost_usd=0.1,
        )  # fmt: skip
        s.update_trial(trial, cost_usd=0.1)
        s.update_job(job_id, cost_usd=0.1)
    _alive(monkeypatch)

    def other() -> None:
        with Store.open(db) as o:
            row = o.get_instance("l-1")
            assert o.rebill_instance_if_unchanged(row, cost_usd=0.6, billed_at=time.time())
            lives = o.list_instances(job_id)
            o.update_trial(trial, cost_usd=sum(r.cost_usd for r in lives))
            o.update_job(job_id, cost_usd=sum(r.cost_usd for r in lives))

    with Store.open(db) as s:
        cancel = _Interleaved(s, k, other)
        out = _release(cancel, s.get_job(job_id), orchestrator_died=True)
        cancel.done()
        lives = {r.id: r.cost_usd for r in s.list_instances(job_id)}
        trial_cost, job_cost = s.get_trial(trial).cost_usd, s.get_job(job_id).cost_usd
    assert out["closed_records"] == 1
    assert lives == {"l-0": pytest.approx(2.25), "l-1": pytest.approx(0.6)}
    assert trial_cost == pytest.approx(2.85)  # was $2.35 at k = 1
    assert job_cost == pytest.approx(2.85)  # was $2.35 at k = 2…5


@pytest.mark.parametrize("k", range(1, 6))
def test_two_sweeps_billing_two_lives_of_one_trial_keep_both_whenever_they_land(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    """Two cancels of a finished cloud job: one finds l-lost's instance (up an hour, $0.90),
    the other l-lost2's (the same trial), whose sweep lands at the first's k-th read after its
    bill: the trial and the job hold both lives (was: k = 1 lost l-lost2 from the trial, k =
    2…5 from the job, until the next cancel)."""
    db, job_id, trial = _finished(tmp_path)
    shown = _listing(monkeypatch, job_id, time.time() - HOUR)

    def other() -> None:
        shown["launches"] = ["l-lost2"]
        with Store.open(db) as o:
            found = sweep_finished(o, o.get_job(job_id), "succeeded")["found_instances"]
        assert found[0]["billed_usd"] == pytest.approx(PRICE, abs=0.01)

    with Store.open(db) as s:
        shown["launches"] = ["l-lost"]
        first = _Interleaved(s, k, other)
        sweep_finished(first, s.get_job(job_id), "succeeded")
        first.done()
        rows = {r.id: r.cost_usd for r in s.list_instances(job_id)}
        trial_cost, job_cost = s.get_trial(trial).cost_usd, s.get_job(job_id).cost_usd
    assert rows["l-lost"] == pytest.approx(PRICE, abs=0.01)
    assert rows["l-lost2"] == pytest.approx(PRICE, abs=0.01)
    assert trial_cost == pytest.approx(rows["l-lost"] + rows["l-lost2"])
    assert job_cost == pytest.approx(sum(rows.values()))  # l-ok's $0.90 and both
