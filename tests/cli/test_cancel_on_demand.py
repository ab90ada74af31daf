"""`spotwise cancel` gives each life it bills its on-demand reference, and makes the job's
on-demand figure its records' sum, so that `status` and `report` agree on the saving.

Review (AWS on moto, orchestrator killed with SIGKILL while its trials ran, then cancelled):
`status` kept the dead orchestrator's last running estimate as the job's on-demand figure
(``on_demand_cost_usd`` $0.001644) while the records cancel closed read $0 of on-demand
reference, so `status` showed a saving that `spotwise report` (the records' sum) did not.

Review (q): cancel then referenced every second it billed at the on-demand price, where the
orchestrator references only a life's useful seconds (planner/report.py ``life_cost``,
``running_reference``): a relaunch's start-up, a dead orchestrator's idle time after the last
report and a revoked life's work after its checkpoint overstated the saving (a relaunch running
1 h: $3.06 against the orchestrator's $2.55; a life revoked after 30 min: $1.53 against $0.85).

The cloud is played by a ``reconcile_records`` that answers as a provider would (the instances
it lists carry the on-demand price their launch was tagged with); the jobs come from
test_cancel's ``_cloud_job`` (AWS, us-east-1, $0.90/h spot launches). Reports are recorded at
fixed offsets from a life's start, so that each reference is exact whatever the test's pace.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from shared_helpers import record_launch
from test_cancel import _cloud_job

from spotwise import costs, jobs
from spotwise.planner import reconcile as rec
from spotwise.planner.report import life_cost, running_reference
from spotwise.planner.runstate import Life
from spotwise.providers.base import TAG_LAUNCH, Instance, InstanceState, Market, Offer
from spotwise.providers.billing import rule_for
from spotwise.store import Store

OD = 3.06  # $/h on demand of the instances listed (a p3.2xlarge; the shipped trace's too)
HOUR = 3600.0


def _listed(iid: str, launch: str, od: float, started: float, market: str = "spot") -> Instance:
    """An instance as a provider lists it: its offer's on-demand price is the one its launch
    was tagged with (0.0: none was known at launch)."""
    offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market(market), 0.9, od)
    return Instance(iid, offer, InstanceState.RUNNING, {TAG_LAUNCH: launch}, launched_at=started)


def _report(
    s: Store, launch: str, started: float, *steps: tuple[int, float], market: bool = True
) -> None:
    """Record the reports of one life: ``(step, seconds after its start)`` each."""
    row = s.get_instance(launch)
    for step, after in steps:
        at = started + after
        s.add_observation(row.trial_id, step, 0.5, at, market_time=at if market else None,
                          instance_id=launch)  # fmt: skip


def _settling(listed: dict[str, Instance], revoked: dict[str, float] | None = None) -> Any:
    """A ``reconcile_records`` that terminates each listed instance now, except those in
    ``revoked`` (launch id → when): found ended, taken by the provider then."""
    gone = revoked or {}

    def settle(
        spec: Any, job_id: str, held: list[rec.Held], spare: Any = None, **_: Any
    ) -> rec.Reconciled:
        out = rec.Reconciled(listed=list(listed.values()))
        for h in held:
            inst = listed.get(h.launch_id)
            if inst is None:
                out.records.append(rec.Settled(h, rec.NOT_FOUND, h.instance_id or h.launch_id))
                continue
            since, iid = inst.launched_at, inst.instance_id
            if h.launch_id in gone:
                at = gone[h.launch_id]
                out.records.append(
                    rec.Settled(h, rec.ENDED, iid, at, launched_at=since, found=True, revoked=True)
                )
                continue
            out.terminated.append(iid)
            out.records.append(rec.Settled(h, rec.TERMINATED, iid, launched_at=since, found=True))
        return out

    return settle


def _agree(db: str, job: str, *, replay: bool = False) -> dict[str, Any]:
    """The job as `status` shows it, after checking that its cost and on-demand figure are
    what `report` sums of its records (and what they sum to)."""
    shown = jobs.status(job, db=db)
    out = costs.report(since="all", until="now", by="job", db=db)  # the bills just written
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
        # the reports each life made before its orchestrator died: (step, seconds in)
        _report(s, "l-run", now - HOUR, (1, 600.0), (2, 2400.0))
        _report(s, "l-left", now - HOUR, (1, 600.0), (2, 1500.0))  # before its drain's bill
        _report(s, "l-od", now - HOUR / 2, (1, 1200.0))
        _report(s, "l-untagged", now - HOUR, (1, 600.0))
        _report(s, "l-gone", now - HOUR / 4, (1, 300.0))
    listed = {
        "l-run": _listed("i-1", "l-run", OD, now - HOUR),
        "l-left": _listed("i-2", "l-left", OD, now - HOUR),
        "l-od": _listed("i-3", "l-od", 0.0, now - HOUR / 2, market="on-demand"),
        "l-untagged": _listed("i-4", "l-untagged", 0.0, now - HOUR),
        "l-never": _listed("i-5", "l-never", OD, now - 600),
    }
    monkeypatch.setattr(rec, "reconcile_records", _settling(listed))
    out = jobs.cancel(job, db=db)
    assert out["state"] == "cancelled"

    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
    assert {r.end_reason for r in rows.values()} == {"reconciled"}
    run, left, od = rows["l-run"], rows["l-left"], rows["l-od"]
    # billed the hour it ran; referenced (was $0) up to its last report, its first life's
    # start-up included: the idle hour's last 20 min after it are billed, not referenced
    assert run.market_seconds == pytest.approx(HOUR, abs=30)
    assert run.on_demand_cost_usd == pytest.approx(2400.0 * OD / HOUR, rel=1e-9)
    # the drain referenced its useful seconds: the half hour billed after it adds none
    assert left.market_seconds == pytest.approx(HOUR, abs=30)
    assert left.on_demand_cost_usd == pytest.approx(1.53, rel=1e-9)
    # an on-demand life: its own price is the on-demand price; its idle time after its last
    # report is a cost with no reference, as the orchestrator's bill of it would count it
    assert od.cost_usd == pytest.approx(od.market_seconds * OD / HOUR, abs=OD / HOUR)
    assert od.on_demand_cost_usd == pytest.approx(1200.0 * OD / HOUR, rel=1e-9)
    # no price known: no reference invented, and cancel says which records
    assert rows["l-untagged"].cost_usd > 0 and rows["l-untagged"].on_demand_cost_usd == 0.0
    # gone: the price a listed instance of its offer carries (review-bb F5: was unknown)
    assert rows["l-gone"].cost_usd > 0
    assert rows["l-gone"].on_demand_cost_usd == pytest.approx(300.0 * OD / HOUR, rel=1e-9)
    assert out["on_demand_unknown"] == ["l-untagged"]
    assert out["message"].endswith(
        "; the on-demand price of 1 record(s) is unknown (l-untagged): the job's on-demand "
        "figure leaves out what they were billed now (no price is invented)"
    )
    assert rows["l-never"].cost_usd > 0 and rows["l-never"].on_demand_cost_usd == 0.0
    # the job's on-demand figure is its records' sum (was the stale $0.50), as `report` says
    shown = _agree(db, job)
    assert shown["on_demand_cost_usd"] == pytest.approx((2400 + 1200 + 300) * OD / HOUR + 1.53)


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


def test_an_outlived_life_of_a_finished_job_adds_no_reference_for_its_idle_hours(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cancel` of a finished job finds, on its cloud, a trial's instance that outlived its
    record (the drain's terminate did not take) and a failed launch's instance: the first's
    seconds are billed, but its trial had completed (its last report inside the hour its
    orchestrator billed and referenced): the two idle hours after get no reference (they got
    2 h of it before: a saving that was never made); the stray's none (as the drain's sweep
    bills a stray), and the job's on-demand figure is its records' sum."""
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
        _report(s, "l-ok", now - 3 * HOUR, (1, 600.0), (3, HOUR - 5))  # its last step
    listed = [
        _listed("i-ok", "l-ok", OD, now - 3 * HOUR),  # ran 3 h: 2 h more than billed
        _listed("i-lost", "l-lost", OD, now - HOUR),
    ]
    monkeypatch.setattr(
        rec,
        "reconcile_records",
        lambda spec, job_id, held, spare=None: rec.Reconciled(
            terminated=["i-ok", "i-lost"], listed=listed
        ),
    )

    out = jobs.cancel(job, db=db)
    assert sorted(out["terminated_instances"]) == ["i-lost", "i-ok"]
    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
    done, stray = rows["l-ok"], rows["l-lost"]
    assert done.market_seconds == pytest.approx(3 * HOUR, abs=30)
    assert done.cost_usd == pytest.approx(3 * 0.9, abs=0.01)
    assert done.on_demand_cost_usd == pytest.approx(OD, rel=1e-9)  # its orchestrator's (was 3 h')
    assert stray.cost_usd == pytest.approx(0.9, abs=0.01)
    assert stray.on_demand_cost_usd == 0.0
    shown = _agree(db, job)
    assert shown["on_demand_cost_usd"] == pytest.approx(OD, rel=1e-9)


