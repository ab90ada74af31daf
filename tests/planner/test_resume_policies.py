"""Policies in a resumed job (`spotwise resume`): a fresh policy object sees the earlier run's
trials only through the view (``TrialView.start_step``: the step each had when this run began).
It must judge this run's trials as the earlier run's policy would have, and measure a deadline's
progress from the resume, when its window starts again."""

from __future__ import annotations

from typing import Any

from spotwise.planner.policies.deadline import UniformProgress, job_clock
from spotwise.planner.policies.ours import Spotwise
from spotwise.planner.policies.spottune import SpotTune
from spotwise.planner.policy import (
    Launch,
    OfferView,
    Phase,
    PlannerView,
    Progress,
    StopEarly,
    Tick,
    TrialView,
)
from spotwise.providers.base import Market, Offer


def _trial(i: int, phase: Phase, curve: list[tuple[int, float]], **kw: Any) -> TrialView:
    step = max((s for s, _ in curve), default=0)
    return TrialView(
        trial_id=f"t{i}",
        number=i,
        phase=phase,
        step=step,
        steps_total=kw.pop("steps_total", 10),
        curve=tuple(curve),
        **kw,
    )


def _last(steps: list[int], values: list[float], total: int, d: str) -> tuple[float, ...]:
    return values[-1], values[-1] - 0.01, values[-1] + 0.01


def _stops(policy: SpotTune, view: PlannerView, event: Progress) -> list[StopEarly]:
    return [a for a in policy.decide(view, event) if isinstance(a, StopEarly)]


GOOD = [[(s, 0.8 + 0.01 * s + 0.001 * i) for s in range(1, 11)] for i in range(3)]


def test_spottune_ranks_this_runs_trials_against_the_earlier_runs() -> None:
    """Trials 0-2 passed θ (step 3) in the first run; the bad trial 3 reaches θ after the
    resume: it is below the keep_top=3 cutoff and stopped, as the first run's policy would."""
    first = SpotTune(predictor=_last)
    for i, c in enumerate(GOOD):
        t = _trial(i, Phase.RUNNING, c[:3])
        first.decide(PlannerView(now=0.0, offers=(), trials=(t,)), Progress(t.trial_id, 3, c[2][1]))
    carried = [_trial(i, Phase.DONE, c, start_step=10) for i, c in enumerate(GOOD)]
    bad = _trial(3, Phase.RUNNING, [(1, 0.1), (2, 0.1), (3, 0.1)])
    view = PlannerView(now=0.0, offers=(), trials=(*carried, bad), trials_total=8)
    event = Progress("t3", 3, 0.1)

    expected = _stops(first, view, event)
    got = _stops(SpotTune(predictor=_last), view, event)

    assert expected == [StopEarly("t3", "earlycurve θ=0.3", 0.1)]
    assert got == expected


def test_spotwise_calibrates_on_the_earlier_runs_finished_trials() -> None:
    """Its calibration (final vs prediction at the same check step, on trials that finished)
    is learnt from the earlier run's trials too: a fresh policy object on the resumed view
    gives the first run's policy's numbers."""
    first, fresh = Spotwise(predictor=_last), Spotwise(predictor=_last)
    finished = [_trial(i, Phase.DONE, c, start_step=10) for i, c in enumerate(GOOD * 2)]
    finished = [
        TrialView(**{**t.__dict__, "trial_id": f"t{n}", "number": n})
        for n, t in enumerate(finished)
    ]
    step = 3
    for t in finished:
        first._prediction(t, step, "maximize")  # what the first run memoised at step 3
    view = PlannerView(now=0.0, offers=(), trials=tuple(finished), trials_total=8)
    expected = first._calibrated(view, step, 0.7, 0.01)
    assert expected != (0.7, 0.01)  # calibrated on the 6 finished trials
    assert fresh._calibrated(view, step, 0.7, 0.01) == expected
    # a trial of this run that finished (start_step 0) is not predicted after the fact
    this_run = [TrialView(**{**t.__dict__, "start_step": 0}) for t in finished]
    fresh_view = PlannerView(now=0.0, offers=(), trials=tuple(this_run), trials_total=8)
    assert Spotwise(predictor=_last)._calibrated(fresh_view, step, 0.7, 0.01) == (0.7, 0.01)


def test_uniform_progress_counts_progress_from_the_resume() -> None:
    """Two hours into a 4 h window that started at the resume, no step made since (no spot):
    the job is behind and goes to on-demand. The 4 trials the first run completed are not
    progress of this window."""
    od = OfferView(Offer("aws", "us-east-1", "us-east-1a", "p3", Market.ON_DEMAND, 3.0, 3.0))
    spot = OfferView(
        Offer("aws", "us-east-1", "us-east-1a", "p3", Market.SPOT, 0.9, 3.0, available=False)
    )
    curve = [(40, 0.9)]
    carried = [_trial(i, Phase.DONE, curve, steps_total=40, start_step=40) for i in range(4)]
    queued = [_trial(i, Phase.QUEUED, [], steps_total=40) for i in (4, 5)]
    kw: dict[str, Any] = dict(
        offers=(od, spot), parallel=2, started_at=0.0, deadline=4 * 3600.0, now=2 * 3600.0,
        restart_overhead_s=60.0, tick_s=60.0,
    )  # fmt: skip
    resumed = PlannerView(trials=(*carried, *queued), trials_total=8, **kw)
    alone = PlannerView(trials=tuple(queued), trials_total=4, **kw)  # the same work left

    clock, same = job_clock(resumed), job_clock(alone)
    assert clock is not None and same is not None
    assert (clock.done, clock.total, clock.behind) == (same.done, same.total, same.behind)
    assert clock.done == 0.0 and clock.behind
    actions = UniformProgress().decide(resumed, Tick(2 * 3600.0))
    assert actions == UniformProgress().decide(alone, Tick(2 * 3600.0))
    assert {a.offer_key for a in actions if isinstance(a, Launch)} == {od.key}


