"""The real loop leaves nothing behind that a provider still bills: an instance a failed launch
started anyway, and an ended instance that still exists (a VM stopped from inside, a Spot VM
preempted with ``STOP``).

The market is the replayed one of ``test_orchestrator`` with the local provisioner, wrapped
(``orch_fakes.Cloudlike``) so that a test can play what a cloud does: a launch the cloud
accepted that then fails (a GCP operation wait that times out, Azure's ``poller.result()``
raising), or an instance whose trial ended and whose VM is stopped, not deleted
(``exists=True`` in a terminal state).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import test_orchestrator
from orch_fakes import LISTING_500, Cloudlike, cloudlike_backends
from test_orchestrator import TRACE_TICKS, spec_dict, tiny_spec, write_spec, write_trace

from spotwise import costs, jobs
from spotwise.errors import ProviderError
from spotwise.planner import orchestrator
from spotwise.providers.base import (
    TAG_JOB,
    Instance,
    InstanceState,
    LaunchRequest,
)
from spotwise.store import Store


def _run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    calm: bool = False,
    gap_s: int | None = None,
    **behaviour: Any,
) -> tuple[dict[str, Any], Cloudlike, str]:
    """``calm``: spot stays available in every zone for the whole trace (nothing is revoked).
    ``gap_s``: the trace's tick in market s (``test_orchestrator.GAP_S``: 30, one wall s at its
    speedup), which is how long an offer that refused a launch is avoided."""
    with monkeypatch.context() as m:
        if gap_s is not None:
            m.setattr(test_orchestrator, "GAP_S", gap_s)
        write_trace(tmp_path / "trace.csv", **({"avail_ticks": TRACE_TICKS} if calm else {}))
    seen = cloudlike_backends(monkeypatch, **behaviour)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = write_spec(tmp_path, tiny_spec(tmp_path, 3))
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    (prov,) = seen
    return summary, prov, db


@pytest.mark.timeout(180)
def test_an_instance_a_failed_launch_started_is_terminated_and_its_attempt_is_used_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, prov, db = _run(tmp_path, monkeypatch, fail_first_launch=True)

    assert summary["state"] == "succeeded", summary
    assert summary["completed"] == 1 and summary["migrations"] == 0, summary
    (first, _), (second, _) = prov.launches
    # the orchestrator found the failed launch's instance by its launch tag and terminated it
    # before launching again: no instance of the job was left running (the last terminate is
    # the usual release of the second one once its trial completed)
    assert prov.log == [
        ("still there at launch", []),
        ("terminate", [first]),
        ("still there at launch", []),
        ("terminate", [second]),
    ]
    # each try has its own attempt number (events, stop and control files, checkpoint folder)
    assert [attempt for _, attempt in prov.launches] == ["0", "1"]
    with Store.open_existing(db) as store:
        job = summary["job_id"]
        rows = store.list_instances(job)
        launches = store.events(job, kind="launch")
        cleanup = store.events(job, kind="terminated")
    assert [r.state for r in rows] == ["failed", "terminated"]
    # the instance the failed launch started was paid for until its terminate: it is billed,
    # and counted in the job's spend (it was closed at $0)
    assert rows[0].cost_usd is not None and rows[0].cost_usd > 0
    assert summary["cost_usd"] == pytest.approx(sum(r.cost_usd or 0 for r in rows), abs=1e-6)
    # the record names the instance and how long it ran; `spotwise report` counts it as a life
    assert rows[0].provider_instance_id == first and rows[0].market_seconds > 0
    replay = costs.report(since="all", until="now", db=db)["replay"]["totals"]  # just written
    assert replay["lives"] == 2
    assert replay["cost_usd"] == pytest.approx(summary["cost_usd"], abs=1e-6)
    assert [e.detail["attempt"] for e in launches] == [1]
    assert [e.detail["instances"] for e in cleanup] == [[first]]
    assert all(not i.holds_resource() for i in prov.inner.describe({TAG_JOB: job}))
    assert second != first


@pytest.mark.timeout(180)
def test_a_failed_launch_whose_cleanup_failed_once_is_settled_at_the_end_of_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed launch's instance could not be listed once (a transient 500): its record
    stayed open and the job ended with it as a leftover (`tune` exited 1) until `spotwise
    cancel`. The drain tries once more; the listing answers, and the record is closed. (The
    loop's own retries wait longer than the job here: test_budget_review covers them.)"""
    from spotwise.planner import launch_cleanup

    monkeypatch.setattr(launch_cleanup, "RELEASE_RETRY_WALL_S", 1e9)
    # what is checked is the record keeping: the trial is relaunched at once, as before the hold
    monkeypatch.setattr(launch_cleanup, "RELAUNCH_HOLD_MAX_WALL_S", 0.0)
    # the refused zone is avoided for a tick from the refusal: 10 wall s here, not the usual
    # trace's 1 s, which a loaded machine spent before the relaunch (it went to that zone again)
    summary, prov, db = _run(
        tmp_path,
        monkeypatch,
        calm=True,
        gap_s=300,
        fail_first_launch=True,
        fail_launch_listings=1,
    )

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    assert "leftover_instances" not in summary and "error" not in summary, summary
    (first, _), (second, _) = prov.launches
    with Store.open_existing(db) as store:
        job = summary["job_id"]
        rows = store.list_instances(job)
        errors = store.events(job, kind="error")
        assert store.list_instances(job, active_only=True) == []
    assert [(r.state, r.end_reason) for r in rows] == [
        ("failed", "failed"),
        ("terminated", "completed"),
    ]
    # found only at the end, the failed launch's instance ran at least as long as the trial's
    # own life (started before it): billed for all of it under AWS's rule (per second, a 60 s
    # minimum: all it ran when quiet; a loaded machine's slower trial ran it past a minute) at
    # its zone's $1/h, not $0. The zone that refused the launch is avoided: the trial moved on.
    failed, ok = rows
    assert failed.market_seconds >= ok.market_seconds > 0
    billed_s = max(60.0, math.ceil(failed.market_seconds))
    assert failed.cost_usd == pytest.approx(billed_s / 3600.0 * failed.price_per_hour)
    assert (failed.zone, failed.price_per_hour) == ("us-east-1a", 1.0) and ok.zone != failed.zone
    assert summary["cost_usd"] == pytest.approx(failed.cost_usd + ok.cost_usd, abs=1e-6)
    assert [e.detail["error"] for e in errors] == [
        f"looking for the failed launch's instance: {LISTING_500}"
    ]
    assert all(not i.holds_resource() for i in prov.inner.describe({TAG_JOB: job}))
    assert first != second


