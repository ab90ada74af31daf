"""The budget's shedding spares a trial whose instance has reported no step yet (review-aq
AQ2): "still starting" was the clock alone (launched less than the job's *mean* start-up ago),
so a slower start-up was shed with all its start-up spent while a newer trial with more cost to
go was kept. A life that never reports is spared only up to 3x the start-up."""

from __future__ import annotations

from spotwise.planner.policies._common import _starting, shed_for_budget
from spotwise.planner.policy import OfferView, Phase, PlannerView, StopEarly, TrialView
from spotwise.providers.base import Market, Offer

OFFER = Offer(
    "aws", "us-east-1", "us-east-1c", "p3.2xlarge", Market.SPOT, 0.918, 3.06, 8, 61.0, 1, "V100"
)
OV = OfferView(OFFER, 0.0, notice_lead_s=120.0, free_if_revoked_within_s=3600.0, minimum_s=60.0)


def _view(now: float, reported: bool | None, overhead: float = 2000.0) -> PlannerView:
    def running(tid: str, number: int, launched_at: float) -> TrialView:
        return TrialView(
            tid, number, Phase.RUNNING, step=0, steps_total=12, seconds_per_step=50.0,
            instance_id=f"i-{tid}", offer_key=OFFER.key, launched_at=launched_at,
            reported_on_life=reported,
        )  # fmt: skip

    done = TrialView("D", 0, Phase.DONE, step=12, steps_total=12, curve=((12, 0.9),))
    return PlannerView(
        now=now, offers=(OV,), trials=(done, running("A", 1, 5923.0), running("B", 2, 7255.0)),
        parallel=2, trials_total=4, spent_usd=2.40, max_cost_usd=3.0,
        restart_overhead_s=overhead, wind_down_s=637.0, tick_s=60.0,
    )  # fmt: skip


def test_a_trial_still_waiting_for_its_first_report_is_not_shed() -> None:
    # A launched 2993 s ago (the job's mean start-up is 2000 s), B 1661 s ago, neither has
    # reported a step: both are starting, neither is shed (was: A, its $0.75 start-up lost,
    # though B had more cost to go)
    assert shed_for_budget(_view(8916.0, reported=None)) == [StopEarly("A", "budget")]  # clock
    assert shed_for_budget(_view(8916.0, reported=False)) == []


def test_a_silent_life_is_spared_only_up_to_three_start_ups() -> None:
    view = _view(8916.0, reported=False, overhead=900.0)
    a, b = view.trials[1], view.trials[2]  # 2993 s and 1661 s since launch, no report
    assert not _starting(view, a)  # past 3 x 900 s
    assert _starting(view, b)
    reported = _view(8916.0, reported=True, overhead=900.0)
    assert not _starting(reported, reported.trials[2])  # reported: the clock alone
