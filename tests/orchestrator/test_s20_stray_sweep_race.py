"""The drain's stray sweep bills a stray as `spotwise cancel`'s sweep does (s20 brief gap 4):
its launch's record only while it is as read before the listing (compare-and-set), its trial's
cost set to its lives' sum in one statement.

It read the records after listing the cloud, added the stray's bill to the record as read then,
and set the trial's cost to the orchestrator's own count plus the bill. A cancel's sweep of the
same job (a finished job's, racing its resumed run's drain) that billed the same stray while the
drain listed was in that read: the record (and so `report`, and the trial once summed) counted
the stray twice. The real StraySweep methods run on a real store, with a stand-in backend.
"""

from __future__ import annotations

import json
import time
import types
from pathlib import Path

import pytest
from stray_sweep_harness import OFFER, PRICE, aws_job, sweep

from spotwise.planner.launch_cleanup import LaunchCleanup
from spotwise.providers.base import Instance, InstanceState, our_tags
from spotwise.store import Store


def _cancel_bills_the_stray(db: str, trial_id: str) -> None:
    """A cancel's sweep of the job: the stray's half hour ($0.475) onto l-0's record, then its
    trial's and job's sums (read, then written: nothing lands in between here)."""
    with Store.open(db) as o:
        row = o.get_instance("l-0")
        assert o.rebill_instance_if_unchanged(
            row, cost_usd=row.cost_usd + PRICE / 2, market_seconds=row.market_seconds + 1800.0
        )
        lives = o.list_instances("j-aws")
        o.update_trial(trial_id, cost_usd=sum(r.cost_usd for r in lives))
        o.update_job("j-aws", cost_usd=sum(r.cost_usd for r in lives))


def _sweep(store: Store, trial: object, now: float, race: str, db: str) -> LaunchCleanup:
    """The drain's stray sweep, over a stray of l-0 (a retried create, up 30 min), with the
    cancel's bill landing while it lists (``race`` "listing"), while it terminates
    ("terminate") or never ("")."""
    stray = Instance(
        "i-s", OFFER, InstanceState.RUNNING, our_tags("j-aws", "t", "l-0"),
        launched_at=now - 1800, launch_identity="l-0",
    )  # fmt: skip
    trial_id = str(trial.trial_id)

    def describe(_: object) -> list[Instance]:
        if race == "listing":
            _cancel_bills_the_stray(db, trial_id)
        return [stray]

    def terminate(_: object) -> None:
        if race == "terminate":
            _cancel_bills_the_stray(db, trial_id)

    return sweep(store, trial, now, describe, terminate)


@pytest.mark.parametrize("race", ["listing", "terminate"])
def test_a_stray_a_cancel_billed_at_the_same_time_is_billed_once(tmp_path: Path, race: str) -> None:
    """The cancel's bill lands while the drain lists (was: the record and the trial $1.90,
    the stray's half hour twice) or while it terminates (as before: once). Either way the
    record, the trial and the orchestrator's own spend (which the job's end writes) count it
    once: where the cancel's bill came first, it is the stray's, not a second one."""
    now = time.time()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = types.SimpleNamespace(trial_id=aws_job(db, now), cost_usd=PRICE)
    with Store.open_existing(db) as store:
        lc = _sweep(store, trial, now, race, db)
        row = store.get_instance("l-0")
        trial_cost = store.get_trial(trial.trial_id).cost_usd
    assert row.cost_usd == pytest.approx(1.5 * PRICE)  # was $1.90 (race "listing")
    assert row.market_seconds == pytest.approx(5400.0)
    assert len(json.loads(row.extra_bills_json or "[]")) == 1  # the cancel's part only
    assert trial_cost == pytest.approx(1.5 * PRICE)
    assert lc.spent_usd == pytest.approx(1.5 * PRICE)
    assert trial.cost_usd == pytest.approx(1.5 * PRICE)


def test_a_stray_sets_its_trial_to_its_lives_sum(tmp_path: Path) -> None:
    """No race: the stray's $0.475 onto its record, and the trial's cost becomes its lives'
    sum, $1.425, not the orchestrator's own count plus the bill (here $0.20 + $0.475: its
    count missed the hour a cancel had billed to the trial's life)."""
    now = time.time()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = types.SimpleNamespace(trial_id=aws_job(db, now), cost_usd=0.2)
    with Store.open_existing(db) as store:
        _sweep(store, trial, now, "", db)
        row = store.get_instance("l-0")
        trial_cost = store.get_trial(trial.trial_id).cost_usd
    assert row.cost_usd == pytest.approx(1.5 * PRICE)
    assert trial_cost == pytest.approx(1.5 * PRICE)  # was $0.675
