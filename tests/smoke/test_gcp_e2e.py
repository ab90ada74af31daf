"""`spotwise tune` on GCP end to end, without a network: the real orchestrator (in this process,
through ``spotwise.jobs.tune``, the core of the CLI command) against the Compute Engine fake of
``tests/fixtures/gcp/fake_gce.py`` (served through ``responses``, so the real
google-cloud-compute client runs), with an instance emulator behind the fake.

Every instance the fake inserts runs the real agent (``python -m spotwise.providers.gcp_agent
--launch FILE``) on the launch spec the fake received, with a local metadata server for
``instance/preempted`` and the guest attributes. Checkpoints and the trials' channel live in a
``file://`` folder. Once a trial has checkpointed, its instance is preempted: the metadata says
so, the agent SIGTERMs the trial (it checkpoints and exits), and 4 s later the fake records a
``compute.instances.preempted`` operation and deletes the VM (``instanceTerminationAction:
DELETE``). The orchestrator must relaunch the trial, which resumes from its checkpoint; the
job must finish with every trial completed once, a non-zero bill and no VM of ours left.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from cloudfakes import GCP_IMAGE, fake_gce, gcp_credentials
from e2e_common import STEPS, check_finished_run, tune_cli_fails, write_job
from vm_emulator import Machine, VmEmulator, now_rfc3339

TOKEN = "ya29.GCP-E2E-TEST-TOKEN-never-shown"
PROJECT = "proj-1"


class EmulatedGCE(fake_gce.FakeGCE):
    """The fake, with VMs behind it: an insert boots one, a delete (ours or a preemption)
    powers it off; timestamps are real so the bill is."""

    emulator: VmEmulator

    def _resource(self, zone: str, body: dict[str, Any]) -> dict[str, Any]:
        res = super()._resource(zone, body)
        res["creationTimestamp"] = now_rfc3339()
        return res

    def _op(self, zone: str, name: str, kind: str, *, done: bool, error: str = "") -> Any:
        op = super()._op(zone, name, kind, done=done, error=error)
        op["insertTime"] = op["startTime"] = now_rfc3339()
        return op

    def _take_due(self) -> None:
        for m in self.emulator.due():
            if (m.info["zone"], m.name) in self.instances:
                self.preempt(m.info["zone"], m.name)

    def _insert(self, request: Any) -> Any:
        self._take_due()
        status, headers, text = super()._insert(request)
        zone = re.search(r"/zones/([^/]+)/instances", request.url).group(1)  # type: ignore[union-attr]
        body = json.loads(request.body)
        created = (zone, body["name"]) in self.instances
        if status == 200 and created and body["name"] not in self.emulator.machines:
            meta = {i["key"]: i["value"] for i in body["metadata"]["items"]}
            spec = json.loads(meta["spotwise-launch"])
            self.emulator.boot(body["name"], spec, "SPOTWISE_GCE_METADATA_URL", zone=zone)
        return status, headers, text

    def _delete(self, request: Any) -> Any:
        out = super()._delete(request)
        self.emulator.deleted(request.url.split("/instances/")[1].split("?")[0])
        return out

    def _get(self, request: Any) -> Any:
        self._take_due()
        return super()._get(request)

    def _list_instances(self, request: Any) -> Any:
        self._take_due()
        return super()._list_instances(request)

    def _list_ops(self, request: Any) -> Any:
        self._take_due()
        return super()._list_ops(request)

    def metadata(self, m: Machine, method: str, path: str, body: bytes) -> tuple[int, str]:
        """The metadata server of machine ``m``."""
        base = "/computeMetadata/v1/instance/"
        if path == base + "preempted":
            return 200, "TRUE" if m.noticed_at is not None else "FALSE"
        if path == base + "attributes/spotwise-launch":
            return 200, json.dumps(m.spec)
        if method == "PUT" and path == base + "guest-attributes/spotwise/notice":
            self.guest[(m.info["zone"], m.name)] = {"spotwise/notice": body.decode()}
            return 200, ""
        return 404, "not found"


@pytest.fixture
def cloud(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmulatedGCE]:
    """The fake with its emulator; the orchestrator's GCP client gets a fixed test token."""
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials", lambda: (gcp_credentials(TOKEN), PROJECT)
    )
    fake = EmulatedGCE(project=PROJECT)
    fake.insert_polls = 0
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        fake.install(rs)
        fake.emulator = VmEmulator(tmp_path / "vms", "spotwise.providers.gcp_agent", fake.metadata)
        with fake.emulator:
            yield fake


def _provider(**options: str) -> dict[str, Any]:
    opts = {"project": PROJECT, "image": GCP_IMAGE, "poll_s": "0.2", **options}
    return {
        "name": "gcp",
        "regions": ["us-central1"],
        "instance_types": ["e2-standard-2"],
        "markets": ["spot"],
        "options": opts,
    }


@pytest.mark.parametrize("artifacts", [False, True])
def test_tune_with_a_local_checkpoint_folder_fails_before_any_insert(
    cloud: EmulatedGCE, tmp_path: Path, capsys: pytest.CaptureFixture[str], artifacts: bool
) -> None:
    """Even with a shared artifacts folder: it only moves the trial's events, and checkpoints
    on the VM's own disk would be lost with it."""
    extra = {"artifacts": (tmp_path / "art").as_uri()} if artifacts else {}
    spec = write_job(tmp_path, _provider(**extra), str(tmp_path / "ckpt"))
    line = tune_cli_fails(spec, tmp_path, capsys)
    assert line.startswith(
        "error: spec field 'checkpoint.location': gcp: the trial's checkpoint location"
    ), line
    assert "for events only" not in line
    assert ("only moves the trial's events" in line) is artifacts
    assert cloud.instances == {} and cloud.emulator.machines == {}
    assert not [c for c in cloud.rs.calls if c.request.method == "POST"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tune_on_gcp_survives_a_preemption_and_leaves_nothing_running(
    cloud: EmulatedGCE, tmp_path: Path
) -> None:
    from spotwise import jobs

    spec = write_job(tmp_path, _provider(), (tmp_path / "ckpt").as_uri())
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    cloud.emulator.preempt_after_checkpoint(lead_s=4.0)
    t0 = time.monotonic()
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    print(f"gcp e2e: tune took {time.monotonic() - t0:.1f} s")
    # GCE does not bill a VM it preempts in its first minute: wait for it to take the VM
    hit, again = check_finished_run(summary, cloud.emulator, db, TOKEN, ended=("revoked",))

    # GCE took the preempted VM (an operation says so); the trial moved to another zone
    preempted = [o for o in cloud.operations.values() if o["operationType"].endswith("preempted")]
    assert [o["targetLink"].rsplit("/", 1)[-1] for o in preempted] == [hit.name]
    assert again.info["zone"] != hit.info["zone"]
    assert json.loads(cloud.guest[(hit.info["zone"], hit.name)]["spotwise/notice"])["deadline"]
    # the launch spec carried the trial's folder and no controller path or credential
    assert hit.spec["artifacts"] == hit.spec["env"]["SPOTWISE_CHECKPOINT_URI"]
    assert "SPOTWISE_STOP_FILE" not in hit.spec["env"] and hit.spec["argv"][0] == "python"
    # every VM of ours is gone
    ours = [i for i in cloud.instances.values() if i["labels"].get("spotwise-managed") == "true"]
    assert ours == [], [i["name"] for i in ours]
    assert summary["best"]["metric"] == pytest.approx(1 - 1 / (STEPS + 1))
