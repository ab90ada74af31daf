"""A lower bound on a job's start-up from the lives that never reported (review-aq AQ7).

Start-up (launch to first report, less the steps it covers) is measured at a life's first
report (:func:`spotwise.planner.runstate.startup_s`); a life taken or stopped before its first
report ran longer than its start-up: a censored observation, kept here as a floor under the
measured mean (:func:`spotwise.planner.runstate.build_view`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotwise.planner.runstate import Life, TrialRun


def startup_floor_s(trials: list[TrialRun], now: float, seconds_per_step: float | None) -> float:
    """A lower bound on the job's start-up from the lives that never reported (review-aq AQ7):
    one taken or stopped before its first report (:func:`note_unreported_life`), or one still
    waiting for it now, ran longer than its start-up plus the step its first report covers.
    Dropping them kept the 60 s default through eight lives revoked after 600-3100 s without a
    report, and the deadline admitted launches that could not report before it. Less one step
    (at the trial's speed, else ``seconds_per_step``; unknown: none), as :func:`startup_s`."""
    floor = 0.0
    for t in trials:
        lives = [t.unreported_life_s]
        if t.life is not None and t.life.first_report_at is None and not t.life.exited:
            lives.append(now - t.life.launched_at)
        sps = t.seconds_per_step or seconds_per_step
        step_s = max(t.restart_steps, 1) * sps if sps else 0.0
        floor = max(floor, max(lives) - step_s)
    return floor


def note_unreported_life(t: TrialRun, life: Life, ended_at: float, cut_short: bool) -> None:
    """Keep the length of a life that ended before its first report when the cloud or the
    planner ended it (``cut_short``: its start-up was longer than the life); a life that failed
    by itself tells nothing about the start-up."""
    if cut_short and life.first_report_at is None:
        t.unreported_life_s = max(t.unreported_life_s, ended_at - life.launched_at)
