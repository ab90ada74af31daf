"""A region's quota pause survives a `spotwise resume` (session 20, helper H).

A launch refused for the region's quota (``QuotaError``) pauses launches in that (provider,
region) for 30 min, in the orchestrator's memory: a resumed cloud job asked the region again
on its first pass. Now the refusal's ``launch_failed`` event records the pause (its end in
market time and its length in wall s) and a resume restores it while it lasts, on a cloud
(whose market clock is the wall clock), no longer than its length from now. A replay's clock
starts again on a resume (and its local provider refuses nothing for a quota): nothing is
restored there.

The end-to-end test runs the real loop on the scripted market of ``test_running_totals`` (a
clock that moves 10 market s each time it is read here, provider ``fake``: a cloud), whose
launch calls answer as a list says; the resumed run's market carries on from the earlier
run's clock, as the wall clock does.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from answering_market import (
    NOW,
    AnsweringMarket,
    failed_events,
    new_job,
    refused_then_cancelled,
    restore_only,
    resume_on,
)
from test_running_totals import OFFER

from spotwise.errors import QuotaError
from spotwise.store import Store

QUOTA = "fake: QuotaExceeded: the regional vCPU quota for Spot is used up in us-east-1"
PAUSE_S = 1800.0  # actions.QUOTA_PAUSE_WALL_S
REGION = (OFFER.provider, OFFER.region)


class QuotaMarket(AnsweringMarket):
    """``quota``: refused for the region's quota."""

    refusals: ClassVar[dict[str, Any]] = {
        "quota": lambda: QuotaError(QUOTA, hint="ask for a quota increase")
    }


def _refused_then_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Any], str, QuotaMarket]:
    """The earlier run: its one launch is refused for the region's quota (a 30 min pause),
    then it is cancelled (as Ctrl-C or `spotwise cancel`) while the pause is on."""
    first = QuotaMarket(["quota"])
    summary, db = refused_then_cancelled(tmp_path, monkeypatch, first)
    assert [a for _, a in first.calls] == ["quota"]
    return summary, db, first


@pytest.mark.timeout(60)
def test_a_resumed_cloud_job_does_not_ask_the_quota_refused_region_before_its_pause_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, db, first = _refused_then_cancelled(tmp_path, monkeypatch)
    refused_at = first.calls[0][0]
    assert first.t < refused_at + PAUSE_S - 1500.0  # ended with most of the pause still on

    # resumed: the market's clock carries on (a cloud's is the wall clock)
    again = QuotaMarket(["ok"], t0=first.t)
    again.tick_s = 60.0  # fewer passes through the 30 min
    plan, out = resume_on(tmp_path, db, summary["job_id"], again, monkeypatch)

    assert out["state"] == "succeeded" and out["completed"] == 1, out
    assert [a for _, a in again.calls] == ["ok"]
    # not asked before the earlier run's pause ended (before: at once, on its first pass)
    assert again.calls[0][0] >= refused_at + PAUSE_S
    assert again.calls[0][0] < refused_at + PAUSE_S + 300.0  # and asked once it had ended
    # what the refusal's event recorded, as the resume read it back
    (refused,) = failed_events(db, summary["job_id"])
    assert refused["provider"] == "fake" and refused["region"] == "us-east-1"
    assert refused["quota_wall_s"] == PAUSE_S
    until = refused["quota_until"]
    assert until == pytest.approx(refused_at + PAUSE_S, abs=10.0)
    assert plan.lasting.quota == {REGION: (until, PAUSE_S)}
    assert plan.lasting.levels == {}  # a quota refusal blocks no offer for long


