"""Two `spotwise cancel` of one finished cloud job at once, each sweeping the instances that
outlived its records (:func:`spotwise.release_sweep.sweep_finished`).

Both listed the same outlived instance, both terminated it and both billed it: each added the
instance's bill to its trial's cost as read (the trial counted it twice, $1.80 for a $0.90
hour) and to its record (the second bill a part of its own). And two that each billed an
instance of another launch of one trial, the trial read by both before either wrote it, kept
only the later's. A sweep now bills a record only while its bill is still as it read it (one
conditional UPDATE, :meth:`~spotwise.store.bills.BillWrites.rebill_instance_if_unchanged`),
and sets each trial it billed to its lives' sum."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import record_launch
from test_cancel import _cloud_job

from spotwise.planner import reconcile
from spotwise.providers.base import (
    TAG_JOB,
    TAG_LAUNCH,
    Instance,
    InstanceState,
    Market,
    Offer,
)
from spotwise.release_sweep import sweep_finished
from spotwise.store import Store

HOUR, PRICE = 3600.0, 0.9


class _ReadBefore:
    """A sweep's store that read the job's records and trials when another sweep did: until it
    writes, it reads them as they were then (``trials_then``: its trial reads stay those, as
    when it read a trial before the other wrote it); its writes are the database's."""

    def __init__(self, store: Store, job_id: str, trials_then: bool = False) -> None:
        self.store, self.wrote, self.trials_then = store, False, trials_then
        self.rows = {r.id: r for r in store.list_instances(job_id)}
        self.trials = {t.id: t for t in store.list_trials(job_id)}

    def list_instances(self, job_id: str, active_only: bool = False) -> list[Any]:
        if self.wrote:
            return self.store.list_instances(job_id, active_only)
        return [r for r in self.rows.values() if not active_only]  # all closed

    def get_instance(self, launch_id: str) -> Any:
        return self.store.get_instance(launch_id) if self.wrote else self.rows[launch_id]

    def list_trials(self, job_id: str) -> list[Any]:
        stale = self.trials_then or not self.wrote
        return list(self.trials.values()) if stale else self.store.list_trials(job_id)

    def get_trial(self, trial_id: str) -> Any:
        stale = self.trials_then or not self.wrote
        return self.trials[trial_id] if stale else self.store.get_trial(trial_id)

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("update_", "add_", "close_", "rebill_")):
            self.wrote = True
        return getattr(self.store, name)


def _finished(tmp_path: Path) -> tuple[str, str, str]:
    """A succeeded AWS job: ``l-ok`` (its own trial) ran an hour, billed $0.90; ``l-lost`` and
    ``l-lost2``, two launches of one other trial, failed and were "confirmed" clean ($0)."""
    now = time.time()
    ok = {
        "id": "l-ok", "state": "terminated", "end_reason": "completed",
        "provider_instance_id": "i-ok", "launched_at": now - 3 * HOUR,
        "ended_at": now - 2 * HOUR, "market_seconds": HOUR, "cost_usd": PRICE,
    }  # fmt: skip
    lost = {"id": "l-lost", "state": "failed", "end_reason": "failed", "ended_at": now - HOUR}
    db, job = _cloud_job(tmp_path, None, [ok, lost])
    with Store.open_existing(db) as s:
        s.update_job(job, state="succeeded", pid=None, ended_at=now - HOUR, cost_usd=PRICE)
        trials = {r.id: r.trial_id for r in s.list_instances(job)}
        s.update_trial(trials["l-ok"], state="completed", cost_usd=PRICE)
        s.update_trial(trials["l-lost"], state="completed")
        record_launch(
            s, job, trials["l-lost"], price_per_hour=PRICE, id="l-lost2", state="failed",
            end_reason="failed", ended_at=now - HOUR, requested_at=now - 2 * HOUR,
        )  # fmt: skip
    return db, job, trials["l-lost"]


def _listing(monkeypatch: pytest.MonkeyPatch, job: str, started: float) -> dict[str, list[str]]:
    """The cloud as each sweep lists it: the launch ids named in ``shown["launches"]``, one
    running instance each (``i-`` + its launch id, started at ``started``), which the sweep
    terminates (as it would: its listing was taken before the other's terminate)."""
    shown: dict[str, list[str]] = {"launches": []}

    def listed(spec: Any, job_id: str, held: list[Any], spare: Any, **_: Any) -> Any:
        offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, PRICE, 3.06)
        found = [
            Instance(
                f"i-{launch}",
                offer,
                InstanceState.RUNNING,
                {TAG_JOB: job, TAG_LAUNCH: launch},
                launched_at=started,
                launch_identity=launch,
            )
            for launch in shown["launches"]
        ]
        return reconcile.Reconciled(terminated=[i.instance_id for i in found], listed=found)

    monkeypatch.setattr(reconcile, "reconcile_records", listed)
    return shown


def test_two_sweeps_that_found_the_same_instance_bill_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both list l-lost's instance, up an hour: the first bills it $0.90 to its record and
    trial; the second, which read the record before that, bills nothing (was: the trial
    $1.80, and the record a second part)."""
    db, job_id, trial = _finished(tmp_path)
    _listing(monkeypatch, job_id, time.time() - HOUR)["launches"].append("l-lost")
    with Store.open(db) as s:
        job = s.get_job(job_id)
        late = _ReadBefore(s, job_id)
        first = sweep_finished(s, job, "succeeded")
        second = sweep_finished(late, job, "succeeded")
        row = s.get_instance("l-lost")
        trial_cost, job_cost = s.get_trial(trial).cost_usd, s.get_job(job_id).cost_usd
    assert first["found_instances"][0]["billed_usd"] == pytest.approx(PRICE, abs=0.01)
    assert second["found_instances"][0]["billed_usd"] == 0.0  # the first billed it
    assert row.cost_usd == pytest.approx(PRICE, abs=0.01)
    assert len(json.loads(row.extra_bills_json or "[]")) == 1  # one part, its first sweep's
    assert trial_cost == pytest.approx(row.cost_usd)  # was twice
    assert job_cost == pytest.approx(PRICE + row.cost_usd)


def test_two_sweeps_that_bill_two_lives_of_one_trial_keep_both_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One sweep finds l-lost's instance (an hour, $0.90), the other l-lost2's, which the first
    listing did not show yet (the same hour); the second read the trial before the first wrote
    it: the trial is the sum of its two lives (was: the later sweep's $0.90 alone)."""
    db, job_id, trial = _finished(tmp_path)
    shown = _listing(monkeypatch, job_id, time.time() - HOUR)
    with Store.open(db) as s:
        job = s.get_job(job_id)
        late = _ReadBefore(s, job_id, trials_then=True)
        shown["launches"] = ["l-lost"]
        sweep_finished(s, job, "succeeded")
        shown["launches"] = ["l-lost2"]
        sweep_finished(late, job, "succeeded")
        rows = {r.id: r for r in s.list_instances(job_id)}
        trial_cost = s.get_trial(trial).cost_usd
    assert rows["l-lost"].cost_usd == pytest.approx(PRICE, abs=0.01)
    assert rows["l-lost2"].cost_usd == pytest.approx(PRICE, abs=0.01)
    assert trial_cost == pytest.approx(rows["l-lost"].cost_usd + rows["l-lost2"].cost_usd)