def _relaunch_job(tmp_path: Any, now: float, *, resume_event: bool) -> tuple[str, str]:
    """A dead job's trial on its second life: the first (launched 3 h ago) was revoked after
    30 min at step 180, checkpointed at 100, its bill closed by its orchestrator; the second
    (l-2, launched 1 h ago) resumed from step 100 and still runs."""
    first = {
        "id": "l-1",
        "state": "revoked",
        "end_reason": "revoked",
        "requested_at": now - 3 * HOUR - 5,
        "launched_at": now - 3 * HOUR,
        "ended_at": now - 2.5 * HOUR,
        "market_seconds": 1800.0,
        "on_demand_cost_usd": 0.85,
    }
    db, job = _cloud_job(tmp_path, None, [first])
    with Store.open_existing(db) as s:
        (trial,) = s.list_trials(job)
        s.update_trial(trial.id, checkpoint_step=100)
        record_launch(s, job, trial.id, price_per_hour=0.9, id="l-2", state="running",
                      requested_at=now - HOUR - 5, launched_at=now - HOUR)  # fmt: skip
        if resume_event:
            s.add_event(job, "launch", now - HOUR, trial.id, "l-2", resume_step=100)
        # the first life at 10 s a step: step 1 at 10 s, ..., 180 at 1800 s
        _report(s, "l-1", now - 3 * HOUR, (1, 10.0), (100, 1000.0), (180, 1800.0))
    return db, job


