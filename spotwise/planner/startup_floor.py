"""A lower bound on a job's start-up from the lives that never reported (review-aq AQ7).

Start-up (launch to first report, less the steps it covers) is measured at a life's first
report (:func:`spotwise.planner.runstate.startup_s`); a life taken or stopped before its first
report ran longer than its start-up: a censored observation, kept here as a floor under the
measured mean (:func:`spotwise.planner.runstate.build_view`); `spotwise resume` reads it back
from the earlier run's records (:func:`unreported_before`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spotwise.planner.runstate import Life, TrialRun


def startup_floor_s(
    trials: list[TrialRun],
    now: float,
    seconds_per_step: float | None,
    no_word_s: float | None = None,
) -> float:
    """A lower bound on the job's start-up from the lives that never reported (review-aq AQ7):
    one taken or stopped before its first report (:func:`note_unreported_life`), or one still
    waiting for it now, ran longer than its start-up plus the step its first report covers.
    Dropping them kept the 60 s default through eight lives revoked after 600-3100 s without a
    report, and the deadline admitted launches that could not report before it. Less one step
    (at the trial's speed, else ``seconds_per_step``; unknown: none), as :func:`startup_s`.

    A live life that has said nothing at all yet counts at most ``no_word_s`` (the job's "no
    word" limit, :mod:`~spotwise.planner.no_word`): past it the life is not starting but
    broken, and is released as a failed attempt. Uncapped, a silent life raised the floor
    with its own age, and the policy's start-up spare (``_starting``: three start-ups) kept
    it "starting" forever (helper E, s22)."""
    floor = 0.0
    for t in trials:
        lives = [t.unreported_life_s]
        life = t.life
        if life is not None and life.first_report_at is None and not life.exited:
            age = now - life.launched_at
            lives.append(age if life.heard or no_word_s is None else min(age, no_word_s))
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


#: a life's record's end reasons (:meth:`~spotwise.planner.ledger.Ledger._bill`) for an end
#: the cloud or the planner made: a revocation, a release on notice, a stop (or a crash, told
#: apart by its ``error`` event)
CUT_SHORT = ("revoked", "released on notice", "stopped")


def unreported_before(
    trial_id: str, rows: Sequence[Any], obs: Sequence[Any], events: Sequence[Any]
) -> float:
    """What :func:`note_unreported_life` kept of an earlier run's trial, read back from the
    store for `spotwise resume`: the longest of its lives (launch records, ``rows``) that were
    launched, never reported (no observation names them) and were ended by the cloud or the
    planner, by the market seconds its record was billed for. A life that failed by itself
    (an ``error`` event with an exit code between its ``launch`` event and the trial's next,
    in the order recorded: each run's market clock starts again) is left out, as in the run."""
    reported = {o.instance_id for o in obs}
    mine = [e for e in events if e.trial_id == trial_id]  # the job's, in the order recorded
    starts = [i for i, e in enumerate(mine) if e.kind == "launch"]
    longest = 0.0
    for r in rows:
        if r.launched_at is None or r.id in reported or r.end_reason not in CUT_SHORT:
            continue
        at = next((i for i in starts if mine[i].instance_id == r.id), None)
        if at is None:
            continue  # no launch event: not a life this planner ran
        end = next((i for i in starts if i > at), len(mine))
        if any(e.kind == "error" and "exit_code" in e.detail for e in mine[at:end]):
            continue
        longest = max(longest, float(r.market_seconds or 0.0))
    return longest