def test_spottune_does_not_judge_again_a_trial_the_earlier_run_kept_at_theta() -> None:
    """In the earlier run trial 3 reached θ third (kept: keep_top=3), trial 2 after it. Trial
    3 resumes from its step-6 checkpoint and reports step 7: the first run's policy would not
    judge it again, the resumed run's must not either (it would rank it 4th now) (review-s)."""
    carried = [_trial(i, Phase.DONE, c, start_step=10) for i, c in enumerate(GOOD)]
    mid = [(s, 0.8 + 0.01 * s - 0.005) for s in range(1, 7)]  # below all three at θ
    first = SpotTune(predictor=_last)
    order = (carried[0], carried[1], _trial(3, Phase.RUNNING, mid[:3]), carried[2])
    for t in order:
        at3 = TrialView(**{**t.__dict__, "phase": Phase.RUNNING, "curve": t.curve[:3]})
        kept = first.decide(
            PlannerView(now=0.0, offers=(), trials=(at3,)), Progress(t.trial_id, 3, 0.8)
        )
        assert not [a for a in kept if isinstance(a, StopEarly)]
    resumed = _trial(3, Phase.RUNNING, [*mid, (7, 0.5)], start_step=6)
    view = PlannerView(now=0.0, offers=(), trials=(*carried, resumed), trials_total=8)
    event = Progress("t3", 7, 0.5)

    assert _stops(first, view, event) == []
    assert _stops(SpotTune(predictor=_last), view, event) == []


def test_spottune_keeps_its_judgement_of_a_trial_queued_again_from_before_theta() -> None:
    """Trial 3 reached θ (step 3) third in the earlier run and was kept, then was cut back to
    its step-2 checkpoint by the cancel. After the resume it crosses θ again: in one run it
    would not be judged a second time (review-s F3); its earlier reports say how it ranked."""
    carried = [_trial(i, Phase.DONE, c, start_step=10) for i, c in enumerate(GOOD)]
    earlier = [(s, 0.8 + 0.01 * s - 0.005) for s in range(1, 6)]
    first = SpotTune(predictor=_last)
    for t in (carried[0], carried[1], _trial(3, Phase.RUNNING, earlier[:3]), carried[2]):
        at3 = TrialView(**{**t.__dict__, "phase": Phase.RUNNING, "curve": t.curve[:3]})
        first.decide(PlannerView(now=0.0, offers=(), trials=(at3,)), Progress(t.trial_id, 3, 0.8))
    again = _trial(
        3, Phase.RUNNING, [*earlier[:2], (3, 0.5)], start_step=2, reported=tuple(earlier)
    )
    view = PlannerView(now=0.0, offers=(), trials=(*carried, again), trials_total=8)
    event = Progress("t3", 3, 0.5)

    assert _stops(first, view, event) == []
    assert _stops(SpotTune(predictor=_last), view, event) == []
    without = TrialView(**{**again.__dict__, "reported": ()})  # what it had no memory of
    view = PlannerView(now=0.0, offers=(), trials=(*carried, without), trials_total=8)
    assert _stops(SpotTune(predictor=_last), view, event) != []


def test_spotwise_holds_a_requeued_trials_earlier_prediction_as_an_incumbent() -> None:
    """The incumbent bar counts the live trials' latest predictions (their lower bands): a
    trial queued again keeps the one its earlier run made at its last check step."""
    first, fresh = Spotwise(predictor=_last), Spotwise(predictor=_last)
    reported = tuple((s, 0.9 + 0.001 * s) for s in range(1, 6))  # check steps 2, 3, 4, 5
    live = _trial(0, Phase.RUNNING, list(reported))
    first.decide(
        PlannerView(now=0.0, offers=(), trials=(live,)), Progress("t0", 5, reported[-1][1])
    )
    assert "t0" in first.latest
    again = _trial(0, Phase.QUEUED, list(reported[:2]), start_step=2, reported=reported)
    other = _trial(1, Phase.RUNNING, [(1, 0.5)])
    view = PlannerView(now=0.0, offers=(), trials=(again, other), trials_total=8)
    expected = first._incumbent(view, "t1")
    assert expected is not None
    assert fresh._incumbent(view, "t1") == expected
    plain = TrialView(**{**again.__dict__, "reported": ()})
    view = PlannerView(now=0.0, offers=(), trials=(plain, other), trials_total=8)
    assert Spotwise(predictor=_last)._incumbent(view, "t1") is None