@pytest.mark.parametrize(
    ("reports", "resume_event", "useful_s"),
    [
        # 600 s of start-up (its first report, step 101, less the one step it covered at
        # 10 s), then 3000 s of steps: the orchestrator's running reference of it, $2.55
        ([(101, 610.0), (400, 3600.0)], True, 3000.0),
        # one report: the speed is the trial's measured one (its first life's, 10 s a step)
        ([(101, 610.0)], True, 10.0),
        # no launch event says where it resumed (it is not the trial's first life): all the
        # time up to its first report is taken as start-up, the smaller figure
        ([(101, 610.0), (400, 3600.0)], False, 2990.0),
    ],
)
def test_a_relaunchs_start_up_is_billed_not_referenced(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    reports: list[tuple[int, float]],
    resume_event: bool,
    useful_s: float,
) -> None:
    """An on-demand run starts once per trial: cancel references a relaunch's seconds less its
    start-up, as the orchestrator's ``running_reference`` does (cancel gave it every second it
    billed: $3.06 for the hour, where the orchestrator's figure was $2.55)."""
    now = time.time()
    db, job = _relaunch_job(tmp_path, now, resume_event=resume_event)
    with Store.open_existing(db) as s:
        _report(s, "l-2", now - HOUR, *reports)
    listed = {"l-2": _listed("i-2", "l-2", OD, now - HOUR)}
    monkeypatch.setattr(rec, "reconcile_records", _settling(listed))

    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        second, first = s.get_instance("l-2"), s.get_instance("l-1")
    assert second.market_seconds == pytest.approx(HOUR, abs=30)  # billed: every second
    assert second.on_demand_cost_usd == pytest.approx(useful_s * OD / HOUR, rel=1e-9)
    assert first.on_demand_cost_usd == 0.85  # closed by its orchestrator: untouched
    # the orchestrator's own figure for the life at its last report: never less
    (step0, at0), (step1, at1) = reports[0], reports[-1]
    life = Life("l-2", "i-2", listed["l-2"].offer, 0.0, 100, 1, max_step=step1,
                first_report_at=at0, first_report_step=step0)  # fmt: skip
    orchestrator = running_reference(life, [(at1, 0.9)], step1, 10.0)
    assert second.on_demand_cost_usd == (
        pytest.approx(orchestrator, rel=1e-9) if resume_event else pytest.approx(2.5415)
    )
    assert second.on_demand_cost_usd <= orchestrator + 1e-12
    assert _agree(db, job)["on_demand_cost_usd"] == pytest.approx(
        0.85 + useful_s * OD / HOUR, rel=1e-9
    )


