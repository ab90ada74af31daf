"""`spotwise cancel` bills what a dead orchestrator's instances ran by the provider's billing
rule, the whole life at once (review: AWS-on-moto jobs killed with SIGKILL, then cancelled).

Before, cancel added the seconds no bill had covered at the record's price: a 16 s life was
billed 16 s (AWS bills at least 60), a life EC2 took in its first hour was billed (AWS does not
charge it), a life whose drain had already billed the 60 s minimum on 30 s was billed that
minimum and the rest again, and a life was billed from when its launch call answered, not from
its creation. The cloud is played by a ``reconcile_records`` that answers as AWS would.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from test_cancel import _cloud_job

from spotwise import jobs, release
from spotwise.store import Store

PRICE = 0.9  # $/h of every record (_cloud_job)


def test_a_dead_jobs_instances_are_billed_by_the_aws_rule(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.planner import reconcile as backend

    now = time.time()
    minimum_usd = 60 * PRICE / 3600
    db, job = _cloud_job(
        tmp_path,
        None,
        [
            # a 16 s life: AWS bills its 60 s minimum
            {"id": "l-short", "state": "running", "launched_at": now - 16},
            # taken by EC2 after 14 s, in its first hour: not charged
            {"id": "l-taken", "state": "running", "launched_at": now - 15},
            # billed by a drain that could not terminate it: 30 s, at the 60 s minimum
            {
                "id": "l-left",
                "state": "running",
                "launched_at": now - 80,
                "market_seconds": 30.0,
                "cost_usd": minimum_usd,
                "end_reason": "not terminated",
            },
            # its launch answered 3 s after EC2 created it (the record's start is the answer)
            {"id": "l-late", "state": "running", "launched_at": now - 90},
        ],
    )
    with Store.open_existing(db) as s:  # the drain billed l-left's trial as its record
        left_trial = s.get_instance("l-left").trial_id
        s.update_trial(left_trial, cost_usd=minimum_usd)
    ids = {"l-short": "i-1", "l-taken": "i-2", "l-left": "i-3", "l-late": "i-4"}
    created = {"l-late": now - 93}

    def settle(
        spec: Any, job_id: str, held: list[backend.Held], spare: Any = None, **_: Any
    ) -> backend.Reconciled:
        out = backend.Reconciled()
        for h in held:
            iid = ids[h.launch_id]
            if h.launch_id == "l-taken":
                one = backend.Settled(h, backend.ENDED, iid, ended_at=now - 1, revoked=True)
            else:
                out.terminated.append(iid)
                one = backend.Settled(h, backend.TERMINATED, iid)
            out.records.append(
                backend.Settled(
                    h,
                    one.outcome,
                    iid,
                    ended_at=one.ended_at,
                    revoked=one.revoked,
                    launched_at=created.get(h.launch_id),
                    found=True,
                )
            )
        return out

    monkeypatch.setattr(backend, "reconcile_records", settle)
    # the cancel's clock is the test's: a loaded machine's second between them made 80 s 81.1
    monkeypatch.setattr(release, "wall_now", lambda: now)
    out = jobs.cancel(job, db=db)
    assert out["state"] == "cancelled"

    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
        trials = {t.id: t for t in s.list_trials(job)}
        job_cost = s.get_job(job).cost_usd
    # the one EC2 took is closed revoked, as its orchestrator closes one (review-bb F4)
    assert {i: r.end_reason for i, r in rows.items() if r.end_reason != "reconciled"} == {
        "l-taken": "revoked"
    }
    assert rows["l-short"].cost_usd == pytest.approx(minimum_usd)  # was 16 s' worth
    assert rows["l-taken"].cost_usd == 0.0  # was 14 s' worth
    # 80 s in all, once (was the 60 s minimum + 50 s = 110 s' worth)
    left = rows["l-left"]
    assert left.market_seconds == pytest.approx(80, abs=1)
    assert left.cost_usd == pytest.approx(left.market_seconds * PRICE / 3600, abs=PRICE / 3600)
    # from EC2's creation, 93 s ago (was from the answer: 90 s)
    late = rows["l-late"]
    assert late.launched_at == pytest.approx(now - 90)  # the record keeps its own start
    assert late.market_seconds == pytest.approx(93, abs=1)
    assert late.cost_usd == pytest.approx(late.market_seconds * PRICE / 3600, abs=PRICE / 3600)
    # each trial's cost is its life's; the job's the sum
    for r in rows.values():
        assert trials[r.trial_id].cost_usd == pytest.approx(r.cost_usd)
    assert job_cost == pytest.approx(sum(r.cost_usd for r in rows.values()))
