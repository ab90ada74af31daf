"""Two `spotwise cancel` of one dead local job at the same moment (review-ah F6).

Nothing in cancel claims a dead job: both read its open instance records before either
closes them, and each added every life's extra bill to its trial's cost as read when it wrote
it: the trial counted each life twice ($4.50 for a $2.25 life), while the records (written the
same twice), `report` and the job's cost (their sum) stayed right. A cancel now sets a trial's
cost to its lives' sum, as the job's is its records' sum: the same whichever cancel writes
last."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import record_launch
from test_s18_heartbeat import PRICE, SPEEDUP, _alive, _dead_local_job, _usd

from spotwise.release import _release
from spotwise.store import Store


class _ReadFirst:
    """The second cancel's store: until it writes anything, it reads the job's records and
    trials as they were before the first cancel ran (it read them then); its later reads,
    and all its writes, are the database's."""

    def __init__(self, store: Store, job_id: str) -> None:
        self.store, self.wrote = store, False
        self.instances = store.list_instances(job_id)
        self.trials = store.list_trials(job_id)

    def list_instances(self, job_id: str, active_only: bool = False) -> list[Any]:
        if self.wrote:
            return self.store.list_instances(job_id, active_only)
        return [r for r in self.instances if not active_only or r.state == "running"]

    def list_trials(self, job_id: str) -> list[Any]:
        return self.store.list_trials(job_id) if self.wrote else list(self.trials)

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("update_", "add_", "close_", "rebill_")):
            self.wrote = True
        return getattr(self.store, name)


def test_two_cancels_that_read_the_open_records_first_bill_each_life_once_to_its_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two lives of one trial (one billed $0.10 by the orchestrator before it died, 4 wall s
    in: 1200 market s) and one of another, the heartbeat 30 wall s after the first launch; a
    third trial holds $0.05 that no life's bill does (kept, not dropped, not doubled)."""
    now = time.time()
    t0 = now - 40.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job_id, trials = _dead_local_job(db, [t0, t0 + 10.0], heartbeat_at=t0 + 30.0)
    with Store.open(db) as s:
        s.update_instance("l-0", market_seconds=4.0 * SPEEDUP, cost_usd=0.1)
        s.update_trial(trials[0], cost_usd=0.1)
        record_launch(
            s, job_id, trials[0], price_per_hour=PRICE, provider="local", id="l-9",
            state="running", launched_at=t0 + 20.0, provider_instance_id="local-9",
        )  # fmt: skip
        apart = s.add_trial(job_id, 2, {"lr": 0.1})
        s.update_trial(apart.id, cost_usd=0.05)
    _alive(monkeypatch)  # every trial process died with the orchestrator
    with Store.open(db) as s:
        job = s.get_job(job_id)
        second = _ReadFirst(s, job_id)  # it read the records before the first cancel wrote
        first_out = _release(s, job, orchestrator_died=True)
        second_out = _release(second, job, orchestrator_died=True)
        rows = {r.id: r for r in s.list_instances(job_id)}
        costs = {t.id: t.cost_usd for t in s.list_trials(job_id)}
        job_cost = s.get_job(job_id).cost_usd
    # the first closed and billed all three; the second found them closed: it billed none
    assert (first_out["closed_records"], second_out["closed_records"]) == (3, 0)
    # the records: each life billed once, up to the heartbeat (the second cancel's close of a
    # record it read open applies only while it is still open: tests/cli/test_s19_cancel_race_*)
    l0 = 0.1 + (30.0 - 4.0) * SPEEDUP * PRICE / 3600.0  # the bill's own average price, then
    assert rows["l-0"].cost_usd == pytest.approx(l0)
    assert rows["l-1"].cost_usd == pytest.approx(_usd(20.0 * SPEEDUP))
    assert rows["l-9"].cost_usd == pytest.approx(_usd(10.0 * SPEEDUP))
    assert all(r.extra_bills_json is None for r in rows.values())
    # each trial: its lives' sum, once (was $0.1 + 2 x its extra; the other: 2 x its life)
    assert costs[trials[0]] == pytest.approx(rows["l-0"].cost_usd + rows["l-9"].cost_usd)
    assert costs[trials[0]] == pytest.approx(2.05 + 0.75)  # was $5.50: $0.10 + 2 x $2.70
    assert costs[trials[1]] == pytest.approx(rows["l-1"].cost_usd)  # $1.50, was $3.00
    assert costs[apart.id] == pytest.approx(0.05)
    assert job_cost == pytest.approx(sum(r.cost_usd for r in rows.values()))


def test_a_trials_cost_is_its_lives_sum_after_a_cancel_as_the_jobs_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial whose cost holds $0.20 that no record of its lives does (an older database, or
    an orchestrator killed between writing a trial's cost and its record's): the cancel sets
    it to its lives' sum, as it sets the job's to its records' sum (review-aj F2: it kept the
    $0.20 on the trial and not on the job, so the two disagreed; and where the record was still
    open, the life it billed again was counted twice)."""
    now = time.time()
    t0 = now - 40.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job_id, trials = _dead_local_job(db, [t0], heartbeat_at=t0 + 30.0)
    with Store.open(db) as s:
        s.update_trial(trials[0], cost_usd=0.2)
    _alive(monkeypatch)
    with Store.open(db) as s:
        _release(s, s.get_job(job_id), orchestrator_died=True)
        (row,) = s.list_instances(job_id)
        assert row.cost_usd == pytest.approx(_usd(30.0 * SPEEDUP))
        assert s.get_trial(trials[0]).cost_usd == pytest.approx(row.cost_usd)
        assert s.get_job(job_id).cost_usd == pytest.approx(row.cost_usd)