@pytest.mark.timeout(180)
def test_a_failed_launch_whose_cleanup_keeps_failing_is_a_leftover_named_by_its_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Still unconfirmed at the end: the record stays open, `tune` exits 1, and the leftover
    is named as a launch (it was printed as a bare launch id, which looks like an instance id
    that no cloud console knows)."""
    import json

    from typer.testing import CliRunner

    from spotwise.cli.app import app
    from spotwise.planner import launch_cleanup

    # the loop's retries wait longer than the job: the tries counted below are deterministic
    monkeypatch.setattr(launch_cleanup, "RELEASE_RETRY_WALL_S", 1e9)
    # what is checked is the record keeping: the trial is relaunched at once, as before the hold
    monkeypatch.setattr(launch_cleanup, "RELAUNCH_HOLD_MAX_WALL_S", 0.0)
    # the drain's last listing of the whole job fails too (it would find the instance: see
    # test_launch_hiccups), so the job can only name the launch
    monkeypatch.setattr(launch_cleanup.LaunchCleanup, "_sweep_strays", lambda self, now: None)
    write_trace(tmp_path / "trace.csv", avail_ticks=TRACE_TICKS)
    seen = cloudlike_backends(monkeypatch, fail_first_launch=True, fail_launch_listings=10**6)
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = write_spec(tmp_path, tiny_spec(tmp_path, 3))
    done = CliRunner().invoke(app, ["tune", str(spec), "--db", db, "--json"])

    assert done.exit_code == 1, done.output
    summary = json.loads(done.stdout)
    job = summary["job_id"]
    with Store.open_existing(db) as store:
        (row,) = store.list_instances(job, active_only=True)
        errors = store.events(job, kind="error")
    named = f"launch {row.id} (no instance id known)"
    assert summary["state"] == "succeeded" and summary["leftover_instances"] == [named]
    assert summary["error"] == (
        f"1 instance(s) could not be terminated and may still be billed: {named}; "
        f"retry with `spotwise cancel {job}`"
    )
    assert (row.state, row.end_reason, row.provider_instance_id) == (
        "requested",
        "unconfirmed",
        None,
    )
    # tried when the launch failed, and once more at the end of the job (whatever the pause)
    assert [e.detail["error"] for e in errors] == [
        f"looking for the failed launch's instance: {LISTING_500}"
    ] * 2
    seen[0].fail_launch_listings = 0
    out = jobs.cancel(job, db=db)  # what the error says to do: it closes the record
    assert "its record still held instances" in out["message"], out
    with Store.open_existing(db) as store:
        assert store.list_instances(job, active_only=True) == []


@pytest.mark.timeout(180)
def test_a_launch_that_fails_before_starting_anything_still_uses_up_its_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry after a failed launch is not a migration either (no life had started)."""

    def refuse_once(self: Cloudlike, request: LaunchRequest) -> Instance:
        if not self.launches:
            self.launches.append(("", request.env["SPOTWISE_ATTEMPT"]))
            raise ProviderError("gcp: launching: 500 backend error")
        inst: Instance = self.inner.launch(request)
        self.launches.append((inst.instance_id, request.env["SPOTWISE_ATTEMPT"]))
        return inst

    monkeypatch.setattr(Cloudlike, "launch", refuse_once)
    summary, prov, _ = _run(tmp_path, monkeypatch)
    assert summary["state"] == "succeeded" and summary["migrations"] == 0, summary
    assert [attempt for _, attempt in prov.launches] == ["0", "1"]
    # nothing carried the failed launch's tag: the only terminate is the usual release
    assert prov.log == [("terminate", [prov.launches[1][0]])]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fail_terminate", [False, True])
