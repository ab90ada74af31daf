"""`spotwise cancel` gives each life it bills its on-demand reference, and makes the job's
on-demand figure its records' sum, so that `status` and `report` agree on the saving.

Review (AWS on moto, orchestrator killed with SIGKILL while its trials ran, then cancelled):
`status` kept the dead orchestrator's last running estimate as the job's on-demand figure
(``on_demand_cost_usd`` $0.001644) while the records cancel closed read $0 of on-demand
reference, so `status` showed a saving that `spotwise report` (the records' sum) did not.

The cloud is played by a ``reconcile_records`` that answers as a provider would (the instances
it lists carry the on-demand price their launch was tagged with); the jobs come from
test_cancel's ``_cloud_job`` (AWS, us-east-1, $0.90/h spot launches).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from test_cancel import _cloud_job

from spotwise import costs, jobs
from spotwise.planner import reconcile as rec
from spotwise.providers.base import TAG_LAUNCH, Instance, InstanceState, Market, Offer
from spotwise.store import Store

OD = 3.06  # $/h on demand of the instances listed (a p3.2xlarge; the shipped trace's too)
HOUR = 3600.0


def _listed(iid: str, launch: str, od: float, started: float, market: str = "spot") -> Instance:
    """An instance as a provider lists it: its offer's on-demand price is the one its launch
    was tagged with (0.0: none was known at launch)."""
    offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market(market), 0.9, od)
    return Instance(iid, offer, InstanceState.RUNNING, {TAG_LAUNCH: launch}, launched_at=started)


def _agree(db: str, job: str, *, replay: bool = False) -> dict[str, Any]:
    """The job as `status` shows it, after checking that its cost and on-demand figure are
    what `report` sums of its records (and what they sum to)."""
    shown = jobs.status(job, db=db)
    out = costs.report(since="all", by="job", db=db)
    (group,) = [g for g in (out["replay"] if replay else out)["groups"] if g["key"] == job]
    with Store.open_existing(db) as s:
        rows = s.list_instances(job)
    for key in ("cost_usd", "on_demand_cost_usd"):
        assert shown[key] == pytest.approx(group[key], rel=1e-9, abs=1e-12)
        assert shown[key] == pytest.approx(sum(getattr(r, key) for r in rows), rel=1e-9)
    return shown


def test_a_dead_cloud_jobs_lives_carry_their_on_demand_reference(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    db, job = _cloud_job(
        tmp_path,
        None,
        [
            # running an hour when its orchestrator died: never billed
            {"id": "l-run", "state": "running", "launched_at": now - HOUR},
            # billed (and referenced) for 30 min by a drain that could not terminate it
            {
                "id": "l-left",
                "state": "running",
                "launched_at": now - HOUR,
                "market_seconds": 1800.0,
                "cost_usd": 0.45,
                "on_demand_cost_usd": 1.53,
                "end_reason": "not terminated",
            },
            # an on-demand life: its own price is the on-demand price
            {"id": "l-od", "state": "running", "launched_at": now - HOUR / 2},
            # a type AWS had no on-demand price for at launch (tagged 0.0)
            {"id": "l-untagged", "state": "running", "launched_at": now - HOUR},
            # gone from the listings: billed up to now, at a price nothing says
            {"id": "l-gone", "state": "running", "launched_at": now - HOUR / 4},
            # its launch never answered (the orchestrator died in the call): billed, but it was
            # never a life of the trial to the orchestrator, which gives such an instance no
            # on-demand reference (launch_cleanup)
            {"id": "l-never", "state": "requested"},
        ],
    )
    with Store.open_existing(db) as s:
        s.update_instance("l-od", market="on-demand", price_per_hour=OD)
        s.update_job(job, on_demand_cost_usd=0.5)  # the dead orchestrator's last estimate
    listed = {
        "l-run": _listed("i-1", "l-run", OD, now - HOUR),
        "l-left": _listed("i-2", "l-left", OD, now - HOUR),
        "l-od": _listed("i-3", "l-od", 0.0, now - HOUR / 2, market="on-demand"),
        "l-untagged": _listed("i-4", "l-untagged", 0.0, now - HOUR),
        "l-never": _listed("i-5", "l-never", OD, now - 600),
    }

    def settle(spec: Any, job_id: str, held: list[rec.Held]) -> rec.Reconciled:
        out = rec.Reconciled(listed=list(listed.values()))
        for h in held:
            inst = listed.get(h.launch_id)
            if inst is None:
                out.records.append(rec.Settled(h, rec.NOT_FOUND, h.instance_id or h.launch_id))
                continue
            out.terminated.append(inst.instance_id)
            since, iid = inst.launched_at, inst.instance_id
            out.records.append(rec.Settled(h, rec.TERMINATED, iid, launched_at=since, found=True))
        return out

    monkeypatch.setattr(rec, "reconcile_records", settle)
    out = jobs.cancel(job, db=db)
    assert out["state"] == "cancelled"

    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
    assert {r.end_reason for r in rows.values()} == {"reconciled"}
    run, left, od = rows["l-run"], rows["l-left"], rows["l-od"]
    # the seconds cancel billed, at the on-demand price (was $0)
    assert run.market_seconds == pytest.approx(HOUR, abs=30)
    assert run.on_demand_cost_usd == pytest.approx(run.market_seconds * OD / HOUR)
    # the drain's reference, and that of the seconds billed after it
    assert left.market_seconds == pytest.approx(HOUR, abs=30)
    assert left.on_demand_cost_usd == pytest.approx(1.53 + (left.market_seconds - 1800) * OD / HOUR)
    assert od.on_demand_cost_usd == pytest.approx(od.market_seconds * OD / HOUR)
    # on demand: no saving (the bill rounds up to the second)
    assert od.on_demand_cost_usd == pytest.approx(od.cost_usd, abs=OD / HOUR)
    # no price known: no reference invented, and cancel says which records
    assert rows["l-untagged"].cost_usd > 0 and rows["l-untagged"].on_demand_cost_usd == 0.0
    assert rows["l-gone"].cost_usd > 0 and rows["l-gone"].on_demand_cost_usd == 0.0
    assert sorted(out["on_demand_unknown"]) == ["l-gone", "l-untagged"]
    assert out["message"].endswith(
        f"; the on-demand price of 2 record(s) is unknown ({', '.join(out['on_demand_unknown'])})"
        ": the job's on-demand figure leaves out what they were billed now (no price is invented)"
    )
    assert rows["l-never"].cost_usd > 0 and rows["l-never"].on_demand_cost_usd == 0.0
    # the job's on-demand figure is its records' sum (was the stale $0.50), as `report` says
    shown = _agree(db, job)
    assert shown["on_demand_cost_usd"] == pytest.approx(
        run.on_demand_cost_usd + left.on_demand_cost_usd + od.on_demand_cost_usd
    )
    assert shown["on_demand_cost_usd"] > shown["cost_usd"] > 0  # a saving, in both


def test_a_dead_replay_jobs_lives_carry_the_replayed_on_demand_price(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local job's trial process died with its orchestrator: billed up to the job's last
    report, on the replay's clock (300x), and referenced at the replayed market's on-demand
    price over the same market seconds."""
    now = time.time()
    db, job = _cloud_job(
        tmp_path,
        None,
        [{"id": "l-1", "state": "running", "launched_at": now - 12.0,
          "provider_instance_id": "local-1"}],
        provider={"name": "local", "replay": {"speedup": 300}},
    )  # fmt: skip
    with Store.open(db) as s:
        s.update_job(job, cost_usd=0.4267, on_demand_cost_usd=0.9)  # its last running estimate
        (trial,) = s.list_trials(job)
        s.add_observation(trial.id, 3, 0.5, now - 4.0, instance_id="l-1")  # the last report
    monkeypatch.setattr(rec, "reconcile", lambda spec, job_id: [])  # nothing left alive

    out = jobs.cancel(job, db=db)
    assert "on_demand_unknown" not in out
    with Store.open_existing(db) as s:
        row = s.get_instance("l-1")
    # 8 wall s = 2400 market s at 300x, to the last report
    assert row.market_seconds == pytest.approx(2400, abs=150)
    assert row.on_demand_cost_usd == pytest.approx(row.market_seconds * OD / HOUR)
    shown = _agree(db, job, replay=True)
    assert shown["on_demand_cost_usd"] == pytest.approx(row.on_demand_cost_usd)  # was $0.90


