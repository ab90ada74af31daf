"""An offer that refused a launch (no capacity, a failed create, a passing 5xx) is avoided for
a tick of its market from when the launch call was answered, not from the start of the pass
that made the call (session 23, helper A).

Measured from the pass's start, a launch call that took longer than a tick (a cloud's operation
wait timing out after minutes; on the replay, a launch slowed by a loaded machine: the flaky
``test_leftovers`` run, whose trial went back to the zone that had just refused it) left the
offer blocked until a time already past: the next pass launched on the refused offer again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from orch_fakes import UNAVAILABLE, Cloudlike
from test_budget_review import Prov, _ledger
from test_leftovers import _run

from spotwise.errors import CapacityError, ProviderError, TransientError
from spotwise.planner import launch_cleanup
from spotwise.planner.actions import Actions
from spotwise.planner.launch_retry import SameRequest
from spotwise.planner.runstate import TrialRun
from spotwise.providers.base import LaunchRequest, Market, Offer
from spotwise.store import Store

OFFER = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 0.9, 3.06)
TICK = 30.0  # the market's tick (market s)
CALL = 45.0  # how long the refused launch call took (market s): longer than a tick
ASKED = 1000.0  # the market time of the pass that called it

REFUSALS = {
    "no capacity": lambda: CapacityError("aws: InsufficientInstanceCapacity in us-east-1a"),
    "failed create": lambda: ProviderError("gcp: launching: operation op-1 still running"),
    "passing 503": lambda: TransientError(UNAVAILABLE),
}


class SlowRefusal(Prov):
    """A provisioner whose launch call takes :data:`CALL` market s, then fails; no instance
    of the launch is listed (its cleanup is clean)."""

    def __init__(self, clock: list[float], error: Exception) -> None:
        super().__init__()
        self.clock, self.error = clock, error

    def launch(self, request: LaunchRequest) -> Any:
        self.clock[0] += CALL
        raise self.error


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_refused_offer_is_avoided_for_a_tick_from_the_answer_of_a_slow_call(
    refusal: str,
) -> None:
    clock = [ASKED]
    orch = _ledger(SlowRefusal(clock, REFUSALS[refusal]()), clock, cls=Actions)
    orch.blocked, orch.throttled, orch.quota_full = {}, {}, {}
    orch.backend.info, orch.backend.speedup = {"tick_s": TICK}, 1.0
    t = TrialRun("t-1", 0, {}, 10, 5)
    orch.trials = [t]
    req = LaunchRequest(OFFER, ("python",), {"SPOTWISE_ATTEMPT": "1"}, {}, "L1")

    orch._call_launch(SameRequest(t, req, ASKED, 1), ASKED)

    answered = ASKED + CALL
    # before: blocked until ASKED + TICK, already past when the call was answered
    assert orch.blocked == {OFFER.key: answered + TICK}
    assert orch._refused_lately(OFFER, answered + 1.0)  # the next pass: not launched there
    assert not orch._refused_lately(OFFER, answered + TICK)  # a tick on: offered again
    kinds = [k for k, _ in orch.events]
    assert kinds == ["launch_interrupted" if refusal == "passing 503" else "launch_failed"]


@pytest.mark.timeout(180)
def test_the_loop_relaunches_elsewhere_after_a_launch_call_longer_than_a_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real loop on the replayed market (ticks of 300 market s: 10 wall s at its speedup of
    30): the first launch, on the cheapest zone, fails after its call took 11 wall s (its
    market's clock moved on that much during the call: no sleep). The trial's relaunch goes to
    the other zone; before, it went to the zone that had just refused it."""
    monkeypatch.setattr(launch_cleanup, "RELAUNCH_HOLD_MAX_WALL_S", 0.0)  # relaunched at once
    real = Cloudlike.launch

    def slow_first_call(self: Cloudlike, request: LaunchRequest) -> Any:
        if not self.calls:  # the market's clock runs 11 wall s on during the call
            self.inner.clock._wall0 -= 11.0
        return real(self, request)

    monkeypatch.setattr(Cloudlike, "launch", slow_first_call)
    summary, prov, db = _run(tmp_path, monkeypatch, calm=True, gap_s=300, fail_first_launch=True)

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    with Store.open_existing(db) as store:
        rows = store.list_instances(summary["job_id"])
        failed = store.events(summary["job_id"], kind="launch_failed")
    assert [(r.zone, r.state) for r in rows] == [
        ("us-east-1a", "failed"),
        ("us-east-1b", "terminated"),
    ]
    assert [e.detail["offer"] for e in failed] == ["aws:us-east-1a:p3.2xlarge:spot"]
    assert len(prov.calls) == 2
