"""A lost launch's VM runs a copy of the trial that saves its last step before the relaunch
loads its checkpoint, on the GCP fake (the real google-cloud-compute client through
``responses``, the agent on emulated VMs).

Found by helper J (s22): with the relaunch hold at 0 (as ``RELAUNCH_HOLD_MAX_WALL_S`` ends in
production after 300 s), the lost VM's copy (attempt 0) finished first; the relaunch loaded
its checkpoint at step 12, wrote only ``done 12`` and exited 0, read as a crash at step 0;
a second relaunch did the same and the trial failed, 1 of 2 completed, its result lost.
Made certain here: the relaunch's VM boots only once the copy has written ``done``. Now the
copy's reports (``events-0.jsonl`` in the trial's artifacts folder) give it its result.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from cloudfakes import fake_gce, gcp_credentials

SMOKE = Path(__file__).resolve().parents[1] / "smoke"
if str(SMOKE) not in sys.path:
    sys.path.insert(0, str(SMOKE))

from e2e_common import STEPS, write_job  # noqa: E402 (needs the path above)
from test_gcp_e2e import PROJECT, TOKEN, _provider  # noqa: E402
from test_launch_leak import FAST_STEP_S, LostLaunch, _ours  # noqa: E402
from vm_emulator import VmEmulator  # noqa: E402

from spotwise import jobs  # noqa: E402
from spotwise.store import Store  # noqa: E402


class CopyFinishesFirst(LostLaunch):
    """:class:`LostLaunch`, whose lost VM runs its copy of the trial (attempt 0, as on a real
    cloud); the relaunch of that trial is made at once but its VM boots only when the copy's
    events (uploaded by its agent) hold its ``done``: it then finds the checkpoint at the
    last step."""

    boots_lost_vm = True
    copy: dict[str, Any] | None = None  # the launch spec of the lost VM (trial, artifacts)
    relaunch_booted: float = 0.0  # when the relaunch's VM booted (0: not yet)

    def _insert(self, request: Any) -> Any:
        body = json.loads(request.body)
        meta = {i["key"]: i["value"] for i in body["metadata"]["items"]}
        spec = json.loads(meta["spotwise-launch"])
        if self.copy is None:
            self.copy = spec
        if spec["trial_id"] != self.copy["trial_id"] or spec["attempt"] == 0:
            return super()._insert(request)
        out = fake_gce.FakeGCE._insert(self, request)  # made now, booted once the copy is done
        zone = re.search(r"/zones/([^/]+)/instances", request.url).group(1)  # type: ignore[union-attr]
        boot = threading.Thread(target=self._boot_later, args=(body["name"], spec, zone))
        boot.daemon = True
        boot.start()
        return out

    def copy_events(self) -> list[dict[str, Any]]:
        """The records the copy's agent uploaded (``events-0.jsonl`` in its artifacts)."""
        assert self.copy is not None
        folder = Path(str(self.copy["artifacts"]).removeprefix("file://"))
        path = folder / "events-0.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def _boot_later(self, name: str, spec: dict[str, Any], zone: str) -> None:
        end = time.monotonic() + 120
        while not any(r.get("type") == "done" for r in self.copy_events()):
            if time.monotonic() > end:
                return
            time.sleep(0.05)
        if (zone, name) in self.instances and name not in self.emulator.machines:
            self.emulator.boot(name, spec, "SPOTWISE_GCE_METADATA_URL", zone=zone)
            self.relaunch_booted = self.relaunch_booted or time.time()


@pytest.fixture
def copying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CopyFinishesFirst]:
    """As ``lossy`` in test_launch_leak: no relaunch hold, no call of the same request."""
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials", lambda: (gcp_credentials(TOKEN), PROJECT)
    )
    monkeypatch.setattr("spotwise.planner.launch_cleanup.RELAUNCH_HOLD_MAX_WALL_S", 0.0)
    monkeypatch.setattr("spotwise.planner.actions.SAME_REQUEST_RETRIES", 0)
    fake = CopyFinishesFirst(project=PROJECT)
    fake.insert_polls = 0
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        fake.install(rs)
        fake.emulator = VmEmulator(tmp_path / "vms", "spotwise.providers.gcp_agent", fake.metadata)
        with fake.emulator:
            yield fake


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_relaunch_completes_with_the_lost_copys_result(
    copying: CopyFinishesFirst, tmp_path: Path
) -> None:
    spec = write_job(tmp_path, _provider(), (tmp_path / "ckpt").as_uri(), step_s=FAST_STEP_S)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    assert copying.copy is not None
    job, lost, trial = summary["job_id"], copying.lost, copying.copy["trial_id"]

    assert lost, "the fault was never injected"
    assert copying.unbooted == ""  # the lost VM ran the copy
    copy = copying.copy_events()
    assert [r["step"] for r in copy if r["type"] == "report"] == list(range(1, STEPS + 1))
    assert copying.relaunch_booted > 0.0
    assert summary["completed"] == 2 and "leftover_instances" not in summary, summary
    # the copy, the other trial and one relaunch: no second relaunch
    assert len(copying.emulator.machines) == 3, sorted(copying.emulator.machines)
    assert _ours(copying) == {}
    with Store.open_existing(db) as s:
        row = next(r for r in s.list_trials(job) if r.id == trial)
        said = s.events(job, kind="result_recovered")
        exits = [e.detail for e in s.events(job, kind="error") if "exit_code" in e.detail]
        lost_row = next(r for r in s.list_instances(job) if r.id == lost)
    assert (row.state.value, row.step, row.checkpoint_step) == ("completed", STEPS, STEPS)
    assert row.final_metric == pytest.approx(1.0 - 1.0 / (STEPS + 1))
    assert [(e.trial_id, e.detail["attempt"], e.detail["from_attempt"]) for e in said] == [
        (trial, 1, 0)
    ]
    assert exits == []  # no attempt's exit was a failure (the copy's was never seen)
    # the lost launch's VM: found by the drain, deleted and billed to its record, as before
    assert (lost_row.state, lost_row.end_reason) == ("failed", "failed")
    assert lost_row.cost_usd > 0.0
