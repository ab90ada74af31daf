"""Early stopping when a script does not report every step (review-w F8).

``asha`` judges a trial at each rung, ``spotwise`` at each check step; a script that reports
every 2 or 5 epochs must be judged at its first report at or past each of them (with the metric
of that report), once. A report that passes several at once is judged at the highest of them
only. Before, both judged only at a report whose step was exactly a rung or check step: a
script reporting every 2 epochs was never stopped by ``asha`` (its rungs are 1, 3, 9, 27)."""

from __future__ import annotations

from typing import Any

import pytest

from spotwise.planner.policies.asha import Asha
from spotwise.planner.policies.ours import Spotwise
from spotwise.planner.policies.spottune import SpotTune
from spotwise.planner.policy import Phase, PlannerView, Progress, StopEarly, TrialView

TOTAL = 40  # asha's rungs: 1, 3, 9, 27; spotwise's check steps: 4, 6, 8, 12, 16, 20, 26, 32


def _trial(i: int, phase: Phase, curve: list[tuple[int, float]], **kw: Any) -> TrialView:
    return TrialView(
        trial_id=f"t{i}",
        number=i,
        phase=phase,
        step=max((s for s, _ in curve), default=0),
        steps_total=kw.pop("steps_total", TOTAL),
        curve=tuple(curve),
        **kw,
    )


def _stops(policy: Any, trials: list[TrialView], event: Progress) -> list[StopEarly]:
    view = PlannerView(now=0.0, offers=(), trials=tuple(trials), trials_total=8)
    return [a for a in policy.decide(view, event) if isinstance(a, StopEarly)]


def _every(k: int, level: float, upto: int = TOTAL) -> list[tuple[int, float]]:
    """A rising curve reported every ``k`` steps, ``level`` apart from the others."""
    return [(s, level + 0.001 * s) for s in range(k, upto + 1, k)]


def test_marks_are_judged_at_the_first_report_at_or_past_them() -> None:
    from spotwise.planner.policies.asha import judged_reports, mark_judged  # new: see F8

    rungs = [1, 3, 9, 27]
    every2 = _every(2, 0.5)
    assert list(judged_reports(every2, rungs)) == [(1, 2), (3, 4), (9, 10), (27, 28)]
    every5 = _every(5, 0.5)  # 5 passes 1 and 3: judged once, at 3
    assert list(judged_reports(every5, rungs)) == [(3, 5), (9, 10), (27, 30)]
    every1 = _every(1, 0.5)  # every step: exactly at the marks, as before
    assert list(judged_reports(every1, rungs)) == [(1, 1), (3, 3), (9, 9), (27, 27)]
    assert mark_judged(every2[:3], 6, rungs) is None  # 4 < rungs < 6: none
    assert mark_judged(every2[:5], 10, rungs) == 9
    assert mark_judged([], 30, rungs) == 27  # a first report at 30: the highest passed


def test_asha_stops_a_trial_that_reports_every_two_steps() -> None:
    """Three finished trials each reported every step; the new one reports 2, 4, 6, ...: its
    report at 2 is judged at rung 1, its report at 4 at rung 3, with those reports' metrics."""
    done = [_trial(i, Phase.DONE, _every(1, 0.7 + 0.01 * i)) for i in range(3)]
    curve = _every(2, 0.6)
    at2 = _trial(3, Phase.RUNNING, curve[:1])
    assert _stops(Asha(), [*done, at2], Progress("t3", 2, curve[0][1])) == [
        StopEarly("t3", "asha rung 1")
    ]
    at4 = _trial(3, Phase.RUNNING, curve[:2])
    assert _stops(Asha(), [*done, at4], Progress("t3", 4, curve[1][1])) == [
        StopEarly("t3", "asha rung 3")
    ]
    # a good trial reporting every 2 steps goes on at rung 1 (its value at 2 is compared)
    good = _trial(3, Phase.RUNNING, [(2, 0.95)])
    assert _stops(Asha(), [*done, good], Progress("t3", 2, 0.95)) == []


