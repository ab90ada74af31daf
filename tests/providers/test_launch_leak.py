"""A failed launch that may have left a VM, on the GCP fake (the real google-cloud-compute
client through ``responses``).

Review: the GET right after an insert failed (500), and so did the next listing (the failed
launch's discard): the launch's record was closed as ``failed`` while its VM kept running and
billing; the job "succeeded" with no leftover, `spotwise cancel` said "job already succeeded"
and `spotwise report` saw nothing held. And a VM whose launch never answered (the orchestrator
died mid-launch: no instance id, no launch time on its record) was terminated by `cancel` but
billed $0.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import responses
from cloudfakes import fake_gce, gcp_config, gcp_credentials, gcp_provisioner

SMOKE = Path(__file__).resolve().parents[1] / "smoke"
if str(SMOKE) not in sys.path:
    sys.path.insert(0, str(SMOKE))

from e2e_common import write_job  # noqa: E402 (needs the path above)
from test_gcp import LAUNCHES  # noqa: E402
from test_gcp_e2e import PROJECT, TOKEN, EmulatedGCE, _provider  # noqa: E402
from vm_emulator import VmEmulator  # noqa: E402

from spotwise import costs, jobs  # noqa: E402
from spotwise.providers.base import our_tags  # noqa: E402
from spotwise.spec import parse_spec  # noqa: E402
from spotwise.store import Store  # noqa: E402


class LostLaunch(EmulatedGCE):
    """The first GET of an inserted VM answers 500, and so does every listing of that
    launch's VMs (the discard's, under its ``spotwise-launch`` label): the launch fails and
    nothing can confirm that its VM is gone. Listings of the whole job still answer.

    That VM runs no copy of the trial (its agent is not booted: ``boots_lost_vm``): with no
    hold on the relaunch (see ``lossy``) the copy ran beside the relaunch on the trial's one
    checkpoint folder, and on a loaded machine (a trial's torch import taking seconds longer
    in one process than in the other) it saved step 12 before the relaunch loaded its
    checkpoint: the relaunch resumed there with nothing left to report, twice, and the trial
    failed (1 of 2 completed). These tests are about the lost VM's record and bill, which its
    creation time gives, not about a copy of its trial."""

    lost: str = ""  # the launch id whose GET failed
    # whether the first inserted VM boots its agent (launches are made one at a time: the
    # first GET, the one that fails, is of the first insert's VM)
    boots_lost_vm: bool = False
    unbooted: str = ""  # the VM whose agent was not booted

    def _insert(self, request: Any) -> Any:
        if self.boots_lost_vm or self.unbooted:
            return super()._insert(request)
        self.unbooted = json.loads(request.body)["name"]
        return fake_gce.FakeGCE._insert(self, request)  # made, and nothing runs on it

    def _get(self, request: Any) -> Any:
        if not self.lost and "/instances/sw-" in request.url:
            self.lost = request.url.split("/instances/sw-")[1].split("-")[0]
            return fake_gce._err(500, "backendError", "Internal error. Please try again.")
        return super()._get(request)

    def _list_instances(self, request: Any) -> Any:
        if self.lost and self.lost in request.url:
            return fake_gce._err(500, "backendError", "Internal error. Please try again.")
        return super()._list_instances(request)


# wall seconds a step of the job's trials (the e2e tests' 0.3 s leaves time to preempt a trial
# after its checkpoint; nothing here preempts, and only the launch's record and VM are checked)
FAST_STEP_S = 0.05


def _ours(fake: Any) -> dict[str, str]:
    return {
        n: i["status"]
        for (_, n), i in fake.instances.items()
        if i["labels"].get("spotwise-managed") == "true"
    }


@pytest.fixture
def lossy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LostLaunch]:
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials", lambda: (gcp_credentials(TOKEN), PROJECT)
    )
    # the lost launch can never be listed: relaunch its trial at once (the hold would wait
    # out RELAUNCH_HOLD_MAX_WALL_S), as these tests are about its record and its VM (which
    # runs no copy of the trial: LostLaunch.boots_lost_vm)
    monkeypatch.setattr("spotwise.planner.launch_cleanup.RELAUNCH_HOLD_MAX_WALL_S", 0.0)
    # nor is the same request called again (its GET would now answer, and its VM be adopted:
    # see the last test of this part), as these tests are about the cleanup path
    monkeypatch.setattr("spotwise.planner.actions.SAME_REQUEST_RETRIES", 0)
    fake = LostLaunch(project=PROJECT)
    fake.insert_polls = 0
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        fake.install(rs)
        fake.emulator = VmEmulator(tmp_path / "vms", "spotwise.providers.gcp_agent", fake.metadata)
        with fake.emulator:
            yield fake


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_unconfirmed_failed_launch_is_a_leftover_that_cancel_terminates(
    lossy: LostLaunch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.planner.launch_cleanup import LaunchCleanup

    # the drain's last listing of the whole job fails too (it would find the VM: see the
    # next test), so the job can only name the launch, and `cancel` settles it
    monkeypatch.setattr(LaunchCleanup, "_sweep_strays", lambda self, now: None)
    spec = write_job(tmp_path, _provider(), (tmp_path / "ckpt").as_uri(), step_s=FAST_STEP_S)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    job, lost = summary["job_id"], lossy.lost
    assert lost, "the fault was never injected"
    (vm,) = [n for n in _ours(lossy) if n.startswith(f"sw-{lost}-")]
    assert lossy.unbooted == vm  # the VM with no copy of the trial is the lost one
    assert _ours(lossy) == {vm: "RUNNING"}  # the lost launch's VM outlived the job

    # the job names it as a leftover (`tune` exits 1 on that), by its launch (no instance id
    # is known: the drain's last try could not list it either), and its record stays open
    assert summary["completed"] == 2
    named = f"launch {lost} (no instance id known)"
    assert summary["leftover_instances"] == [named]
    assert f"may still be billed: {named}; retry with `spotwise cancel {job}`" in summary["error"]
    with Store.open_existing(db) as s:
        row = next(r for r in s.list_instances(job) if r.id == lost)
        assert (row.state, row.end_reason, row.provider_instance_id) == (
            "requested",
            "unconfirmed",
            None,
        )
    # `spotwise report --check` sees it held, by a finished job: a leftover
    held = costs.report(since="all", db=db)
    assert held["leftovers"] == 1 and [h["job_id"] for h in held["held"]] == [job]

    out = jobs.cancel(job, db=db)
    iid = f"us-central1-a/{vm}"
    assert out["terminated_instances"] == [iid]
    assert out["records"] == [
        {"launch_id": lost, "instance_id": iid, "region": "us-central1", "outcome": "terminated"}
    ]
    assert out["message"] == (
        "job already succeeded; its record still held instances: 1 tagged instance(s) "
        "terminated, 1 instance record(s) closed and billed up to now (1 terminated now)"
    )
    assert _ours(lossy) == {}
    with Store.open_existing(db) as s:
        row = next(r for r in s.list_instances(job) if r.id == lost)
    assert (row.state, row.end_reason, row.provider_instance_id) == (
        "terminated",
        "reconciled",
        iid,
    )
    assert row.launched_at is not None and row.cost_usd > 0.0
    assert costs.report(since="all", db=db)["leftovers"] == 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_drain_finds_the_lost_launchs_vm_by_the_jobs_label(
    lossy: LostLaunch, tmp_path: Path
) -> None:
    """Every listing under the lost launch's label fails, but the drain's last listing of the
    whole job finds its VM: deleted and billed to its launch's record, no leftover."""
    spec = write_job(tmp_path, _provider(), (tmp_path / "ckpt").as_uri(), step_s=FAST_STEP_S)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    job, lost = summary["job_id"], lossy.lost
    assert lost, "the fault was never injected"
    assert lossy.unbooted.startswith(f"sw-{lost}-")  # no copy of the trial ran on it
    assert summary["completed"] == 2 and "leftover_instances" not in summary, summary
    assert _ours(lossy) == {}  # nothing of ours is left
    with Store.open_existing(db) as s:
        row = next(r for r in s.list_instances(job) if r.id == lost)
        trials = s.list_trials(job)
        total = s.get_job(job).cost_usd
    assert (row.state, row.end_reason) == ("failed", "failed")
    assert (row.provider_instance_id or "").startswith(f"us-central1-a/sw-{lost}-")
    assert row.cost_usd > 0.0
    assert total == pytest.approx(sum(t.cost_usd for t in trials))
    assert costs.report(since="all", db=db)["leftovers"] == 0