@pytest.mark.timeout(60)
def test_a_pause_over_by_the_resume_is_not_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, db, first = _refused_then_cancelled(tmp_path, monkeypatch)
    refused_at = first.calls[0][0]
    t0 = refused_at + PAUSE_S + 50.0  # resumed after it ended
    again = QuotaMarket(["ok"], t0=t0)
    _, out = resume_on(tmp_path, db, summary["job_id"], again, monkeypatch)
    assert out["state"] == "succeeded", out
    # asked on the resumed run's first pass
    assert again.calls[0][0] < t0 + 100.0


def test_the_resume_reads_each_regions_last_quota_pause(tmp_path: Path) -> None:
    from spotwise.planner.lasting_refusals import read_lasting_refusals

    key = OFFER.key
    with Store.open(f"sqlite:///{tmp_path / 'state.db'}") as store:
        job_id = new_job(store)

        def quota(at: float, region: str, wall_s: Any = PAUSE_S, **more: Any) -> None:
            fields = {"provider": "gcp", "region": region, "quota_until": at + PAUSE_S}
            store.add_event(
                job_id,
                "launch_failed",
                at,
                offer=key,
                error=QUOTA,
                **{**fields, "quota_wall_s": wall_s, **more},
            )

        quota(100.0, "us-central1")
        quota(2_000.0, "us-central1")  # the later refusal's pause is the one
        quota(300.0, "europe-west4")
        store.add_event(job_id, "launch", 2_500.0, offer=key, price=1.0)  # another region
        quota(400.0, "asia-east1", wall_s=float("nan"))  # no pause: not one
        quota(500.0, "asia-east1", wall_s=True)
        quota(600.0, "asia-east1", quota_until="soon")
        store.add_event(job_id, "launch_failed", 700.0, offer=key, error="no capacity")
        lasting = read_lasting_refusals(store, job_id)

    assert lasting.quota == {
        ("gcp", "us-central1"): (2_000.0 + PAUSE_S, PAUSE_S),
        ("gcp", "europe-west4"): (300.0 + PAUSE_S, PAUSE_S),
    }
    assert lasting.levels == {} and lasting.said == ""


def _paused(until: float, wall_s: float = PAUSE_S) -> Any:
    from spotwise.planner.lasting_refusals import LastingRefusals

    return LastingRefusals(quota={REGION: (until, wall_s)})


def test_a_cloud_keeps_the_pause_while_it_lasts_and_no_longer_than_its_length() -> None:
    o = restore_only("aws")
    o._restore_lasting(_paused(NOW + 200.0), NOW)
    assert o.quota_full == {REGION: NOW + 200.0}
    assert o._refused_lately(OFFER, NOW + 199.0) and not o._refused_lately(OFFER, NOW + 200.0)
    elsewhere = SimpleNamespace(provider="fake", region="us-west-2", key="fake:us-west-2a:x:spot")
    assert not o._refused_lately(elsewhere, NOW)  # only that region
    o2 = restore_only("aws+gcp")
    o2._restore_lasting(_paused(NOW + 99_999.0), NOW)  # a clock set back: capped
    assert o2.quota_full == {REGION: NOW + PAUSE_S}
    o3 = restore_only("azure")
    o3._restore_lasting(_paused(NOW - 1.0), NOW)  # over: nothing
    assert o3.quota_full == {}


def test_a_replay_restores_no_quota_pause() -> None:
    """The replay's clock starts again on a resume: an earlier run's pause end is no time of
    this run's (and the local provider refuses no launch for a quota)."""
    o = restore_only("local", speedup=120.0)
    o._restore_lasting(_paused(NOW + 50_000.0), NOW)
    assert o.quota_full == {}


def test_a_quota_refusal_records_its_pause_in_market_time() -> None:
    o = restore_only("fake", speedup=2.0)
    what = o._pause_region(OFFER, NOW)
    assert what == {
        "provider": "fake",
        "region": "us-east-1",
        "quota_until": NOW + 2 * PAUSE_S,  # times the replay's speedup: market s
        "quota_wall_s": PAUSE_S,
    }
    assert o.quota_full == {REGION: NOW + 2 * PAUSE_S}