def test_a_dead_orchestrators_idle_time_after_the_last_report_is_not_referenced(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestrator died an hour into a trial's first life; its instance ran on, unseen,
    for two more hours until the cancel. Billed: 3 h. Referenced: the hour of reported work,
    its start-up included (its first life: an on-demand run pays that start-up too); a life
    that never reported (died in its start-up) none, as its orchestrator's bill would give it
    (no step kept). Was 3 h and 1 h of reference."""
    now = time.time()
    db, job = _cloud_job(
        tmp_path,
        None,
        [
            {"id": "l-idle", "state": "running", "launched_at": now - 3 * HOUR},
            {"id": "l-mute", "state": "running", "launched_at": now - HOUR},
        ],
    )
    with Store.open_existing(db) as s:
        # a start-up of 590 s (step 1 at 600 s), then 10 s a step to step 300
        _report(s, "l-idle", now - 3 * HOUR, (1, 600.0), (300, HOUR - 10), market=False)
    listed = {
        "l-idle": _listed("i-1", "l-idle", OD, now - 3 * HOUR),
        "l-mute": _listed("i-2", "l-mute", OD, now - HOUR),
    }
    monkeypatch.setattr(rec, "reconcile_records", _settling(listed))

    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        idle, mute = s.get_instance("l-idle"), s.get_instance("l-mute")
    assert idle.market_seconds == pytest.approx(3 * HOUR, abs=30)
    assert idle.cost_usd == pytest.approx(3 * 0.9, abs=0.01)
    assert idle.on_demand_cost_usd == pytest.approx((HOUR - 10) * OD / HOUR, rel=1e-9)
    assert mute.cost_usd == pytest.approx(0.9, abs=0.01) and mute.on_demand_cost_usd == 0.0
    assert _agree(db, job)["on_demand_cost_usd"] == pytest.approx((HOUR - 10) * OD / HOUR, rel=1e-9)


@pytest.mark.parametrize("taken", [True, False])
def test_a_life_the_provider_took_is_referenced_up_to_its_checkpoint(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, taken: bool
) -> None:
    """A first life AWS revoked after 30 min (free: within its first hour), found ended by the
    cancel of its dead orchestrator: it reported up to step 180 at 10 s a step, but kept only
    its checkpoint at step 100; the orchestrator's bill would reference those 1000 s ($0.85),
    cancel referenced all 1800 ($1.53). Not ``taken`` yet, but noticed (its interruption
    notice recorded) when its orchestrator died: its work past the checkpoint is lost too."""
    now = time.time()
    started = now - 2 * HOUR
    db, job = _cloud_job(
        tmp_path, None, [{"id": "l-1", "state": "running", "launched_at": started}]
    )
    with Store.open_existing(db) as s:
        (trial,) = s.list_trials(job)
        s.update_trial(trial.id, checkpoint_step=100)
        _report(s, "l-1", started, (1, 10.0), (100, 1000.0), (180, 1800.0))
        if not taken:
            s.add_event(job, "notice", started + 1790, trial.id, "l-1", deadline=started + 1910)
    listed = {"l-1": _listed("i-1", "l-1", OD, started)}
    ended = {"l-1": started + 1800} if taken else {}
    monkeypatch.setattr(rec, "reconcile_records", _settling(listed, ended))

    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        row = s.get_instance("l-1")
    assert row.on_demand_cost_usd == pytest.approx(0.85, rel=1e-9)
    assert _agree(db, job)["on_demand_cost_usd"] == pytest.approx(0.85, rel=1e-9)
    if not taken:  # terminated by the cancel: billed up to now
        assert row.market_seconds == pytest.approx(2 * HOUR, abs=30)
        return
    assert row.market_seconds == pytest.approx(1800.0)
    assert row.cost_usd == 0.0  # AWS: revoked within its first hour
    life = Life("l-1", "i-1", listed["l-1"].offer, 0.0, 0, 1, max_step=180,
                first_report_at=10.0, first_report_step=1)  # fmt: skip
    cost, od, _ = life_cost(life, [(1800.0, 0.9)], rule_for("aws"), True, 100, 10.0)
    assert (row.cost_usd, row.on_demand_cost_usd) == (cost, pytest.approx(od, rel=1e-9))
