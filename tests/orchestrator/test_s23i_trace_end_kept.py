"""What a run that reached its replayed trace's end kept, as `spotwise resume` sees it.

review-ay F3: ``kept_progress`` counted a trial the deadline (or the budget) stopped first, and
the trace's end while it wound down, as ended on its own: the run's summary kept ``resumable``
while the resume's own check (the store: the trial queued again) refused it. F4: the run's
``ended`` count (the ``trace_end`` event) took failed trials that a resume queues again as a
broken command's (``resume_broken.command_killed``) as ended.
"""

from __future__ import annotations

from typing import Any

from spotwise.planner.policy import Action, Phase
from spotwise.planner.runstate import TrialRun
from spotwise.planner.stops import Stops, kept_progress


def _trial(n: int, state: str, stop_reason: str | None = None, checkpoint: int = 4) -> TrialRun:
    t = TrialRun(f"t{n}", n, {"lr": 0.1}, 10, 2)
    t.state, t.stop_reason, t.checkpoint_step = state, stop_reason, checkpoint
    t.phase = Phase.DONE if state in ("completed", "failed", "stopped_early") else Phase.WAITING
    return t


def test_a_trial_a_limit_stopped_first_kept_nothing() -> None:
    """The deadline stopped t1 first; the end came while it wound down: it runs again."""
    from_steps = {"t1": 4}
    assert not kept_progress(from_steps, 0, [_trial(1, "stopped_early", "deadline")])
    assert not kept_progress(from_steps, 0, [_trial(1, "stopped_early", "budget")])
    assert not kept_progress(from_steps, 0, [_trial(1, "pending")])  # the resume's reading
    # what ended for good still counts, and so does a checkpoint past where the run began
    assert kept_progress(from_steps, 0, [_trial(1, "stopped_early", "plateau")])
    assert kept_progress(from_steps, 0, [_trial(1, "completed")])
    assert kept_progress(from_steps, 0, [_trial(1, "failed")])
    assert kept_progress(from_steps, 0, [_trial(1, "stopped_early", "deadline", checkpoint=6)])


class Run(Stops):
    """Just what ``_stop_at_trace_end`` reads and writes of the orchestrator."""

    def __init__(self, trials: list[TrialRun]) -> None:
        self.trials = trials
        self.trace_end = None
        self.cancelled = False
        self.started_at = 0.0
        self.job_id = "j"
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.stops: list[Action] = []

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.events.append((kind, detail))

    def _execute(self, action: Action, offers: list[Any], now: float) -> None:
        self.stops.append(action)


def _failed(n: int, crashed: bool = True, step: int = 0) -> TrialRun:
    t = _trial(n, "failed", checkpoint=0)
    t.crashed, t.step = crashed, step
    return t


def test_failed_trials_a_resume_runs_again_as_a_broken_commands_are_not_ended() -> None:
    running = _trial(3, "running", checkpoint=0)
    running.phase = Phase.RUNNING
    run = Run([_failed(1), _failed(2), running])

    run._stop_at_trace_end(7200.0, 7200.0)

    ((kind, detail),) = run.events
    assert (kind, detail["ended"], detail["from_steps"]) == ("trace_end", 0, {"t3": 0})
    assert [a.trial_id for a in run.stops] == ["t3"]


def test_failures_that_a_resume_keeps_are_ended() -> None:
    """One failure alone; a failure without an exit code, or past where the run started it (a
    resume keeps those failed); two failures in a run where a step was reported: ended."""
    cases = [
        ([_failed(1)], 0, 1),
        ([_failed(1), _failed(2, crashed=False)], 0, 1),  # t1 runs again, t2 stays failed
        ([_failed(1), _failed(2, step=3)], 0, 1),
        ([_failed(1), _failed(2)], 2, 2),  # the running trial reported step 2 in this run
    ]
    for trials, furthest, ended in cases:
        running = _trial(9, "running", checkpoint=0)
        running.phase, running.furthest = Phase.RUNNING, furthest
        run = Run([*trials, running])
        run._stop_at_trace_end(7200.0, 7200.0)
        ((_, detail),) = run.events
        assert detail["ended"] == ended, ([t.trial_id for t in trials], furthest, detail)
