"""The planner compares offers per step, at each trial's speed on each instance type (the
throughput model: measured, rescaled by hardware, or the hardware prior), not per second as
if every instance type ran a step in the same time."""

from __future__ import annotations

import pytest

from spotwise.planner.policy import Launch, Phase, TrialAdded, get_policy
from spotwise.planner.runstate import TrialRun, build_view
from spotwise.planner.speeds import step_seconds
from spotwise.providers.base import Market, Offer
from spotwise.providers.billing import rule_for

# a T4 at a third of a V100's price: per hour the T4 is cheaper; the hardware prior says it
# makes 0.45 of the V100's steps, so per step it is cheaper still (0.30/0.45 < 0.95)
T4 = Offer(
    "aws", "us-east-1", "us-east-1a", "g4dn.xlarge", Market.SPOT, 0.30, 0.526, 4, 16, 1, "T4"
)
V100 = Offer(
    "aws", "us-east-1", "us-east-1b", "p3.2xlarge", Market.SPOT, 0.95, 3.06, 8, 61, 1, "V100"
)
BARE = Offer("aws", "us-east-1", "us-east-1c", "x1.bare", Market.SPOT, 0.50, 1.0)  # no hardware


def _trial(n: int, **measured: float) -> TrialRun:
    t = TrialRun(f"t{n}", n, {}, steps_total=100, checkpoint_every=10)
    t.step_s = {k.replace("_", "."): v for k, v in measured.items()}
    if measured:
        t.seconds_per_step = next(iter(measured.values()))
    return t


def _view(trials: list[TrialRun], offers: list[Offer]):  # type: ignore[no-untyped-def]
    return build_view(
        0.0,
        offers,
        {},
        trials,
        direction="maximize",
        parallel=4,
        trials_total=4,
        spent_usd=0.0,
        max_cost_usd=None,
        started_at=0.0,
        deadline=None,
        rules={"aws": rule_for("aws")},
    )


def test_a_trials_own_speed_on_a_type_wins_and_moves_to_other_types_by_their_hardware() -> None:
    est = dict(step_seconds({"t0": {"g4dn.xlarge": 90.0}}, [T4, V100, BARE], ["t0"], 60.0)["t0"])
    assert est["g4dn.xlarge"] == 90.0  # measured
    assert est["p3.2xlarge"] == pytest.approx(90.0 * 0.45)  # a V100 is 1/0.45 times a T4
    assert est["x1.bare"] == 90.0  # hardware unknown: as fast as where it was measured


def test_a_new_trial_gets_the_types_mean_then_the_prior_anchored_on_what_was_measured() -> None:
    measured = {"a": {"p3.2xlarge": 40.0}, "b": {"p3.2xlarge": 60.0}}
    est = dict(step_seconds(measured, [T4, V100], ["new"], 50.0)["new"])
    assert est["p3.2xlarge"] == pytest.approx(50.0)  # the mean of the trials measured there
    # never run on a T4: the V100 measurements (50 s a step on one V100) over its speed
    assert est["g4dn.xlarge"] == pytest.approx(50.0 / 0.45)


def test_before_any_measurement_one_type_sees_the_guess_and_two_types_their_prior_ratio() -> None:
    (only,) = step_seconds({}, [V100], ["t0"], 60.0)["t0"]
    assert only == ("p3.2xlarge", 60.0)  # a one-type market: as before the throughput model
    est = dict(step_seconds({}, [T4, V100], ["t0"], 60.0)["t0"])
    assert est["g4dn.xlarge"] / est["p3.2xlarge"] == pytest.approx(1.0 / 0.45)
    # centred on the guess: the mean offer's speed runs a step in 60 s
    assert est["p3.2xlarge"] == pytest.approx(60.0 * (1.0 + 0.45) / 2.0)
    # a CPU-only type has no prior (its speed depends on the script's threads): the guess
    c5 = Offer("aws", "us-east-1", "us-east-1a", "c5.4xlarge", Market.SPOT, 0.2, 0.68, 16, 32)
    assert dict(step_seconds({}, [T4, V100, c5], ["t0"], 60.0)["t0"])["c5.4xlarge"] == 60.0
    # once measured on a T4 only: as fast as that measurement, not rescaled by its vCPUs
    est = dict(step_seconds({"t1": {"g4dn.xlarge": 90.0}}, [T4, c5], ["t0", "t1"], 60.0)["t0"])
    assert est["c5.4xlarge"] == 90.0


@pytest.mark.parametrize("policy", ["spot-greedy", "spottune", "spotwise"])
def test_the_cheaper_offer_per_hour_loses_when_its_steps_are_slower(policy: str) -> None:
    """The trial was measured at 300 s a step on the T4 and 60 s on the V100: per step the
    V100 costs 0.95·60 = 57 against the T4's 0.30·300 = 90. Every spot policy used to place it
    on the T4 (cheaper per hour, the same seconds per step assumed everywhere)."""
    t = _trial(0, g4dn_xlarge=300.0, p3_2xlarge=60.0)
    t.seconds_per_step = 60.0
    view = _view([t], [T4, V100])
    tv = view.trial("t0")
    assert (tv.seconds_on(view.offers[0]), tv.seconds_on(view.offers[1])) == (300.0, 60.0)
    (launch,) = [
        a for a in get_policy(policy).decide(view, TrialAdded("t0")) if isinstance(a, Launch)
    ]
    assert launch.offer_key == V100.key


@pytest.mark.parametrize("policy", ["spot-greedy", "spottune", "spotwise"])
def test_the_hardware_prior_picks_the_cheaper_step_before_anything_is_measured(policy: str) -> None:
    """A V100 at 0.50/h against a T4 at 0.30/h: per step the V100 is cheaper (0.50 < 0.30/0.45)."""
    v100 = Offer(
        "aws", "us-east-1", "us-east-1b", "p3.2xlarge", Market.SPOT, 0.50, 3.06, 8, 61, 1, "V100"
    )
    view = _view([_trial(0)], [T4, v100])
    (launch,) = [
        a for a in get_policy(policy).decide(view, TrialAdded("t0")) if isinstance(a, Launch)
    ]
    assert launch.offer_key == v100.key


def test_a_running_trials_projection_uses_its_speed_on_its_own_instance() -> None:
    """The budget projects a running trial at its speed on the type it runs on (moved to a T4
    from a V100 and not yet timed there: the V100's speed rescaled, not the V100's own)."""
    from spotwise.planner.policies._common import finish_cost
    from spotwise.planner.runstate import Life

    t = _trial(0, p3_2xlarge=40.0)
    t.life = Life("l1", "i1", T4, 0.0, 0, 1)
    t.phase, t.state, t.step = Phase.RUNNING, "running", 50
    view = _view([t], [T4, V100])
    cost = finish_cost(view, view.trial("t0"))
    boot = view.restart_overhead_s  # launched at 0, now 0: its whole start-up is still to come
    # and its wind-down after its last step (the default until one is measured)
    assert view.wind_down_s == 60.0
    assert cost == pytest.approx((boot + 50 * (40.0 / 0.45) + view.wind_down_s) * 0.30 / 3600.0)