def test_asha_judges_each_rung_once_and_a_skipping_report_at_the_highest_rung() -> None:
    done = [_trial(i, Phase.DONE, _every(1, 0.7 + 0.01 * i)) for i in range(3)]
    # judged at 2 (rung 1) and kept: its report at 6 passes no rung, however bad it is
    kept = _trial(3, Phase.RUNNING, [(2, 0.95), (4, 0.95), (6, 0.1)])
    assert _stops(Asha(), [*done, kept], Progress("t3", 6, 0.1)) == []
    # a first report at 5 passes rungs 1 and 3: judged at 3 only
    late = _trial(3, Phase.RUNNING, [(5, 0.1)])
    assert _stops(Asha(), [*done, late], Progress("t3", 5, 0.1)) == [StopEarly("t3", "asha rung 3")]
    # ... and recorded at rung 3 only: at rung 1 a new trial meets no value of it
    high = _trial(4, Phase.DONE, [(5, 0.99), *_every(1, 0.99)[5:]])
    low = _trial(5, Phase.RUNNING, [(1, 0.5)])
    assert _stops(Asha(), [high, low], Progress("t5", 1, 0.5)) == []
    assert _stops(Asha(), [high, low], Progress("t5", 1, 0.5)) == _stops(
        Asha(), [low], Progress("t5", 1, 0.5)
    )
    high_at_3 = _trial(6, Phase.RUNNING, [(1, 0.5), (3, 0.5)])
    assert _stops(Asha(), [high, high_at_3], Progress("t6", 3, 0.5)) == [
        StopEarly("t6", "asha rung 3")
    ]


def _run_asha(every: int) -> list[str]:
    """Six trials one after another (as the reviewer's ``asha_even`` toy), each reporting every
    ``every`` steps; a stopped trial ends there. The stops' reasons."""
    policy, trials, reasons = Asha(), [], []
    for i, level in enumerate((0.8, 0.7, 0.9, 0.6, 0.85, 0.5)):
        reported: list[tuple[int, float]] = []
        curve = _every(every, level)
        if i == 5:  # the best at rung 1, the worst at rung 3
            curve = [(s, 0.95 if s <= 2 else v) for s, v in curve]
        for s, v in curve:
            reported.append((s, v))
            t = _trial(i, Phase.RUNNING, reported)
            stops = _stops(policy, [*trials, t], Progress(t.trial_id, s, v))
            if stops:
                reasons.append(stops[0].reason)
                break
        trials.append(_trial(i, Phase.DONE, reported))
    return reasons


def test_asha_stops_as_many_trials_reporting_every_two_steps_as_every_step() -> None:
    every_step = _run_asha(1)
    assert every_step == ["asha rung 1", "asha rung 1", "asha rung 1", "asha rung 3"]
    assert _run_asha(2) == every_step  # before: [] (no report at 1, 3, 9 or 27)


def _last(steps: list[int], values: list[float], total: int, d: str) -> tuple[float, ...]:
    return values[-1], values[-1] - 0.01, values[-1] + 0.01


def test_spotwise_judges_a_trial_that_reports_every_five_steps() -> None:
    """Check steps 4, 6, 8, ...: the report at 5 is judged at 4, from the reports up to 5;
    the one at 10 at 8 (not at 6 too); the one at 25 at none."""
    calls: list[list[int]] = []

    def counting(steps: list[int], values: list[float], total: int, d: str) -> tuple[float, ...]:
        calls.append(list(steps))
        return _last(steps, values, total, d)

    best = _trial(0, Phase.DONE, _every(1, 0.9))
    bad = _every(5, 0.3)
    policy = Spotwise(predictor=counting)
    at5 = _trial(1, Phase.RUNNING, bad[:1])
    assert _stops(policy, [best, at5], Progress("t1", 5, bad[0][1])) == [
        StopEarly("t1", "P(beat incumbent) < 0.1", bad[0][1])
    ]
    assert calls == [[5]] and set(policy.memo) == {("t1", 4)}

    fine = _every(5, 0.95)
    policy = Spotwise(predictor=counting)
    for k in range(1, 8):
        t = _trial(1, Phase.RUNNING, fine[:k])
        assert _stops(policy, [best, t], Progress("t1", fine[k - 1][0], fine[k - 1][1])) == []
    # judged at 5 (check 4), 10 (8), 15 (12), 20 (20), 30 (26), 35 (32); not at 25
    assert {c for _, c in policy.memo} == {4, 8, 12, 20, 26, 32}
    calls.clear()
    t = _trial(1, Phase.RUNNING, [*fine[:4], (25, 0.1)])
    assert _stops(policy, [best, t], Progress("t1", 25, 0.1)) == []  # 25 passes no check step
    assert calls == []


