"""The `spotwise` policy never checkpoints less often than the job's ``checkpoint.every``
(review-y F1). Young/Daly counts only revocations whose notice is too short to save, so with
a step well inside the 120 s notice it set the interval to the trial's whole length: the
spec's ``every: 5`` was overridden, and a crash, a lost notice or a slow write restarted the
trial from step 0."""

from __future__ import annotations

from spotwise.planner.policy import (
    Launch,
    OfferView,
    Phase,
    PlannerView,
    SetCheckpointEvery,
    Tick,
    TrialView,
    get_policy,
)
from spotwise.providers.base import Market, Offer

SPOT = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 1.0, 3.0)


def decide(**kw: object) -> list[object]:
    t = TrialView("t0", 0, Phase.QUEUED, steps_total=40, checkpoint_every=5, seconds_per_step=10.0)
    view = PlannerView(
        now=0.0, offers=(OfferView(SPOT, p_revoke=0.5),), trials=(t,), notice_lead_s=120.0, **kw
    )  # type: ignore[arg-type]
    return list(get_policy("spotwise").decide(view, Tick(0.0)))


def test_a_job_keeps_its_checkpoint_interval_when_the_notice_fits() -> None:
    actions = decide(checkpoint_every_max=5)
    assert [type(a) for a in actions] == [Launch]  # the spec's 5 stands: nothing to change


def test_the_policy_may_shorten_it() -> None:
    # a step of 200 s does not fit in the notice: Young/Daly's interval is 4 steps, below 5
    t = TrialView("t0", 0, Phase.QUEUED, steps_total=40, checkpoint_every=5, seconds_per_step=200.0)
    view = PlannerView(
        now=0.0,
        offers=(OfferView(SPOT, p_revoke=0.5),),
        trials=(t,),
        notice_lead_s=120.0,
        checkpoint_every_max=5,
    )
    actions = list(get_policy("spotwise").decide(view, Tick(0.0)))
    assert actions[0] == SetCheckpointEvery("t0", 4) and isinstance(actions[1], Launch)


def test_without_a_cap_the_simulator_keeps_its_numbers() -> None:
    # the simulator's view has no cap (notices always delivered): the interval is stretched
    assert decide()[0] == SetCheckpointEvery("t0", 40)
