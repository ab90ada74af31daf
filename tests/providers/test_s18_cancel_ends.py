"""`spotwise cancel` of a GCP / Azure job whose orchestrator died: to when each record is billed
(review-ae F3, F4; session 18, helper D).

A VM the cloud stopped (GCE ``TERMINATED``: preempted with ``STOP``, or powered off by its agent
after its trial) or deallocated (an Azure Spot eviction with ``Deallocate``) bills no compute
since: cancel still deletes it (its disk), but bills it to when it stopped, ``revoked`` when the
cloud took it. A GCP Spot VM deleted on preemption is gone, but GCE keeps the preemption (and
delete) operation: its record is closed ``ended`` at that time. Where nothing says when an
instance ended (Azure keeps nothing of a deleted VM), it is billed up to the cancel and the
answer says that is an upper bound. Still running, or stopped but allocated (Azure): up to now.

The reviewer's numbers: a g2-standard-4 Spot VM at 0.28184 $/h preempted 30 min after it
started, cancelled 3 days later, costs ~$0.14, not ~$20.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import responses
from cloudfakes import (
    AzureCredential,
    Launches,
    azure_config,
    fake_arm,
    fake_gce,
    gcp_config,
    gcp_credentials,
)
from test_azure import LAUNCHES as AZURE_LAUNCHES
from test_gcp import LAUNCHES as GCP_LAUNCHES

from spotwise import jobs
from spotwise.planner.reconcile import Held, reconcile_records
from spotwise.providers.base import Market, our_tags
from spotwise.providers.registry import cloud_module
from spotwise.spec import load_stored_spec, parse_spec
from spotwise.store import Store

TOKEN = "s18-cancel-ends-token"
T0 = datetime.fromisoformat(fake_gce.T0).timestamp()  # when the fakes say each VM was created
CANCEL = T0 + 3 * 86400  # the cancel runs 3 days later
GCP_PRICE, AZURE_PRICE = GCP_LAUNCHES.price_per_hour, AZURE_LAUNCHES.price_per_hour


def at(seconds: float) -> str:
    """T0 + ``seconds`` as the clouds write a time (RFC 3339)."""
    return datetime.fromtimestamp(T0 + seconds).astimezone().isoformat()


@dataclass
class Fakes:
    gce: Any
    arm: Any


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fakes]:
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials", lambda: (gcp_credentials(TOKEN), "proj-1")
    )
    monkeypatch.setattr(
        "spotwise.providers.azure.default_credential", lambda: AzureCredential(TOKEN)
    )
    monkeypatch.setattr("spotwise.release.wall_now", lambda: CANCEL)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        yield Fakes(fake_gce.FakeGCE().install(rs), fake_arm.FakeARM().install(rs))


class Job:
    """A job in a store whose orchestrator died, on GCP (``termination_action``) or Azure
    (``eviction_policy``), and its launches made as the orchestrator makes them."""

    def __init__(self, tmp_path: Path, fakes: Fakes, cloud: str, action: str) -> None:
        self.cloud, self.db = cloud, f"sqlite:///{tmp_path / 'state.db'}"
        if cloud == "gcp":
            opts = {**gcp_config().options, "termination_action": action}
        else:
            opts = {**azure_config(fakes.arm).options, "eviction_policy": action}
        spec = parse_spec(
            {
                "name": "ends",
                "command": ["python", "t.py"],
                "metric": {"name": "m", "direction": "maximize"},
                "steps": 2,
                "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
                "providers": [{"name": cloud, "options": opts}],
            }
        )
        with Store.open(self.db) as s:
            job = s.create_job("ends", spec.model_dump_json(), "job.yaml", "greedy", "max")
            self.trial = s.add_trial(job.id, 0, {"x": 0.5}).id
            s.update_job(job.id, state="running", pid=0)  # its orchestrator is gone
        self.id = job.id

    def launch(self, n: int = 1) -> str:
        """Launch ``l-<n>`` as the orchestrator does (recorded before the call); its id."""
        launches: Launches = GCP_LAUNCHES if self.cloud == "gcp" else AZURE_LAUNCHES
        lid = f"l-s18d{n:04d}"
        with Store.open_existing(self.db) as s:
            spec = load_stored_spec(s.get_job(self.id).spec_json)
            offer = launches.offer()
            s.record_launch(
                id=lid,
                job_id=self.id,
                trial_id=self.trial,
                provider=self.cloud,
                region=offer.region,
                zone=offer.zone,
                instance_type=offer.instance_type,
                market="spot",
                offer_key=offer.key,
                price_per_hour=offer.price_per_hour,
                requested_at=T0 - 30,
            )
        from spotwise.planner.backend import provider_config

        prov = cloud_module(self.cloud).open_provisioner(provider_config(spec.providers[0]))
        prov.poll_interval_s = 0.0
        req = replace(launches.request(lid, Market.SPOT), tags=our_tags(self.id, self.trial, lid))
        iid = str(prov.launch(req).instance_id)
        with Store.open_existing(self.db) as s:
            s.update_instance(lid, provider_instance_id=iid, launched_at=T0, state="running")
        return iid

    def cancel(self) -> dict[str, Any]:
        return jobs.cancel(self.id, db=self.db)

    def row(self, n: int = 1) -> Any:
        with Store.open_existing(self.db) as s:
            return s.get_instance(f"l-s18d{n:04d}")

    def cost(self) -> float:
        with Store.open_existing(self.db) as s:
            return float(s.get_job(self.id).cost_usd)


def _gce_key(iid: str) -> tuple[str, str]:
    zone, name = iid.split("/")
    return zone, name


# ---- F3: a stopped / deallocated VM is deleted, and billed to when it stopped ----------------
def test_a_gcp_vm_preempted_with_stop_is_billed_to_its_preemption(
    fakes: Fakes, tmp_path: Path
) -> None:
    job = Job(tmp_path, fakes, "gcp", "STOP")
    iid = job.launch()
    fakes.gce.preempt(*_gce_key(iid), at=at(1800))  # 30 min in; the cancel: 3 days later

    out = job.cancel()

    assert out["terminated_instances"] == [iid] and fakes.gce.instances == {}  # its disk too
    assert [r["outcome"] for r in out["records"]] == ["terminated"]
    row = job.row()
    assert row.ended_at == pytest.approx(T0 + 1800, abs=1)
    assert row.market_seconds == pytest.approx(1800)
    assert row.cost_usd == pytest.approx(GCP_PRICE / 2)  # $0.14092, not ~$20.4
    assert job.cost() == pytest.approx(0.14092, abs=1e-5)


def test_a_gcp_vm_preempted_with_stop_in_its_first_minute_is_free(
    fakes: Fakes, tmp_path: Path
) -> None:
    """Taken by GCE within its first minute: not billed (revoked reaches the bill)."""
    job = Job(tmp_path, fakes, "gcp", "STOP")
    iid = job.launch()
    fakes.gce.preempt(*_gce_key(iid), at=at(40))

    job.cancel()

    row = job.row()
    assert row.ended_at == pytest.approx(T0 + 40, abs=1) and row.cost_usd == 0.0


def test_a_gcp_vm_its_agent_powered_off_is_billed_to_its_stop(fakes: Fakes, tmp_path: Path) -> None:
    """The agent's own power-off, 10 min after its trial: no compute since (README), no
    preemption: billed to ``lastStopTimestamp``, the 60 s minimum applies (not revoked)."""
    job = Job(tmp_path, fakes, "gcp", "STOP")
    first, second = job.launch(1), job.launch(2)
    fakes.gce.stop(*_gce_key(first), at=at(2400))
    fakes.gce.stop(*_gce_key(second), at=at(40))

    out = job.cancel()

    assert sorted(out["terminated_instances"]) == sorted([first, second])
    assert job.row(1).ended_at == pytest.approx(T0 + 2400, abs=1)
    assert job.row(1).cost_usd == pytest.approx(GCP_PRICE * 2400 / 3600)
    assert job.row(2).cost_usd == pytest.approx(GCP_PRICE * 60 / 3600)  # not free: not taken


def test_a_running_gcp_vm_is_still_billed_up_to_the_cancel(fakes: Fakes, tmp_path: Path) -> None:
    job = Job(tmp_path, fakes, "gcp", "STOP")
    iid = job.launch()

    out = job.cancel()

    assert out["terminated_instances"] == [iid]
    assert job.row().ended_at == pytest.approx(CANCEL, abs=1)
    assert job.row().cost_usd == pytest.approx(GCP_PRICE * 72)


def test_an_azure_vm_evicted_with_deallocate_is_billed_to_its_eviction(
    fakes: Fakes, tmp_path: Path
) -> None:
    job = Job(tmp_path, fakes, "azure", "Deallocate")
    name = job.launch()
    fakes.arm.evict(name, at=at(1800))  # the deallocation's ProvisioningState time

    out = job.cancel()

    assert out["terminated_instances"] == [name] and fakes.arm.vms == {}
    row = job.row()
    assert row.ended_at == pytest.approx(T0 + 1800, abs=1)
    assert row.cost_usd == pytest.approx(AZURE_PRICE / 2)  # not 72 h of it ($4.51)
    assert "billed up to now" in out["message"] and "does not say" not in out["message"]


def test_an_azure_vm_deallocated_at_an_unknown_time_is_billed_to_now_and_says_so(
    fakes: Fakes, tmp_path: Path
) -> None:
    job = Job(tmp_path, fakes, "azure", "Deallocate")
    name = job.launch()
    fakes.arm.evict(name)  # an instance view without a time

    out = job.cancel()

    assert job.row().cost_usd == pytest.approx(AZURE_PRICE * 72)
    assert out["records"][0]["note"] == (
        f"azure took {name} but does not say when: billed up to now"
    )
    assert out["records"][0]["note"] in out["message"]


def test_an_azure_vm_stopped_but_allocated_is_still_billed_up_to_the_cancel(
    fakes: Fakes, tmp_path: Path
) -> None:
    """Powered off from inside, not deallocated: Azure still bills it (states-billing)."""
    job = Job(tmp_path, fakes, "azure", "Deallocate")
    name = job.launch()
    fakes.arm._set_power(name, "stopped", at=at(1800))

    job.cancel()

    assert fakes.arm.vms == {}
    assert job.row().cost_usd == pytest.approx(AZURE_PRICE * 72, rel=1e-4)


def test_reconcile_settles_a_stopped_vm_with_its_stop_and_whether_it_was_taken(
    fakes: Fakes, tmp_path: Path
) -> None:
    """What cancel's bill rests on: each record's ``ended_at`` and ``revoked``."""
    gcp = Job(tmp_path, fakes, "gcp", "STOP")
    g1, g2 = gcp.launch(1), gcp.launch(2)
    fakes.gce.preempt(*_gce_key(g1), at=at(1800))
    fakes.gce.stop(*_gce_key(g2), at=at(600))
    with Store.open_existing(gcp.db) as s:
        spec = load_stored_spec(s.get_job(gcp.id).spec_json)
    held = [Held(f"l-s18d{n:04d}", "gcp", "us-central1", i) for n, i in ((1, g1), (2, g2))]

    res = reconcile_records(spec, gcp.id, held, now=CANCEL)

    got = {r.instance_id: (r.outcome, r.ended_at, r.revoked) for r in res.records}
    assert got == {
        g1: ("terminated", pytest.approx(T0 + 1800, abs=1), True),
        g2: ("terminated", pytest.approx(T0 + 600, abs=1), False),
    }


# ---- F4: a VM gone while the orchestrator was dead ----------------------------------------
def test_a_gcp_vm_deleted_on_preemption_is_billed_to_its_preemption(
    fakes: Fakes, tmp_path: Path
) -> None:
    job = Job(tmp_path, fakes, "gcp", "DELETE")
    iid = job.launch()
    fakes.gce.preempt(*_gce_key(iid), at=at(1800))
    assert fakes.gce.instances == {}  # gone; GCE keeps its operations

    out = job.cancel()

    assert out["terminated_instances"] == []
    assert [(r["outcome"], r["instance_id"]) for r in out["records"]] == [("ended", iid)]
    assert "1 already ended" in out["message"] and "upper bound" not in out["message"]
    row = job.row()
    assert row.ended_at == pytest.approx(T0 + 1800, abs=1)
    assert row.cost_usd == pytest.approx(GCP_PRICE / 2)
    assert job.cost() == pytest.approx(0.14092, abs=1e-5)


def test_a_gcp_vm_deleted_on_preemption_in_its_first_minute_is_free(
    fakes: Fakes, tmp_path: Path
) -> None:
    """Settled `ended` and taken from its preempted operation, it is billed as a life GCE took:
    free in its first minute (it was billed the 60 s minimum: the record's `revoked` did not
    reach the bill of a VM no longer listed)."""
    job = Job(tmp_path, fakes, "gcp", "DELETE")
    iid = job.launch()
    fakes.gce.preempt(*_gce_key(iid), at=at(40))
    assert fakes.gce.instances == {}

    job.cancel()

    assert job.row().ended_at == pytest.approx(T0 + 40, abs=1)
    assert job.row().cost_usd == 0.0


def test_a_gcp_vm_deleted_while_its_orchestrator_was_dead_is_billed_to_the_delete(
    fakes: Fakes, tmp_path: Path
) -> None:
    job = Job(tmp_path, fakes, "gcp", "STOP")
    iid = job.launch()
    fakes.gce.delete_at(*_gce_key(iid), at=at(7200))  # by hand, 2 h in

    out = job.cancel()

    assert out["records"][0]["outcome"] == "ended"
    assert job.row().ended_at == pytest.approx(T0 + 7200, abs=1)
    assert job.row().cost_usd == pytest.approx(GCP_PRICE * 2)


def test_reconcile_settles_a_gcp_vm_deleted_on_preemption_as_taken(
    fakes: Fakes, tmp_path: Path
) -> None:
    job = Job(tmp_path, fakes, "gcp", "DELETE")
    iid = job.launch()
    fakes.gce.preempt(*_gce_key(iid), at=at(1800))
    with Store.open_existing(job.db) as s:
        spec = load_stored_spec(s.get_job(job.id).spec_json)

    res = reconcile_records(spec, job.id, [Held("l-s18d0001", "gcp", "us-central1", iid)])

    (one,) = res.records
    assert (one.outcome, one.ended_at, one.revoked) == (
        "ended",
        pytest.approx(T0 + 1800, abs=1),
        True,
    )


def test_a_vm_gone_with_no_trace_is_billed_to_now_as_an_upper_bound(
    fakes: Fakes, tmp_path: Path
) -> None:
    """Azure keeps nothing of a VM evicted with ``Delete``; GCE's operations expire: billed up
    to the cancel, and the answer says it is an upper bound."""
    job = Job(tmp_path, fakes, "azure", "Delete")
    name = job.launch()
    fakes.arm.evict(name)
    assert fakes.arm.vms == {}

    out = job.cancel()

    assert out["records"][0]["outcome"] == "not found"
    note = f"{name} is gone and azure does not say when it ended: billed up to now, an upper bound"
    assert out["records"][0]["note"] == note and note in out["message"]
    assert job.row().cost_usd == pytest.approx(AZURE_PRICE * 72, rel=1e-4)