def test_an_ended_instance_that_still_exists_is_terminated_once_after_its_bill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_terminate: bool
) -> None:
    summary, prov, db = _run(
        tmp_path, monkeypatch, stop_when_exited=True, fail_terminate=fail_terminate
    )

    assert summary["state"] == "succeeded", summary
    ((iid, _),) = prov.launches
    assert [ids for what, ids in prov.log if what == "terminate"] == [[iid]]  # once
    with Store.open_existing(db) as store:
        job = summary["job_id"]
        (row,) = store.list_instances(job)
        errors = store.events(job, kind="error")
        cleanup = store.events(job, kind="terminated")
    assert row.cost_usd > 0  # billed as the life it was
    if fail_terminate:  # an error event, never a crash, and never silent
        assert [e.detail["error"] for e in errors] == [
            f"terminating the ended instance ['{iid}'] failed: "
            "gcp: deleting: 403 the caller does not have permission"
        ]
        assert cleanup == []
        # the stopped VM the provider would not delete is still billed (its disk, or an Azure
        # VM that is only stopped): the record is reopened so that the summary, `report` and
        # `cancel` see it (it was closed as "terminated": tune exited 0, nothing could find it)
        assert (row.state, row.end_reason) == ("stopping", "not deleted")
        assert summary["leftover_instances"] == [iid]
        out = jobs.cancel(job, db=db)
        assert "its record still held instances" in out["message"]
        with Store.open_existing(db) as store:
            assert store.list_instances(job, active_only=True) == []
    else:
        assert (row.state, row.end_reason) == ("terminated", "completed")
        assert errors == [] and [e.detail["instances"] for e in cleanup] == [[iid]]


HUNG = """
import time
from spotwise import sdk
sdk.report(1, 0.01)
while True:  # hung: never looks at its stop file, never exits
    time.sleep(1)
"""


