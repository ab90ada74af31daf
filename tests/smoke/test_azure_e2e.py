"""`spotwise tune` on Azure end to end, without a network: the real orchestrator (in this
process, through ``spotwise.jobs.tune``, the core of the CLI command) against the Resource
Manager fake of ``tests/fixtures/azure/fake_arm.py`` (served through ``responses``, so the real
azure-mgmt-compute pipeline runs), with an instance emulator behind the fake.

Every VM the fake creates runs the real agent (``python -m spotwise.providers.azure_agent
--launch FILE``) on the launch spec inside the custom data the fake received, with a local
Instance Metadata Service for Scheduled Events. Checkpoints and the trials' channel live in a
``file://`` folder. Once a trial has checkpointed, its VM is evicted: Scheduled Events lists a
``Preempt`` (``NotBefore`` 4 s on), the agent SIGTERMs the trial (it checkpoints and exits), and
at ``NotBefore`` the fake removes the VM (``evictionPolicy: Delete``). The orchestrator must
relaunch the trial, which resumes from its checkpoint; the job must finish with every trial
completed once, a non-zero bill and no VM of ours left.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest
import responses
from cloudfakes import AzureCredential, azure_config, fake_arm
from e2e_common import STEPS, check_finished_run, tune_cli_fails, write_job
from vm_emulator import Machine, VmEmulator

TOKEN = "eyJ0eXAiOiJKV1Qi.AZURE-E2E-TEST-TOKEN.never-shown"
_PAYLOAD = re.compile(r"echo '([A-Za-z0-9+/=]+)' \| base64 -d")


class EmulatedARM(fake_arm.FakeARM):
    """The fake, with VMs behind it: a PUT boots one, a DELETE (ours) or an eviction powers it
    off; creation times are real so the bill is."""

    emulator: VmEmulator

    def _vm(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        vm = super()._vm(name, body)
        vm["properties"]["timeCreated"] = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
        return vm

    def _take_due(self) -> None:
        for m in self.emulator.due():
            if m.name in self.vms:
                self.evict(m.name)

    def _put(self, request: Any) -> Any:
        self._take_due()
        body = json.loads(request.body)
        out = super()._put(request)
        name = re.search(r"/virtualMachines/([^/?]+)", request.url).group(1)  # type: ignore[union-attr]
        if name not in self.emulator.machines:
            script = base64.b64decode(body["properties"]["osProfile"]["customData"]).decode()
            payload = _PAYLOAD.search(script).group(1)  # type: ignore[union-attr]
            spec = json.loads(base64.b64decode(payload))
            self.emulator.boot(name, spec, "SPOTWISE_AZURE_IMDS_URL")
        return out

    def _delete(self, request: Any) -> Any:
        out = super()._delete(request)
        self.emulator.deleted(re.search(r"/virtualMachines/([^/?]+)", request.url).group(1))  # type: ignore[union-attr]
        return out

    def _get(self, request: Any) -> Any:
        self._take_due()
        return super()._get(request)

    def _list(self, request: Any) -> Any:
        self._take_due()
        return super()._list(request)

    def scheduled_events(self, m: Machine, method: str, path: str, body: bytes) -> tuple[int, str]:
        """The Instance Metadata Service of machine ``m``: Scheduled Events only."""
        if not path.startswith("/metadata/scheduledevents?api-version="):
            return 404, "not found"
        events = []
        if m.reclaim_at is not None:
            events.append(
                {
                    "EventId": "602d9444-d2cd-49c7-8624-8643e7171297",
                    "EventStatus": "Scheduled",
                    "EventType": "Preempt",
                    "ResourceType": "VirtualMachine",
                    "Resources": [m.name],
                    "NotBefore": formatdate(m.reclaim_at, usegmt=True),
                    "Description": "",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                }
            )
        return 200, json.dumps({"DocumentIncarnation": 1 + len(events), "Events": events})


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatedARM]:
    """The fake with its emulator; the orchestrator's Azure client gets a fixed test token."""
    monkeypatch.setattr(
        "spotwise.providers.azure.default_credential", lambda: AzureCredential(TOKEN)
    )
    fake = EmulatedARM()
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        fake.install(rs)
        fake.emulator = VmEmulator(
            tmp_path / "vms", "spotwise.providers.azure_agent", fake.scheduled_events
        )
        with fake.emulator:
            yield fake


def _provider(fake: EmulatedARM, **options: str) -> dict[str, Any]:
    opts = {**azure_config(fake).options, "poll_s": "0.2"}
    opts.pop("artifacts", None)
    opts.update(options)
    return {
        "name": "azure",
        "regions": ["eastus"],
        "instance_types": ["Standard_E8s_v5"],
        "markets": ["spot"],
        "options": opts,
    }


@pytest.mark.parametrize("artifacts", [False, True])
def test_tune_with_a_local_checkpoint_folder_fails_before_any_vm_is_created(
    cloud: EmulatedARM, tmp_path: Path, capsys: pytest.CaptureFixture[str], artifacts: bool
) -> None:
    """Even with a shared artifacts folder: it only moves the trial's events, and checkpoints
    on the VM's own disk would be lost with it."""
    extra = {"artifacts": (tmp_path / "art").as_uri()} if artifacts else {}
    spec = write_job(tmp_path, _provider(cloud, **extra), str(tmp_path / "ckpt"))
    line = tune_cli_fails(spec, tmp_path, capsys)
    assert line.startswith(
        "error: spec field 'checkpoint.location': azure: the trial's checkpoint location"
    ), line
    assert "for events only" not in line
    assert ("only moves the trial's events" in line) is artifacts
    assert cloud.vms == {} and cloud.emulator.machines == {}
    assert not [c for c in cloud.rs.calls if c.request.method == "PUT"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tune_on_azure_survives_an_eviction_and_leaves_nothing_running(
    cloud: EmulatedARM, tmp_path: Path
) -> None:
    from spotwise import jobs

    spec = write_job(tmp_path, _provider(cloud), (tmp_path / "ckpt").as_uri())
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    cloud.emulator.preempt_after_checkpoint(lead_s=4.0)
    t0 = time.monotonic()
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    print(f"azure e2e: tune took {time.monotonic() - t0:.1f} s")
    # Azure bills to the second and refunds nothing: once the trial has left, spotwise
    # releases the noticed VM itself (unless Azure was quicker)
    ended = ("released on notice", "revoked")
    hit, _ = check_finished_run(summary, cloud.emulator, db, TOKEN, ended=ended)
    assert hit.gone and hit.name not in cloud.vms
    # the launch spec carried the trial's folder and no controller path or credential
    assert hit.spec["artifacts"] == hit.spec["env"]["SPOTWISE_CHECKPOINT_URI"]
    assert "SPOTWISE_STOP_FILE" not in hit.spec["env"] and hit.spec["argv"][0] == "python"
    ours = [n for n, vm in cloud.vms.items() if vm.get("tags", {}).get("spotwise:managed")]
    assert ours == []
    assert summary["best"]["metric"] == pytest.approx(1 - 1 / (STEPS + 1))
