"""A job in which no trial has a final metric is not a success, whatever the cause (review-w F1).

``end_state`` failed such a job only when its trials ended on NaN/inf: trials that never
reported their last step, or were all stopped early, left a job "succeeded", exit 0, with no
best. The reasons already given (every trial failed, NaN ends, a limit) keep their words.
"""

from __future__ import annotations

from spotwise.planner.policy import INVALID_METRIC
from spotwise.planner.report import end_state
from spotwise.planner.runstate import TrialRun

LOGS = "/runs/j-1/logs"


def _t(n: int, state: str, curve: dict[int, float], *, steps: int = 6, **kw: object) -> TrialRun:
    t = TrialRun(f"t-{n}", n, {"x": n}, steps_total=steps, checkpoint_every=2)
    t.state, t.curve = state, dict(curve)
    t.step = t.furthest = max(curve, default=0)
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def test_failed_and_policy_stopped_trials_leave_a_failed_job_that_says_how_they_ended() -> None:
    trials = [
        _t(0, "failed", {5: 0.9}, last_error="reported only up to step 5"),
        _t(1, "stopped_early", {2: 0.3}, stop_reason="asha"),
        _t(2, "failed", {5: 0.8}),
    ]
    assert end_state(trials, False, None, LOGS) == (
        "failed",
        "no trial reported a final metric (a finite value at step 6): 2 failed, 1 stopped early; "
        f"see the trial logs in {LOGS}",
    )


def test_a_completed_trial_without_a_final_fails_the_job_too() -> None:
    """A trial stored ``completed`` with no final metric by an earlier version (carried into a
    resumed run) and not on NaN: no result, no success."""
    trials = [_t(0, "completed", {3: 0.9}, steps=4, carried=True), _t(1, "failed", {})]
    state, why = end_state(trials, False, None, LOGS)
    assert state == "failed"
    assert why == (
        "no trial reported a final metric (a finite value at step 4): 1 completed, 1 failed; "
        f"see the trial logs in {LOGS}"
    )


def test_a_job_with_no_trial_at_all_is_no_success() -> None:
    assert end_state([], False, None, LOGS) == ("failed", "no trial ran")


def test_one_final_is_a_success_and_the_earlier_reasons_keep_their_words() -> None:
    ok = _t(0, "completed", {6: 0.9})
    assert end_state([ok, _t(1, "failed", {})], False, None, LOGS) == ("succeeded", None)
    assert end_state([_t(0, "failed", {})], True, None, LOGS) == ("cancelled", None)
    state, why = end_state([_t(0, "failed", {}, last_error="boom")], False, None, LOGS)
    assert (state, why) == (
        "failed",
        f"every trial failed (1); the last error: boom; see the trial logs in {LOGS}",
    )
    nan = _t(0, "stopped_early", {1: 0.1}, stop_reason=INVALID_METRIC, metric_invalid=True)
    assert end_state([nan], False, None, LOGS)[1] == (
        f"no trial reported a usable final metric (1 ended on NaN or inf); see the trial logs in "
        f"{LOGS}"
    )
    budget = _t(0, "stopped_early", {2: 0.5}, stop_reason="budget", lives_started=1)
    assert end_state([budget], False, 3.0, LOGS)[1] == (
        "the budget (max_cost_usd 3.0) was reached, or projected to be, before any trial "
        "completed; raise budget.max_cost_usd or lower steps"
    )


def test_what_counts_as_the_last_step_reported() -> None:
    from spotwise.planner.report import last_reported, reported_final

    # a finite value at steps, or NaN/inf as its latest report there (a diverged end)
    assert reported_final(_t(0, "running", {6: 0.9}))
    assert reported_final(_t(0, "running", {5: 0.9}, furthest=6, metric_invalid=True))
    # a checkpoint at the last step is no report
    assert not reported_final(_t(0, "running", {5: 0.9}, step=6, checkpoint_step=6))
    assert not reported_final(_t(0, "running", {0: 0.1, 5: 0.9}))  # 0-indexed
    # what it reported last: this run's, the earlier run's (a resumed trial), a NaN's step
    assert last_reported(_t(0, "running", {})) is None
    assert last_reported(_t(0, "running", {2: 0.1}, reported={2: 0.1, 5: 0.4})) == 5
    assert last_reported(_t(0, "running", {2: 0.1}, furthest=3)) == 3
