"""A SIGTERM while a GCE insert is pending stops the whole job in about a second, the VM the
insert made deleted and billed once, the trials cancelled and resumable (review-bb F1).

Before, the orchestrator waited the insert's zone operation out (here 15 polls 2 s apart: a
30 s create; up to ``operation_timeout_s``, 600 s, on a real cloud) before its loop could hear
the stop: the review measured 74-193 s after the signal under a "~70 s" stderr line, and a
supervisor's SIGKILL meanwhile left every VM of the job billed until `spotwise cancel`.

The real orchestrator (``spotwise.jobs.tune`` in this process: its signal handlers are
installed) against the smoke tests' EmulatedGCE (the real google-cloud-compute client through
``responses``; each VM the fake inserts runs the real agent); the signal is a real SIGTERM
this process sends itself 0.2 s after the first insert was answered."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import responses
from cloudfakes import gcp_credentials

SMOKE = Path(__file__).resolve().parents[1] / "smoke"
if str(SMOKE) not in sys.path:
    sys.path.insert(0, str(SMOKE))

from e2e_common import write_job  # noqa: E402 (needs the path above)
from test_gcp_e2e import PROJECT, TOKEN, EmulatedGCE, _provider  # noqa: E402
from vm_emulator import VmEmulator  # noqa: E402

from spotwise import costs, jobs  # noqa: E402
from spotwise.store import Store  # noqa: E402

SIGNAL_AFTER_S = 0.2
STOPPED_WITHIN_S = 10.0  # about 1 s here; before, the create's 30 s and the trial's stop
MINUTE_OF_E2 = 0.0004465  # e2-standard-2 Spot, GCE's 1-minute minimum: the deleted VM's bill


class HeldInsert(EmulatedGCE):
    """Each insert's zone operation answers RUNNING to ``insert_polls`` waits; the first insert
    sends this process SIGTERM :data:`SIGNAL_AFTER_S` after it was answered."""

    signalled_at: float = 0.0
    timer: threading.Timer | None = None

    def _insert(self, request: Any) -> Any:
        out = super()._insert(request)
        if self.timer is None:
            self.signalled_at = time.monotonic() + SIGNAL_AFTER_S
            self.timer = threading.Timer(SIGNAL_AFTER_S, os.kill, (os.getpid(), signal.SIGTERM))
            self.timer.start()
        return out


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldInsert]:
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials", lambda: (gcp_credentials(TOKEN), PROJECT)
    )
    fake = HeldInsert(project=PROJECT)
    fake.insert_polls = 15  # 2 s apart (the provisioner's poll_interval_s): a 30 s create
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        fake.install(rs)
        fake.emulator = VmEmulator(tmp_path / "vms", "spotwise.providers.gcp_agent", fake.metadata)
        with fake.emulator:
            try:
                yield fake
            finally:
                if fake.timer is not None:
                    fake.timer.cancel()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_sigterm_during_a_pending_insert_stops_the_job_at_once_and_deletes_its_vm(
    held: HeldInsert, tmp_path: Path
) -> None:
    spec = write_job(tmp_path, _provider(), (tmp_path / "ckpt").as_uri(), step_s=0.05)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    took = time.monotonic() - held.signalled_at
    assert held.signalled_at, "the insert never came"
    assert took < STOPPED_WITHIN_S, took
    assert (summary["state"], summary["completed"], summary["resumable"]) == (
        "cancelled",
        0,
        True,
    )
    assert "leftover_instances" not in summary and "error" not in summary, summary
    # nothing of ours is left on the cloud
    assert [n for (_, n), i in held.instances.items() if "spotwise-managed" in i["labels"]] == []
    job = summary["job_id"]
    with Store.open_existing(db) as s:
        (row,) = s.list_instances(job)  # the second trial was never launched
        trials = {t.id: (t.state, t.cost_usd) for t in s.list_trials(job)}
        total = s.get_job(job).cost_usd
        failed = [e for e in s.events(job) if e.kind == "launch_failed"]
    # the launch the stop ended: its VM deleted by the failed-launch cleanup, billed once
    assert (row.state, row.end_reason) == ("failed", "failed")
    assert (row.provider_instance_id or "").startswith(f"us-central1-a/sw-{row.id}-")
    assert row.cost_usd == pytest.approx(MINUTE_OF_E2)
    assert sorted(s for s, _ in trials.values()) == ["cancelled", "cancelled"]  # not failed
    assert total == pytest.approx(MINUTE_OF_E2) == pytest.approx(sum(c for _, c in trials.values()))
    assert summary["cost_usd"] == pytest.approx(MINUTE_OF_E2)
    (event,) = failed
    assert "the job is stopping (a signal)" in event.detail_json
    assert costs.report(since="all", db=db)["leftovers"] == 0