@pytest.mark.timeout(120)
def test_a_hung_trial_on_a_provider_that_refuses_terminate_does_not_hang_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled, the trial never exits and every terminate is refused: the job waited for the
    trial forever (SIGTERM only asked it again). It now gives the instance up after its tries,
    ends, and reports the instance as still held."""
    import threading

    from spotwise.planner import ledger

    monkeypatch.setattr(ledger, "STOP_TIMEOUT_WALL_S", 1.0)
    monkeypatch.setattr(ledger, "RELEASE_RETRY_WALL_S", 0.2)
    real_signals = orchestrator.on_signals

    def cancel_soon(request_cancel: Any) -> Any:
        threading.Timer(4.0, request_cancel).start()  # as `spotwise cancel` would, after 4 s
        return real_signals(request_cancel)

    monkeypatch.setattr(orchestrator, "on_signals", cancel_soon)
    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    write_trace(tmp_path / "trace.csv", avail_ticks=TRACE_TICKS)
    seen = cloudlike_backends(monkeypatch, fail_terminate=True)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = spec_dict(tmp_path, command=["python", str(script)], steps=5)
    try:
        summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    finally:
        for p in seen:  # the test's own cleanup: the provider "refused", the process is ours
            p.fail_terminate = False
            p.inner.terminate([i for i, _ in p.launches])
    ((iid, _),) = seen[0].launches
    assert summary["state"] == "cancelled", summary
    assert summary["leftover_instances"] == [iid]
    # RELEASE_TRIES refusals while the job ran, then the drain's last try
    assert seen[0].log.count(("terminate", [iid])) == ledger.RELEASE_TRIES + 1


def test_an_accepted_terminate_is_never_asked_again() -> None:
    """A budget stop is repeated by its guard every tick, and an instance being taken reads
    'shutting-down' for a while: terminate was called on every pass (197 times in review),
    which turns API throttling into failures."""
    from types import SimpleNamespace

    from spotwise.planner.ledger import Ledger
    from spotwise.planner.runstate import Life, TrialRun
    from spotwise.providers.base import Market, Offer

    offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 0.9, 3.06)
    calls: list[list[str]] = []
    led = Ledger.__new__(Ledger)
    led.backend = SimpleNamespace(provisioner=SimpleNamespace(terminate=calls.append))  # type: ignore[assignment]
    life = Life("l-1", "i-1", offer, 0.0, 0, 1)
    t = TrialRun("t-1", 0, {}, 10, 5)
    for _ in range(5):
        assert led._try_release(t, "i-1", life, 0.0, "the instance of a budget stop")
    assert calls == [["i-1"]]


def test_the_drain_deletes_a_noticed_instance_that_ended_stopped() -> None:
    """At the end of a job the drain waits for noticed instances to be taken; one that ends
    stopped or deallocated rather than deleted (GCP ``STOP``, Azure ``Deallocate``) is billed
    and then deleted, because its provider still bills what it holds."""
    from types import SimpleNamespace

    from spotwise.planner.ledger import Ledger
    from spotwise.planner.runstate import Life, TrialRun
    from spotwise.providers.base import Market, Offer

    offer = Offer("gcp", "us-central1", "us-central1-a", "n2-standard-4", Market.SPOT, 0.1, 0.2)
    ended = Instance("us-central1-a/vm-1", offer, InstanceState.REVOKED, ended_at=90.0, exists=True)
    gone = Instance("us-central1-a/vm-2", offer, InstanceState.REVOKED, ended_at=95.0, exists=False)

    class Prov:
        def __init__(self) -> None:
            self.terminated: list[str] = []

        def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
            assert tags == {TAG_JOB: "j-1"}
            return [ended, gone]

        def terminate(self, ids: Sequence[str]) -> None:
            self.terminated += ids

    led = Ledger.__new__(Ledger)
    t1, t2 = TrialRun("t-1", 0, {}, 10, 5), TrialRun("t-2", 1, {}, 10, 5)
    led.lives = {
        ended.instance_id: (t1, Life("l-1", ended.instance_id, offer, 0.0, 0, 0, 120.0)),
        gone.instance_id: (t2, Life("l-2", gone.instance_id, offer, 0.0, 0, 0, 120.0)),
    }
    led.job_id, led.trials, led.opts = "j-1", [], SimpleNamespace(poll_s=0.0)
    led.unconfirmed, led.leftover_ids = {}, []
    # each life's launch record names its instance: the drain's stray sweep knows them
    rows = [
        SimpleNamespace(id=life.launch_id, provider_instance_id=iid)
        for iid, (_, life) in led.lives.items()
    ]
    led.store = SimpleNamespace(list_instances=lambda job_id: rows)  # type: ignore[assignment]
    billed: list[tuple[str, InstanceState, float]] = []
    events: list[tuple[str, dict[str, Any]]] = []

    def bill(t: TrialRun, life: Life, state: InstanceState, at: float, **_: Any) -> None:
        billed.append((life.instance_id, state, at))
        led.lives.pop(life.instance_id)

    led._bill = bill  # type: ignore[method-assign]
    led._event = lambda kind, now, t=None, **d: events.append((kind, d))  # type: ignore[method-assign]
    prov = Prov()
    led.backend = SimpleNamespace(now=lambda: 100.0, provisioner=prov, close=lambda: None)  # type: ignore[assignment]
    led._drain(led.backend)
    assert billed == [
        (ended.instance_id, InstanceState.REVOKED, 90.0),
        (gone.instance_id, InstanceState.REVOKED, 95.0),
    ]
    assert prov.terminated == [ended.instance_id]  # the one the provider still holds, once
    assert events == [
        ("terminated", {"instances": [ended.instance_id], "reason": "the ended instance"})
    ]


@pytest.mark.timeout(180)
def test_an_instance_the_drain_cannot_terminate_is_reported_and_cancel_retries_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider that refuses every terminate: the job still ends, but its record, its
    summary and its error say what may still be billed, and `spotwise cancel` on the finished
    job retries (before, it answered "job already succeeded" and released nothing)."""
    from spotwise.planner import ledger

    # the pause between refused terminates (default 5 s: 15 s of waiting). Three pauses of 1 s
    # keep the life past AWS's 60 s minimum at 30x (90 market s), so that what runs on after
    # the drain is billed on top of it
    monkeypatch.setattr(ledger, "RELEASE_RETRY_WALL_S", 1.0)
    summary, prov, db = _run(tmp_path, monkeypatch, calm=True, fail_terminate=True)

    ((iid, _),) = prov.launches
    job = summary["job_id"]
    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    assert summary.get("leftover_instances") == [iid], summary
    # tried while the job ran (a pause between tries), then once more by the drain
    assert prov.log.count(("terminate", [iid])) == 5
    assert summary["error"] == (
        f"1 instance(s) could not be terminated and may still be billed: {iid}; "
        f"retry with `spotwise cancel {job}`"
    )
    with Store.open_existing(db) as store:
        (row,) = store.list_instances(job, active_only=True)
        assert store.get_job(job).error == summary["error"]
    # billed up to the drain (the provider may bill more), its record still open
    assert (row.state, row.end_reason, row.ended_at) == ("running", "not terminated", None)
    assert row.cost_usd > 0 and summary["cost_usd"] == pytest.approx(row.cost_usd, abs=1e-6)

    time.sleep(0.5)  # it runs on after the drain: cancel bills that too
    out = jobs.cancel(job, db=db)
    assert out["state"] == "succeeded" and out["cancelled"] is False, out
    assert "its record still held instances" in out["message"]
    with Store.open_existing(db) as store:
        assert store.list_instances(job, active_only=True) == []
        after = store.get_instance(row.id)
        assert (after.state, after.end_reason) == ("terminated", "reconciled")
        assert after.cost_usd > row.cost_usd
        # the trial's cost is its life's, as the job's is: `spotwise trials` agrees with both
        (trial,) = store.list_trials(job)
        assert trial.cost_usd == pytest.approx(after.cost_usd)
        assert store.get_job(job).cost_usd == pytest.approx(after.cost_usd)
    # nothing left to do: a second cancel says so
    assert jobs.cancel(job, db=db)["message"] == "job already succeeded"


def test_cancel_keeps_the_record_open_when_the_provider_still_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release that fails leaves the instance records open, so the next cancel retries."""
    from spotwise.planner import reconcile as backend

    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = write_spec(tmp_path, tiny_spec(tmp_path, 1))
    from spotwise.spec import load_spec

    parsed = load_spec(spec)
    with Store.open(db) as store:
        j = store.create_job("t", parsed.model_dump_json(), str(spec), "spot-greedy", "maximize")
        store.update_job(j.id, state="succeeded")
        t = store.add_trial(j.id, 0, {"lr": 0.1})
        row = store.record_launch(
            job_id=j.id,
            trial_id=t.id,
            provider="local",
            region="r",
            zone="r-a",
            instance_type="p3.2xlarge",
            market="spot",
            offer_key="k",
            price_per_hour=1.0,
        )

    def refuse(spec: Any, job_id: str) -> list[str]:
        raise ProviderError("reconcile: terminated 0 instance(s); failed on gcp: 403")

    monkeypatch.setattr(backend, "reconcile", refuse)
    with pytest.raises(ProviderError, match="403"):
        jobs.cancel(j.id, db=db)
    with Store.open_existing(db) as store:
        assert [r.id for r in store.list_instances(j.id, active_only=True)] == [row.id]
