"""A provider that throttles or cannot be read for a moment does not fail the job.

A cloud API answers 429 (or EC2's ``RequestLimitExceeded``) when we call it too often: nothing
was done, and the same call succeeds later. Such a launch is not a failure of the trial (two
failures end it): the provider's offers are paused for a doubling while, then the trial is
launched again. A listing of the job's instances that fails (a 500) is retried at the next
pass; only a provider that stays unreadable past a grace ends the job, and the drain still
terminates what runs.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from orch_fakes import LISTING_500, THROTTLED, Cloudlike, cloudlike_backends
from test_orchestrator import GAP_S, T0, TRACE_TICKS, tiny_spec, write_spec, write_trace

from spotwise import jobs
from spotwise.errors import ProviderError
from spotwise.planner import actions, trialbook
from spotwise.providers.base import TAG_JOB
from spotwise.store import Store


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: int = 3, **behaviour: Any
) -> tuple[dict[str, Any], Cloudlike, str]:
    write_trace(tmp_path / "trace.csv", avail_ticks=TRACE_TICKS)  # nothing is revoked
    seen = cloudlike_backends(monkeypatch, **behaviour)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = write_spec(tmp_path, tiny_spec(tmp_path, steps))
    summary = jobs.tune(spec, db=db, run_root=tmp_path / "runs")
    (prov,) = seen
    return summary, prov, db


@pytest.mark.timeout(180)
def test_throttled_launches_pause_the_provider_and_do_not_fail_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(actions, "THROTTLE_PAUSE_WALL_S", 0.5)
    summary, prov, db = _run(tmp_path, monkeypatch, throttle_launches=3)

    assert summary["state"] == "succeeded", summary
    assert summary["completed"] == 1
    # three refusals, then the launch that ran the trial; the pause doubled each time
    assert len(prov.throttled_at) == 3 and len(prov.launches) == 1
    first, second, third = prov.throttled_at
    assert second - first >= 0.5 and third - second >= 1.0
    with Store.open_existing(db) as store:
        job = summary["job_id"]
        (trial,) = store.list_trials(job)
        (row,) = store.list_instances(job)
        throttled = store.events(job, kind="launch_throttled")
        failed = store.events(job, kind="launch_failed")
    assert trial.state == "completed" and trial.cost_usd == row.cost_usd
    assert [e.detail["error"] for e in throttled] == [THROTTLED] * 3 and failed == []
    # the launch was recorded once, before its first call; each refused call was made again
    # with the same request (the same launch id: the providers' idempotency token), and the
    # fourth ran the trial
    assert [e.detail["launch"] for e in throttled] == [row.id] * 3
    assert [c for _, c in prov.calls] == [row.id] * 4
    assert row.state == "terminated"
    assert "leftover_instances" not in summary


@pytest.mark.timeout(180)
def test_a_listing_that_fails_for_a_moment_is_retried_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trialbook, "READ_RETRY_WALL_S", 0.2)
    summary, prov, db = _run(tmp_path, monkeypatch, fail_job_listings=3)

    assert summary["state"] == "succeeded", summary
    assert prov.fail_job_listings == 0  # all three failures were met
    # retried after a doubling pause, not at every pass (0.05 s): a throttling API is not fed
    first, second, third = prov.listing_failed_at
    assert second - first >= 0.2 and third - second >= 0.4
    with Store.open_existing(db) as store:
        errors = store.events(summary["job_id"], kind="error")
    assert [e.detail["message"] for e in errors] == [
        f"reading describe failed, retrying: {LISTING_500}"
    ]


@pytest.mark.timeout(180)
def test_a_provider_unreadable_past_the_grace_fails_the_job_and_the_drain_still_terminates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trialbook, "PROVIDER_READ_GRACE_WALL_S", 0.5)
    write_trace(tmp_path / "trace.csv", avail_ticks=TRACE_TICKS)
    seen = cloudlike_backends(monkeypatch, fail_job_listings=10**9)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    spec = write_spec(tmp_path, tiny_spec(tmp_path, 400))
    with pytest.raises(ProviderError, match="500 Internal error"):
        jobs.tune(spec, db=db, run_root=tmp_path / "runs")

    (prov,) = seen
    (launched, _) = prov.launches[0]
    assert ("terminate", [launched]) in prov.log  # the drain terminated it, unseen
    with Store.open_existing(db) as store:
        (job,) = store.list_jobs()
        (row,) = store.list_instances(job.id)
    assert job.state == "failed" and job.error == LISTING_500
    assert all(not i.holds_resource() for i in prov.inner.describe({TAG_JOB: job.id}))
    assert row.state == "terminated" and row.cost_usd is not None and row.cost_usd > 0


def _two_region_trace(path: Path) -> None:
    """us-east-1a ($1/h) and us-east-1b ($1.5/h) before us-west-2a ($2/h), all available."""
    rows = ["timestamp,availability_zone,instance_type,spot_available,"
            "spot_price_usd_per_hour,on_demand_price_usd_per_hour"]  # fmt: skip
    for i in range(TRACE_TICKS):
        stamp = (T0 + timedelta(seconds=GAP_S * i)).strftime("%Y-%m-%d %H:%M:%S")
        for zone, price in (("us-east-1a", 1.0), ("us-east-1b", 1.5), ("us-west-2a", 2.0)):
            rows.append(f"{stamp},{zone},p3.2xlarge,1,{price},5.0")
    path.write_text("\n".join(rows) + "\n")


@pytest.mark.timeout(180)
def test_a_region_whose_quota_is_used_up_is_avoided_and_the_trial_runs_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quota refused us-east-1a; the retry went to us-east-1b, the same region's quota,
    and the trial failed on its second refusal. Now the region is avoided: one refusal, and
    the trial runs in us-west-2."""
    _two_region_trace(tmp_path / "trace.csv")
    seen = cloudlike_backends(monkeypatch, quota_regions=("us-east-1",))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(write_spec(tmp_path, tiny_spec(tmp_path, 3)), db=db, run_root=tmp_path)

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    (prov,) = seen
    assert prov.quota_refused == ["us-east-1a"]
    with Store.open_existing(db) as store:
        rows = store.list_instances(summary["job_id"])
    assert [(r.zone, r.state) for r in rows] == [
        ("us-east-1a", "failed"),
        ("us-west-2a", "terminated"),
    ]