class LostAnswer(LostLaunch):
    """Only the first GET of the first inserted VM answers 500: the launch's answer is lost
    once, the VM is there (and runs the trial: it is adopted)."""

    boots_lost_vm = True

    def _get(self, request: Any) -> Any:
        if self.lost:
            return EmulatedGCE._get(self, request)
        return super()._get(request)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_same_request_adopts_the_vm_whose_answer_was_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launch is called again with the same request: the insert's ``requestId`` (from the
    launch id) returns the first insert's operation, nothing new is made, and the VM it made
    runs the trial: never deleted by a cleanup, billed once, to its own record."""
    # a cleanup of the lost launch (its listings fail) would hold its trial this long
    monkeypatch.setattr("spotwise.planner.launch_cleanup.RELAUNCH_HOLD_MAX_WALL_S", 20.0)
    monkeypatch.setattr("spotwise.planner.actions.THROTTLE_PAUSE_WALL_S", 0.1)
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials", lambda: (gcp_credentials(TOKEN), PROJECT)
    )
    fake = LostAnswer(project=PROJECT)
    fake.insert_polls = 0
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        fake.install(rs)
        fake.emulator = VmEmulator(tmp_path / "vms", "spotwise.providers.gcp_agent", fake.metadata)
        with fake.emulator:
            spec = write_job(
                tmp_path, _provider(), (tmp_path / "ckpt").as_uri(), step_s=FAST_STEP_S
            )
            db = f"sqlite:///{tmp_path / 'spotwise.db'}"
            summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
            made = sorted(fake.emulator.machines)
    job, lost = summary["job_id"], fake.lost
    assert lost, "the fault was never injected"
    assert summary["completed"] == 2 and "leftover_instances" not in summary, summary
    assert _ours(fake) == {}
    assert len(made) == 2  # one VM a trial: the lost answer's was not made twice
    with Store.open_existing(db) as s:
        row = next(r for r in s.list_instances(job) if r.id == lost)
        rows = s.list_instances(job)
        launches = [e.detail for e in s.events(job, kind="launch")]
        cleaned = [e.detail for e in s.events(job, kind="terminated")]
        total = s.get_job(job).cost_usd
    assert len(rows) == 2
    assert (row.state, row.end_reason) == ("terminated", "completed")
    assert (row.provider_instance_id or "").startswith(f"us-central1-a/sw-{lost}-")
    assert [d.get("retry_of_same_request") for d in launches].count(1) == 1
    assert not [d for d in cleaned if d["reason"] == "the failed launch's instance"]
    assert row.cost_usd > 0.0
    assert total == pytest.approx(sum(r.cost_usd for r in rows))


# ---- a launch that never answered is billed from its VM's creation ---------------------------
@pytest.fixture
def gce(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials", lambda: (gcp_credentials(TOKEN), PROJECT)
    )
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        yield fake_gce.FakeGCE(project=PROJECT).install(rs)


def test_cancel_bills_a_launch_that_never_answered_from_its_vms_creation(
    gce: Any, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    spec = parse_spec(
        {
            "name": "midlaunch",
            "command": ["python", "train.py"],
            "metric": {"name": "m", "direction": "maximize"},
            "steps": 2,
            "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
            "providers": [{"name": "gcp", "options": dict(gcp_config().options)}],
        }
    )
    offer = LAUNCHES.offer()
    created = float(int(time.time()) - 3600)  # the VM exists since an hour ago
    with Store.open(db) as s:
        job = s.create_job("midlaunch", spec.model_dump_json(), "job.yaml", "spot-greedy", "max")
        t = s.add_trial(job.id, 0, {"x": 0.5})
        row = s.record_launch(  # recorded before the call, as the orchestrator does
            job_id=job.id,
            trial_id=t.id,
            provider="gcp",
            region=offer.region,
            zone=offer.zone,
            instance_type=offer.instance_type,
            market=offer.market.value,
            offer_key=offer.key,
            price_per_hour=offer.price_per_hour,
            requested_at=created - 20,
        )
        req = replace(LAUNCHES.request(row.id), tags=our_tags(job.id, t.id, row.id))
        inst = gcp_provisioner(gcp_config(), gcp_credentials(TOKEN)).launch(req)
        # ... and the orchestrator died before the launch answered: no id, no launch time
        s.update_job(job.id, state="running", pid=0)
    zone, name = inst.instance_id.split("/")
    gce.instances[(zone, name)]["creationTimestamp"] = datetime.fromtimestamp(
        created, UTC
    ).isoformat(timespec="milliseconds")

    out = jobs.cancel(job.id, db=db)

    assert out["terminated_instances"] == [inst.instance_id]
    assert [r["outcome"] for r in out["records"]] == ["terminated"]
    assert (zone, name) not in gce.instances
    with Store.open_existing(db) as s:
        (got,) = s.list_instances(job.id)
        total = s.get_job(job.id).cost_usd
    assert (got.state, got.end_reason) == ("terminated", "reconciled")
    assert got.provider_instance_id == inst.instance_id
    assert got.launched_at == created  # the VM's creation, not the request (20 s earlier)
    assert got.ended_at is not None
    seconds = got.ended_at - created
    assert 3600 <= seconds < 3660
    assert got.market_seconds == pytest.approx(seconds)
    # GCP bills by the second, rounded up
    assert got.cost_usd == pytest.approx(math.ceil(seconds) * offer.price_per_hour / 3600.0)
    assert total == pytest.approx(got.cost_usd)
