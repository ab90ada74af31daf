"""A launch call that failed for a passing reason (a 503, a timeout, a throttled answer) is
made again with the SAME request: same launch id (the providers' idempotency token), attempt,
offer and env. A create that went through before its answer was lost is adopted (one
instance, never terminated, no relaunch hold); one that did not go through is made now;
retries that keep failing end in the cleanup path (look for it by its launch tag, terminate,
bill) and the trial still completes.

The Cloudlike provider honours the client token as the real provisioners do (a second call
with a token a create used returns that instance)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from orch_fakes import UNAVAILABLE
from test_budget_review import Prov, _ledger, usd
from test_launch_hiccups import _run
from test_provider_hiccups import _run as run_cloudlike

from spotwise.planner import actions
from spotwise.planner.launch_retry import PASSED_OVER_PASSES, SameRequest
from spotwise.planner.policy import Launch, Phase, SetCheckpointEvery
from spotwise.planner.runstate import TrialRun, control_file
from spotwise.providers.base import (
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Offer,
    our_tags,
)
from spotwise.sdk_io import read_control
from spotwise.store import Store

FAILED_LAUNCHS = "the failed launch's instance"


def _events(db: str, job: str, kind: str) -> list[dict[str, Any]]:
    with Store.open_existing(db) as store:
        return [e.detail for e in store.events(job, kind=kind)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("lost", ["unavailable_after_create", "throttle_after_create"])
def test_a_create_whose_answer_was_lost_is_adopted_not_terminated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: str
) -> None:
    # the cloud made the instance, then the call failed (a 503, or a throttled try of the
    # SDK's retries): the same request returns that instance, which runs the trial
    summary, prov, db = _run(tmp_path, monkeypatch, **{lost: 1})

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    assert "leftover_instances" not in summary
    ((iid, attempt),) = prov.launches  # one instance made, for one attempt
    assert prov.adopted == [iid]
    job = summary["job_id"]
    with Store.open_existing(db) as store:
        (row,) = store.list_instances(job)
        (trial,) = store.list_trials(job)
        stored_job = store.get_job(job)
        terminated = [e.detail for e in store.events(job, kind="terminated")]
    assert [c for _, c in prov.calls] == [row.id, row.id]  # the same launch id, twice
    assert (row.state, row.provider_instance_id) == ("terminated", iid)
    assert FAILED_LAUNCHS not in [e["reason"] for e in terminated]  # no cleanup killed it
    (launch,) = _events(db, job, "launch")
    assert launch["retry_of_same_request"] == 1 and str(launch["attempt"]) == attempt
    assert trial.state == "completed"
    # the job paid for that one instance, once
    assert row.cost_usd > 0
    assert trial.cost_usd == pytest.approx(row.cost_usd)
    assert stored_job.cost_usd == pytest.approx(row.cost_usd)


@pytest.mark.timeout(120)
def test_a_create_that_did_not_go_through_is_made_by_the_retry_without_a_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a 503 before anything was made, on a provider whose listing lags 30 s (EC2): the
    # cleanup path held the trial that long before trusting an empty listing and relaunching
    summary, prov, db = _run(tmp_path, monkeypatch, unavailable_launches=1, listing_lag_s=30.0)

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    assert summary["wall_seconds"] < 15, summary["wall_seconds"]
    job = summary["job_id"]
    with Store.open_existing(db) as store:
        (row,) = store.list_instances(job)
    assert [c for _, c in prov.calls] == [row.id, row.id]
    assert len(prov.launches) == 1 and prov.adopted == []  # made by the retry
    assert (row.state, row.provider_instance_id) == ("terminated", prov.launches[0][0])
    assert [e["then"] for e in _events(db, job, "launch_interrupted")] == ["retry"]
    assert _events(db, job, "launch")[0]["retry_of_same_request"] == 1


@pytest.mark.timeout(120)
def test_retries_that_keep_failing_end_in_the_cleanup_and_the_trial_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the first call made the instance; its answer and the three retries' were all lost
    summary, prov, db = _run(tmp_path, monkeypatch, unavailable_after_create=4)

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    assert "leftover_instances" not in summary
    (orphan,) = prov.created_then_lost
    assert prov.adopted == [orphan] * 3 and orphan in prov.terminated
    job = summary["job_id"]
    with Store.open_existing(db) as store:
        first, second = store.list_instances(job)
        (trial,) = store.list_trials(job)
        stored_job = store.get_job(job)
    interrupted = _events(db, job, "launch_interrupted")
    assert [e["error"] for e in interrupted] == [UNAVAILABLE] * 4
    assert [e["then"] for e in interrupted] == ["retry"] * 3 + ["cleanup"]
    assert [e.get("retry_of_same_request", 0) for e in interrupted] == [0, 1, 2, 3]
    assert {e["launch"] for e in interrupted} == {first.id}
    assert [c for _, c in prov.calls] == [first.id] * 4 + [second.id]
    # the cleanup found it by its launch tag, terminated and billed it; a new launch ran it
    terminated = _events(db, job, "terminated")
    assert [e["reason"] for e in terminated if e["instances"] == [orphan]] == [FAILED_LAUNCHS]
    assert (first.state, first.end_reason, first.provider_instance_id) == (
        "failed", "failed", orphan,
    )  # fmt: skip
    assert first.cost_usd > 0
    assert second.state == "terminated" and second.provider_instance_id != orphan
    assert trial.state == "completed"
    assert trial.cost_usd == pytest.approx(first.cost_usd + second.cost_usd)
    assert stored_job.cost_usd == pytest.approx(trial.cost_usd)


@pytest.mark.timeout(60)
def test_a_throttled_call_waits_its_pause_before_the_same_request_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(actions, "THROTTLE_PAUSE_WALL_S", 0.6)
    summary, prov, db = run_cloudlike(tmp_path, monkeypatch, 3, throttle_launches=1)

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    (throttled_at,) = prov.throttled_at
    (_, token), (retry, again) = prov.calls
    assert again == token
    assert retry - throttled_at >= 0.6  # the provider's pause, then the same request
    with Store.open_existing(db) as store:
        (row,) = store.list_instances(summary["job_id"])
    assert row.id == token and row.state == "terminated"
    (throttled,) = _events(db, summary["job_id"], "launch_throttled")
    assert (throttled["launch"], throttled["then"]) == (token, "retry")


@pytest.mark.timeout(60)
def test_a_job_cancelled_while_a_retry_waits_cleans_up_its_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the create went through and its answer was lost; the job is cancelled during the
    # retry's pause: the launch (its record still ``requested`` meanwhile) is looked for by
    # its tag, its instance terminated and billed, and nothing is left
    monkeypatch.setattr(actions, "THROTTLE_PAUSE_WALL_S", 60.0)  # no retry before the cancel
    seen: list[tuple[str, str | None, Phase]] = []
    hiccup = actions.Actions._launch_hiccup

    def then_cancel(self: Any, p: Any, e: Exception, now: float) -> None:
        hiccup(self, p, e, now)
        (row,) = self.store.list_instances(self.job_id)
        seen.append((row.state, row.end_reason, p.trial.phase))
        self.cancel_requested = True  # a Ctrl-C, as the signal handler sets it

    monkeypatch.setattr(actions.Actions, "_launch_hiccup", then_cancel)
    summary, prov, db = run_cloudlike(tmp_path, monkeypatch, 30, unavailable_after_create=1)

    assert seen == [("requested", None, Phase.QUEUED)]
    assert summary["state"] == "cancelled", summary
    assert "leftover_instances" not in summary
    (orphan,) = prov.created_then_lost
    assert orphan in prov.terminated and prov.adopted == []
    job = summary["job_id"]
    with Store.open_existing(db) as store:
        (row,) = store.list_instances(job)
    (abandoned,) = _events(db, job, "launch_abandoned")
    assert abandoned["launch"] == row.id
    assert (row.state, row.end_reason, row.provider_instance_id) == ("failed", "failed", orphan)
    assert row.cost_usd > 0


# ---- the request given up on between calls (no job run: the orchestrator's parts) --------
OFFER = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 0.9, 3.06)
OTHER = Offer("aws", "us-east-1", "us-east-1b", "p3.2xlarge", Market.SPOT, 1.2, 3.06)


def _waiting(clock: list[float]) -> tuple[Any, Prov, TrialRun]:
    """An orchestrator whose trial's launch waits for a same-request retry (due since market
    time 100), the create of its first call having gone through: its instance runs."""
    # as the provider lists it: the job's tags, and made by launch L1 (its ClientToken)
    tags = our_tags("j-1", "t-1", "L1")
    inst = Instance("i-1", OFFER, InstanceState.RUNNING, tags, 50.0, launch_identity="L1")
    prov = Prov([inst])
    orch = _ledger(prov, clock, cls=actions.Actions)
    orch.blocked, orch.throttled, orch.quota_full = {}, {}, {}
    orch.cancelled = orch.cancel_requested = False
    t = TrialRun("t-1", 0, {}, 10, 5)
    orch.trials = [t]
    req = LaunchRequest(OFFER, ("python",), {"SPOTWISE_ATTEMPT": "0"}, {}, "L1")
    orch.same_requests["t-1"] = SameRequest(t, req, 40.0, 0, retries=1, retry_at=100.0)
    return orch, prov, t


def test_a_waiting_launch_is_counted_and_given_up_once_the_policy_passes_it_over() -> None:
    clock = [160.0]
    orch, prov, _ = _waiting(clock)
    # the cloud may have made its instance: counted from the first call, as a failed launch
    # not confirmed clean is
    assert orch._running_cost(160.0) == pytest.approx(usd(120.0))
    orch._settle_same_requests(90.0)  # its pause is on: it waits, however long
    for _ in range(PASSED_OVER_PASSES - 1):
        orch._settle_same_requests(160.0)
    assert "t-1" in orch.same_requests and prov.terminated == []
    orch._settle_same_requests(160.0)  # the policy did not launch it: the cleanup path

    assert orch.same_requests == {} and prov.terminated == [["i-1"]]
    assert ("launch_abandoned", "the policy did not launch its trial") in [
        (k, d.get("reason")) for k, d in orch.events
    ]
    rec = orch.store.instances["L1"]
    assert (rec["state"], rec["provider_instance_id"]) == ("failed", "i-1")
    assert rec["cost_usd"] > 0 and orch.spent_usd == pytest.approx(rec["cost_usd"])
    assert orch._running_cost(160.0) == 0.0


def test_a_waiting_launch_is_given_up_when_the_policy_names_another_offer() -> None:
    clock = [160.0]
    orch, prov, _ = _waiting(clock)
    orch.blocked[OTHER.key] = 1e9  # (so that nothing is launched there in this test)

    orch._execute(Launch("t-1", OTHER.key), [OFFER, OTHER], 160.0)

    assert orch.same_requests == {} and prov.terminated == [["i-1"]]
    assert ("launch_abandoned", "the policy chose another offer") in [
        (k, d.get("reason")) for k, d in orch.events
    ]


def test_a_waiting_launch_is_given_up_at_the_drain_and_when_its_trial_is_done() -> None:
    orch, prov, t = _waiting([160.0])
    t.phase = Phase.DONE  # stopped (budget, deadline) or cancelled while it waited
    orch._settle_same_requests(160.0)
    assert orch.same_requests == {} and prov.terminated == [["i-1"]]

    orch, prov, t = _waiting([160.0])
    orch._settle_unconfirmed(160.0)  # the drain
    assert orch.same_requests == {} and prov.terminated == [["i-1"]]
    assert orch.leftover_ids == []


@pytest.mark.timeout(60)
def test_an_instance_that_died_after_its_create_is_a_capacity_refusal_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # review-x F1: the cloud accepted the create, the answer was lost, and the instance ended
    # before it ran (spot capacity lost; Azure provisioning Failed). The same request returns
    # it, ended: no life of the trial (which would count as a crash: two fail the trial), but
    # a refusal of the offer, as if no capacity were there
    summary, prov, db = _run(tmp_path, monkeypatch, dead_after_create=2)

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    job = summary["job_id"]
    errors = _events(db, job, "error")
    refused = _events(db, job, "launch_failed")
    assert errors == []  # no failed life: the trial was never charged a failure
    # the first launch's retry met its ended instance (the second's was given up when the
    # policy went back to the first offer, and cleaned up: nothing of it was left)
    assert [("had already ended" in e["error"], e["retry_of_same_request"]) for e in refused] == [
        (True, 1)
    ]
    with Store.open_existing(db) as store:
        (trial,) = store.list_trials(job)
        rows = store.list_instances(job)
    assert trial.state == "completed"
    assert [r.state for r in rows] == ["failed", "failed", "terminated"]
    assert len(prov.dead) == 2 and rows[2].provider_instance_id not in prov.dead


def test_a_checkpoint_interval_set_while_a_retry_waits_reaches_the_adopted_trial(
    tmp_path: Path,
) -> None:
    # review-x F2: the retry sends the first call's env (its SPOTWISE_CHECKPOINT_EVERY); an
    # interval the policy set meanwhile must reach the trial through its control file
    orch, prov, t = _waiting([160.0])
    p = orch.same_requests["t-1"]
    p.request.env["SPOTWISE_CHECKPOINT_EVERY"] = "5"
    p.request.env["SPOTWISE_RESUME_STEP"] = "0"
    inst = prov.held[0]
    prov.launch = lambda req: inst
    orch._trial_dir = lambda _t: tmp_path
    orch.lives, orch.migrations = {}, 0
    orch.store.update_trial = lambda *a, **k: None
    orch._tick_s = lambda: 1.0

    orch._execute(SetCheckpointEvery("t-1", 50), [OFFER], 160.0)  # while the retry waits
    orch._execute(Launch("t-1", OFFER.key), [OFFER], 160.0)  # the retry: adopted
    assert t.life is not None and t.life.instance_id == inst.instance_id
    assert read_control(str(control_file(tmp_path, t.life.attempt))) == 50


def test_a_crash_during_a_retry_writes_the_bill_of_the_instance_it_terminated() -> None:
    # review-x F5: the crash path terminated and billed the instance into the spend but left
    # its record at $0, so `spotwise cancel` billed it a second time into the trial's cost
    orch, prov, _ = _waiting([160.0])

    def crash(req: LaunchRequest) -> Instance:
        raise KeyboardInterrupt

    prov.launch = crash
    with pytest.raises(KeyboardInterrupt):
        orch._execute(Launch("t-1", OFFER.key), [OFFER], 160.0)
    assert prov.terminated == [["i-1"]]
    rec = orch.store.instances["L1"]
    assert "state" not in rec  # left open: `spotwise cancel` settles it
    assert rec["provider_instance_id"] == "i-1"
    assert rec["cost_usd"] == pytest.approx(orch.spent_usd) and rec["cost_usd"] > 0
    assert rec["market_seconds"] == pytest.approx(110.0)  # from its start (50) to the crash
