"""A lasting launch refusal's backoff survives a `spotwise resume` (session 20).

A lasting refusal (a Spot price above max_price, a size without Spot: ``CapacityError.lasting``)
blocks its offer for 5 min, doubling per repeat up to 1 h, in the orchestrator's memory. A
resumed job started at 5 min again and, with the block gone, asked the same refused offer at
once. Now the resume reads each offer's last lasting refusal back from its ``launch_failed``
event: its backoff level (the next refusal doubles it) and, on a cloud (whose market clock is
the wall clock), its block until it ends. A replay's clock starts again on a resume: there
only the level is kept. A launch that went through clears both, as in memory.

The end-to-end test runs the real loop on the scripted market of ``test_running_totals`` (a
clock that moves 10 market s each time it is read here, provider ``fake``: a cloud), whose launch
calls answer as a list says; the resumed run's market carries on from the earlier run's
clock, as the wall clock does.
"""

from __future__ import annotations

from pathlib import Path
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

from spotwise.errors import CapacityError
from spotwise.store import Store

PRICE_CAP = "azure: SpotPriceGreaterThanProvidedMaxPrice: the max price is below the spot price"
HINT = "raise providers[].options.max_price"
KEY = OFFER.key


class RefusingMarket(AnsweringMarket):
    """``lasting``: refused for good, its Spot price above the max price."""

    refusals: ClassVar[dict[str, Any]] = {
        "lasting": lambda: CapacityError(PRICE_CAP, hint=HINT, lasting=True)
    }


def _lasting_refusals() -> Any:
    """The module, imported when a test needs it: the end-to-end test runs on older code too."""
    from spotwise.planner import lasting_refusals

    return lasting_refusals


@pytest.mark.timeout(60)
def test_a_resumed_cloud_job_keeps_the_block_and_doubles_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the earlier run: its one launch is refused for good (a 300 s block), then it is
    # cancelled (as Ctrl-C or `spotwise cancel`) while the block is on
    first = RefusingMarket(["lasting"])
    summary, db = refused_then_cancelled(tmp_path, monkeypatch, first)
    (refused,) = failed_events(db, summary["job_id"])
    assert refused["lasting"] is True and refused["blocked_wall_s"] == 300.0
    until = refused["blocked_until"]
    assert until == pytest.approx(first.calls[0][0] + 300.0, abs=10.0)
    assert first.t < until - 200.0  # ended with most of the block still on

    # resumed: the market's clock carries on (a cloud's is the wall clock)
    again = RefusingMarket(["lasting", "ok"], t0=first.t)
    plan, out = resume_on(tmp_path, db, summary["job_id"], again, monkeypatch)

    assert out["state"] == "succeeded" and out["completed"] == 1, out
    assert [a for _, a in again.calls] == ["lasting", "ok"]
    # not asked before the earlier run's block ended (before: at once, on its first pass)
    assert again.calls[0][0] >= until
    # the next refusal doubles the last block (before: 300 s again)
    _, second = failed_events(db, summary["job_id"])
    assert second["blocked_wall_s"] == 600.0
    assert again.calls[1][0] - again.calls[0][0] >= 600.0
    assert plan.lasting.levels == {KEY: 300.0} and plan.lasting.until == {KEY: until}


def test_the_resume_reads_each_offers_last_lasting_refusal_not_followed_by_a_launch(
    tmp_path: Path,
) -> None:
    other, third = "aws:us-east-1b:p3.2xlarge:spot", "aws:us-east-1c:p3.2xlarge:spot"
    with Store.open(f"sqlite:///{tmp_path / 'state.db'}") as store:
        job_id = new_job(store)

        def refused(key: str, at: float, wall_s: Any, **more: Any) -> None:
            store.add_event(
                job_id,
                "launch_failed",
                at,
                offer=key,
                error=PRICE_CAP,
                lasting=True,
                blocked_until=at + 300.0,
                blocked_wall_s=wall_s,
                **more,
            )

        refused(KEY, 100.0, 300.0)
        refused(KEY, 400.0, 600.0, hint=HINT)
        refused(other, 500.0, 300.0)
        store.add_event(job_id, "launch", 900.0, offer=other, price=1.0)  # went through
        store.add_event(job_id, "launch_failed", 950.0, offer=third, error="no capacity")
        refused(third, 960.0, float("nan"))  # no block: not one
        refused(third, 970.0, True)
        lasting = _lasting_refusals().read_lasting_refusals(store, job_id)

    assert lasting.levels == {KEY: 600.0}
    assert lasting.until == {KEY: 700.0}
    # the launch of `other` cleared the warning's words (as a launch does in memory)
    assert lasting.said == ""


def test_the_last_refusals_words_are_kept_when_no_launch_followed(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'state.db'}") as store:
        job_id = new_job(store)
        store.add_event(
            job_id,
            "launch_failed",
            10.0,
            offer=KEY,
            error=PRICE_CAP,
            hint=HINT,
            lasting=True,
            blocked_until=310.0,
            blocked_wall_s=300.0,
        )
        lasting = _lasting_refusals().read_lasting_refusals(store, job_id)
    assert lasting.said == f"{PRICE_CAP}; {HINT}"


def _lasting(until: float, wall_s: float = 600.0) -> Any:
    return _lasting_refusals().LastingRefusals({KEY: wall_s}, {KEY: until}, f"{PRICE_CAP}; {HINT}")


def test_a_cloud_keeps_the_block_while_it_lasts_and_no_longer_than_its_level() -> None:
    o = restore_only("azure")
    o._restore_lasting(_lasting(NOW + 200.0), NOW)
    assert o.blocked == {KEY: NOW + 200.0}
    assert o.lasting_blocks == {KEY: 600.0}
    assert o.last_lasting_refusal == f"{PRICE_CAP}; {HINT}"
    # its next refusal doubles the restored level
    assert o._block_lasting(KEY, NOW)["blocked_wall_s"] == 1200.0
    o2 = restore_only("aws+gcp")
    o2._restore_lasting(_lasting(NOW + 99_999.0), NOW)  # a clock set back: capped
    assert o2.blocked == {KEY: NOW + 600.0}
    o3 = restore_only("gcp")
    o3._restore_lasting(_lasting(NOW - 1.0), NOW)  # over: only the level
    assert o3.blocked == {} and o3.lasting_blocks == {KEY: 600.0}


def test_a_replay_keeps_only_the_level() -> None:
    """The replay's clock starts again on a resume: an earlier run's block end is no time of
    this run's (here it would block the offer for most of the replay)."""
    o = restore_only("local", speedup=120.0)
    o._restore_lasting(_lasting(NOW + 50_000.0), NOW)
    assert o.blocked == {}
    assert o.lasting_blocks == {KEY: 600.0}
