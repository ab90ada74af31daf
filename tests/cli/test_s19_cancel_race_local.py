"""Two `spotwise cancel` of one dead local job at once, that disagree on a life: both read its
record open, one finds its trial process alive (and kills it: billed up to now), the other
finds it dead (billed up to when the orchestrator was last alive).

Both closed and billed the record: the later write, on a closed record, was a dated part of
its own (:func:`spotwise.store.bills.stamp_bill`), +$0.75 or -$0.75, and the trial, the sum of
its lives, followed it. A cancel now closes a record only while it is still as it read it
(one conditional UPDATE,
:meth:`~spotwise.store.bills.BillWrites.rebill_instance_if_unchanged`): the one whose close
applied bills the life, the other leaves it and says it closed none."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_s18_heartbeat import SPEEDUP, _alive, _dead_local_job, _usd
from test_s19_cancel_twice import _ReadFirst

from spotwise import release
from spotwise.release import _release
from spotwise.store import Store


@pytest.mark.parametrize("killer_first", [True, False])
def test_a_life_two_cancels_disagree_on_is_billed_once_by_the_first_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, killer_first: bool
) -> None:
    """l-0 launched 40 wall s ago, the last heartbeat 30 s after its launch: the cancel that
    kills its process bills 40 s (12000 market s, $3.00), the one that finds it dead 30 s
    (9000, $2.25). Whichever closes it first is its bill; the other adds no part."""
    now = time.time()
    t0 = now - 40.0
    monkeypatch.setattr(release, "wall_now", lambda: now)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job_id, (trial,) = _dead_local_job(db, [t0], heartbeat_at=t0 + 30.0)
    killed, dead = _usd(40.0 * SPEEDUP), _usd(30.0 * SPEEDUP)
    with Store.open(db) as s:
        job = s.get_job(job_id)
        late = _ReadFirst(s, job_id)  # it read the open record before the first one wrote
        outs = []
        for found_alive in (killer_first, not killer_first):
            _alive(monkeypatch, *(["local-0"] if found_alive else []))
            outs.append(_release(s if not outs else late, job, orchestrator_died=True))
        (row,) = s.list_instances(job_id)
        trial_cost, job_cost = s.get_trial(trial).cost_usd, s.get_job(job_id).cost_usd
    first = killed if killer_first else dead
    assert row.cost_usd == pytest.approx(first)  # the first close's bill, whole
    assert row.market_seconds == pytest.approx((40.0 if killer_first else 30.0) * SPEEDUP)
    assert row.ended_at == pytest.approx(now if killer_first else t0 + 30.0)
    assert row.extra_bills_json is None  # was a part of +/- $0.75 (the other cancel's bill)
    assert trial_cost == pytest.approx(first) and job_cost == pytest.approx(first)
    assert [out["closed_records"] for out in outs] == [1, 0]  # the second closed none
    assert "on_demand_unknown" not in outs[1]
