"""A launch call that fails for a passing reason (throttled, 5xx, a timeout) says nothing of
the create: it is no failure of the trial. The same request is called again first
(test_launch_same_request.py); once those retries are spent (``retries=0`` here: the cleanup
path alone), whatever it may have started is looked for by its launch tag, terminated and
billed, even where the provider's listing lags behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from orch_fakes import UNAVAILABLE, Cloudlike
from test_provider_hiccups import _run as run_cloudlike

from spotwise.planner import actions, launch_cleanup
from spotwise.store import Store


def _run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    steps: int = 3,
    retries: int | None = None,
    **behaviour: Any,
) -> tuple[dict[str, Any], Cloudlike, str]:
    """test_provider_hiccups' job on a Cloudlike provider, with short pauses: a throttled
    provider's (and a same-request retry's), and that before a failed launch's cleanup is
    tried again; ``retries``: how many times a launch call that failed for a passing reason
    is made again with the same request before the cleanup (default: as shipped)."""
    monkeypatch.setattr(actions, "THROTTLE_PAUSE_WALL_S", 0.2)
    monkeypatch.setattr(launch_cleanup, "RELEASE_RETRY_WALL_S", 0.2)
    if retries is not None:
        monkeypatch.setattr(actions, "SAME_REQUEST_RETRIES", retries)
    return run_cloudlike(tmp_path, monkeypatch, steps, **behaviour)


@pytest.mark.timeout(180)
def test_server_errors_at_launch_do_not_fail_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two plain failures fail a trial (MAX_FAILURES): three 503s in a row must not, and the
    # fourth call, the same request's third retry, is the launch that runs the trial
    summary, prov, db = _run(tmp_path, monkeypatch, unavailable_launches=3)

    assert summary["state"] == "succeeded", summary
    assert summary["completed"] == 1 and len(prov.launches) == 1
    with Store.open_existing(db) as store:
        job = summary["job_id"]
        (trial,) = store.list_trials(job)
        (row,) = store.list_instances(job)
        interrupted = store.events(job, kind="launch_interrupted")
    assert trial.state == "completed"
    assert [e.detail["error"] for e in interrupted] == [UNAVAILABLE] * 3
    assert [e.detail["then"] for e in interrupted] == ["retry"] * 3
    assert [c for _, c in prov.calls] == [row.id] * 4  # one launch id, called four times
    assert (row.state, row.provider_instance_id) == ("terminated", prov.launches[0][0])


@pytest.mark.timeout(180)
def test_an_instance_created_before_a_throttled_answer_is_terminated_and_billed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, prov, db = _run(tmp_path, monkeypatch, retries=0, throttle_after_create=1)

    assert summary["state"] == "succeeded", summary
    assert "leftover_instances" not in summary
    (orphan,) = prov.created_then_throttled
    assert orphan in prov.terminated  # found by its launch tag, not left running
    with Store.open_existing(db) as store:
        job = summary["job_id"]
        (trial,) = store.list_trials(job)
        first, second = store.list_instances(job)
        stored_job = store.get_job(job)
    assert (first.state, first.end_reason, first.provider_instance_id) == (
        "failed", "failed", orphan,
    )  # fmt: skip
    assert first.cost_usd > 0  # it ran: billed (AWS-like 60 s minimum at least)
    assert trial.state == "completed"
    assert trial.cost_usd == pytest.approx(first.cost_usd + second.cost_usd)
    assert stored_job.cost_usd == pytest.approx(trial.cost_usd)


@pytest.mark.timeout(180)
def test_an_empty_listing_inside_the_providers_lag_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the create went through, the answer was lost, and the first listings by its launch tag
    # miss it (EC2 is eventually consistent): it must still be found and terminated
    summary, prov, db = _run(
        tmp_path,
        monkeypatch,
        retries=0,
        throttle_after_create=1,
        hide_launches=2,
        listing_lag_s=1.5,
    )

    assert summary["state"] == "succeeded", summary
    assert "leftover_instances" not in summary
    (orphan,) = prov.created_then_throttled
    assert orphan in prov.terminated and prov.hide_launches == 0
    with Store.open_existing(db) as store:
        first = store.list_instances(summary["job_id"])[0]
        terminated = store.events(summary["job_id"], kind="terminated")
    assert (first.state, first.provider_instance_id) == ("failed", orphan)
    assert first.cost_usd > 0
    # found by its launch's cleanup, looking again inside the lag (not by the drain's sweep)
    assert [e.detail["reason"] for e in terminated if e.detail["instances"] == [orphan]] == [
        "the failed launch's instance"
    ]


@pytest.mark.timeout(180)
def test_a_throttled_launch_that_cannot_be_looked_for_is_named_not_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # listings by launch tag keep failing: the throttled launch may hold an instance, so the
    # job says so (cancel finds it by its tag) instead of closing the record as clean
    monkeypatch.setattr(launch_cleanup, "RELAUNCH_HOLD_MAX_WALL_S", 0.0)  # relaunch at once
    summary, _, db = _run(
        tmp_path, monkeypatch, retries=0, throttle_launches=1, fail_launch_listings=99
    )

    assert summary["completed"] == 1
    with Store.open_existing(db) as store:
        first = store.list_instances(summary["job_id"])[0]
    assert (first.state, first.end_reason) == ("requested", "unconfirmed")
    assert summary["leftover_instances"] == [f"launch {first.id} (no instance id known)"]


@pytest.mark.timeout(180)
def test_the_drain_terminates_and_bills_an_instance_no_listing_of_its_launch_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every listing by launch tag misses it and the provider claims no lag: its record is
    # closed as clean; the drain's listing of the whole job still finds it
    summary, prov, db = _run(
        tmp_path, monkeypatch, retries=0, throttle_after_create=1, hide_launches=99
    )

    assert summary["state"] == "succeeded", summary
    assert "leftover_instances" not in summary
    (stray,) = prov.created_then_throttled
    assert stray in prov.terminated
    with Store.open_existing(db) as store:
        job = summary["job_id"]
        first, second = store.list_instances(job)
        (trial,) = store.list_trials(job)
        terminated = store.events(job, kind="terminated")
        stored_job = store.get_job(job)
    assert [e.detail["reason"] for e in terminated if e.detail["instances"] == [stray]] == [
        "a stray instance"
    ]
    # billed, from its start, to its launch's record, its trial and the job
    assert (first.provider_instance_id, first.state) == (stray, "failed")
    assert first.cost_usd > 0 and first.market_seconds > 0
    assert trial.cost_usd == pytest.approx(first.cost_usd + second.cost_usd)
    assert stored_job.cost_usd == pytest.approx(trial.cost_usd)
    assert summary["cost_usd"] == pytest.approx(stored_job.cost_usd, abs=1e-6)


@pytest.mark.timeout(180)
def test_a_trial_is_not_relaunched_while_its_failed_launch_may_be_running_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the create went through, the answer was throttled, and the first listings of its launch
    # fail: the trial waits until its instance is found and terminated (two copies of a trial
    # write the same checkpoints, and the stray can finish it under the relaunch)
    summary, prov, _ = _run(
        tmp_path, monkeypatch, retries=0, throttle_after_create=1, fail_launch_listings=3
    )

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    (stray,) = prov.created_then_throttled
    assert len(prov.launches) == 2 and prov.fail_launch_listings == 0
    terminated = prov.log.index(("terminate", [stray]))
    relaunched = [i for i, (what, _) in enumerate(prov.log) if what == "still there at launch"][1]
    assert terminated < relaunched
    assert stray not in prov.log[relaunched][1]