def test_spotwise_calibrates_on_finished_trials_that_reported_every_five_steps() -> None:
    """A resumed job (fresh policy object): its calibration at check 4 uses the finished
    trials' predictions made at their reports at 5, as the first run's policy did."""
    finished = [
        _trial(i, Phase.DONE, _every(5, 0.6 + 0.02 * i), start_step=TOTAL) for i in range(6)
    ]
    first = Spotwise(predictor=_last)
    for t in finished:  # the first run judged each at 5 (check 4)
        at5 = TrialView(**{**t.__dict__, "phase": Phase.RUNNING, "curve": t.curve[:1]})
        first.decide(PlannerView(now=0.0, offers=(), trials=(at5,)), Progress(t.trial_id, 5, 0.6))
    assert all((t.trial_id, 4) in first.memo for t in finished)
    view = PlannerView(now=0.0, offers=(), trials=tuple(finished), trials_total=8)
    expected = first._calibrated(view, 4, 0.7, 0.01)
    assert expected != (0.7, 0.01)
    assert Spotwise(predictor=_last)._calibrated(view, 4, 0.7, 0.01) == expected


def test_spotwise_keeps_a_requeued_trials_prediction_from_a_report_past_a_check() -> None:
    """A trial queued again in a resumed job: the incumbent bar holds the prediction its
    earlier run made at its last judged report (35, for check 32), as the first run's did."""
    reported = tuple(_every(5, 0.9, upto=35))
    first = Spotwise(predictor=_last)
    for k in range(1, len(reported) + 1):
        live = _trial(0, Phase.RUNNING, list(reported[:k]))
        s, v = reported[k - 1]
        first.decide(PlannerView(now=0.0, offers=(), trials=(live,)), Progress("t0", s, v))
    again = _trial(0, Phase.QUEUED, list(reported[:2]), start_step=10, reported=reported)
    other = _trial(1, Phase.RUNNING, [(1, 0.5)])
    view = PlannerView(now=0.0, offers=(), trials=(again, other), trials_total=8)
    expected = first._incumbent(view, "t1")
    assert expected == pytest.approx(reported[-1][1] - 0.01)  # the lower band at 35
    assert Spotwise(predictor=_last)._incumbent(view, "t1") == expected


def test_spottune_judges_once_at_the_first_report_at_or_past_theta() -> None:
    """SpotTune already did (``event.step < at``): θ = 0.3 of 40 is step 12; a trial reporting
    every 5 is judged at 15, with the prediction from its reports up to 15, and not at 20."""
    done = [_trial(i, Phase.DONE, _every(1, 0.9 + 0.01 * i)) for i in range(3)]
    policy = SpotTune(predictor=_last)
    for t in done:  # they reached θ at 12
        at12 = TrialView(**{**t.__dict__, "phase": Phase.RUNNING, "curve": t.curve[:12]})
        _stops(policy, [at12], Progress(t.trial_id, 12, t.curve[11][1]))
    bad = _every(5, 0.3)
    at10 = _trial(3, Phase.RUNNING, bad[:2])
    assert _stops(policy, [*done, at10], Progress("t3", 10, bad[1][1])) == []
    at15 = _trial(3, Phase.RUNNING, bad[:3])
    assert _stops(policy, [*done, at15], Progress("t3", 15, bad[2][1])) == [
        StopEarly("t3", "earlycurve θ=0.3", bad[2][1])
    ]
    at20 = _trial(3, Phase.RUNNING, bad[:4])
    assert _stops(policy, [*done, at20], Progress("t3", 20, bad[3][1])) == []


def test_spottune_predicts_from_the_reports_up_to_the_judged_one() -> None:
    """The orchestrator reads several reports in one poll and the view holds them all: the
    judgement at 12 (θ) uses the reports up to 12, not the one at 13 read with it."""
    seen: list[int] = []

    def last_step(steps: list[int], values: list[float], total: int, d: str) -> tuple[float, ...]:
        seen.append(steps[-1])
        return _last(steps, values, total, d)

    t = _trial(0, Phase.RUNNING, _every(1, 0.5, upto=13))
    _stops(SpotTune(predictor=last_step), [t], Progress("t0", 12, t.curve[11][1]))
    assert seen == [12]
