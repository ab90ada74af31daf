"""`spotwise cancel` of a job on several clouds whose orchestrator died: reconcile terminates
what every named provider still runs that the job's launches made, on the GCP and Azure fakes at
once (the real clients, one ``responses`` mock), and nothing of another job."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import responses
from cloudfakes import (
    AzureCredential,
    azure_config,
    fake_arm,
    fake_gce,
    gcp_config,
    gcp_credentials,
    gcp_provisioner,
)
from test_azure import LAUNCHES as AZURE_LAUNCHES
from test_gcp import LAUNCHES as GCP_LAUNCHES

from spotwise.planner.reconcile import reconcile
from spotwise.providers import azure
from spotwise.providers.base import TAG_JOB, Provisioner, our_tags
from spotwise.spec import parse_spec

TOKEN = "multi-reconcile-test-token"
# the launch ids of job-1's records: only what one of them made is the job's to terminate
LAUNCHES = ("launch-g1", "launch-a1", "launch-a2")


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
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        yield Fakes(fake_gce.FakeGCE().install(rs), fake_arm.FakeARM().install(rs))


def _spec(fakes: Fakes) -> Any:
    return parse_spec(
        {
            "name": "multi",
            "command": ["python", "t.py"],
            "metric": {"name": "m", "direction": "maximize"},
            "steps": 2,
            "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
            "providers": [
                {"name": "gcp", "options": dict(gcp_config().options)},
                {"name": "azure", "options": dict(azure_config(fakes.arm).options)},
            ],
        }
    )


def _launch(prov: Provisioner, launches: Any, job: str, token: str) -> str:
    req = replace(launches.request(token), tags=our_tags(job, "t1", token))
    return prov.launch(req).instance_id


def test_reconcile_terminates_the_jobs_instances_on_every_cloud(fakes: Fakes) -> None:
    spec = _spec(fakes)
    g: Provisioner = gcp_provisioner(gcp_config(), gcp_credentials(TOKEN))
    a: Provisioner = azure.open_provisioner(
        azure_config(fakes.arm), credential=AzureCredential(TOKEN)
    )

    launch = _launch
    ours = [
        launch(g, GCP_LAUNCHES, "job-1", "launch-g1"),
        launch(a, AZURE_LAUNCHES, "job-1", "launch-a1"),
        launch(a, AZURE_LAUNCHES, "job-1", "launch-a2"),
    ]
    other = [
        launch(g, GCP_LAUNCHES, "job-2", "launch-g9"),
        launch(a, AZURE_LAUNCHES, "job-2", "launch-a9"),
    ]

    assert sorted(reconcile(spec, "job-1", LAUNCHES)) == sorted(ours)

    def live(job: str) -> list[str]:
        return sorted(
            i.instance_id
            for p in (g, a)
            for i in p.describe({TAG_JOB: job})
            if not i.state.is_terminal()
        )

    assert live("job-1") == []
    assert live("job-2") == sorted(other)
    assert reconcile(spec, "job-1", LAUNCHES) == []  # nothing left: nothing to do


def test_reconcile_deletes_the_jobs_stopped_vms_too(fakes: Fakes) -> None:
    """A VM powered off from inside (the agent's fallback shutdown, a user) is terminal but still
    there: a stopped GCE VM keeps its disk, a stopped Azure VM stays allocated and billed, a
    GCE Spot VM preempted with STOP stays too. `spotwise cancel` must delete them."""
    g: Provisioner = gcp_provisioner(gcp_config(), gcp_credentials(TOKEN))
    a: Provisioner = azure.open_provisioner(
        azure_config(fakes.arm), credential=AzureCredential(TOKEN)
    )
    stopped_g = _launch(g, GCP_LAUNCHES, "job-1", "launch-g1")
    running_a = _launch(a, AZURE_LAUNCHES, "job-1", "launch-a1")
    stopped_a = _launch(a, AZURE_LAUNCHES, "job-1", "launch-a2")
    other_g = _launch(g, GCP_LAUNCHES, "job-2", "launch-g9")
    other_a = _launch(a, AZURE_LAUNCHES, "job-2", "launch-a9")
    for iid in (stopped_g, other_g):
        fakes.gce.instances[tuple(iid.split("/"))]["status"] = "TERMINATED"
    for name in (stopped_a, other_a):
        fakes.arm._set_power(name, "stopped")

    stopped = sorted([stopped_g, running_a, stopped_a])
    assert sorted(reconcile(_spec(fakes), "job-1", LAUNCHES)) == stopped

    assert list(fakes.gce.instances) == [tuple(other_g.split("/"))]
    assert list(fakes.arm.vms) == [other_a]  # another job's, stopped or not, is never touched
    assert reconcile(_spec(fakes), "job-1", LAUNCHES) == []