def test_an_outlived_life_of_a_finished_job_adds_its_reference_a_stray_none(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cancel` of a finished job finds, on its cloud, a trial's instance that outlived its
    record (the drain's terminate did not take) and a failed launch's instance: the first's
    seconds get their on-demand reference, the stray's none (as the drain's sweep bills a
    stray), and the job's on-demand figure is its records' sum."""
    now = time.time()
    ok = {
        "id": "l-ok",
        "state": "terminated",
        "end_reason": "completed",
        "provider_instance_id": "i-ok",
        "launched_at": now - 3 * HOUR,
        "ended_at": now - 2 * HOUR,
        "market_seconds": HOUR,
        "cost_usd": 0.9,
        "on_demand_cost_usd": OD,
    }
    lost = {"id": "l-lost", "state": "failed", "end_reason": "failed", "ended_at": now - HOUR}
    db, job = _cloud_job(tmp_path, None, [ok, lost])
    with Store.open_existing(db) as s:
        s.update_job(job, state="succeeded", pid=None, cost_usd=0.9, on_demand_cost_usd=OD)
    listed = [
        _listed("i-ok", "l-ok", OD, now - 3 * HOUR),  # ran 3 h: 2 h more than billed
        _listed("i-lost", "l-lost", OD, now - HOUR),
    ]
    monkeypatch.setattr(
        rec,
        "reconcile_records",
        lambda spec, job_id, held: rec.Reconciled(terminated=["i-ok", "i-lost"], listed=listed),
    )

    out = jobs.cancel(job, db=db)
    assert sorted(out["terminated_instances"]) == ["i-lost", "i-ok"]
    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
    done, stray = rows["l-ok"], rows["l-lost"]
    assert done.market_seconds == pytest.approx(3 * HOUR, abs=30)
    assert done.on_demand_cost_usd == pytest.approx(done.market_seconds * OD / HOUR)  # was 1 h'
    assert stray.cost_usd == pytest.approx(0.9, abs=0.01)
    assert stray.on_demand_cost_usd == 0.0
    shown = _agree(db, job)
    assert shown["on_demand_cost_usd"] == pytest.approx(done.on_demand_cost_usd)  # was 1 h'
