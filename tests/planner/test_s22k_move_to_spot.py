"""A trial moved off on-demand for a slower spot type takes that spot (review-av F2).

Uniform-progress and spotwise checkpointed a trial running on on-demand ("back to spot") at
the first decision where a slower spot type fitted the deadline clock: the slack was then at
the margin's edge, and one decision later, the trial waiting at its checkpoint with a tick
gone, the same spot no longer fitted, the job was not behind, and the trial idled until it
took the same on-demand type again, paying another start-up and minimum, and again on the
way to the deadline. A move is now judged with its changeover spent (the checkpoint write, a
decision interval and the relaunch's start-up), so the relaunch it causes finds the spot fit.

The views are the s22d tests' (a V100 at 60 s a step, a T4 at 133.3 s, start-up 60 s, a
decision every 60 s, a checkpoint write of 30 s).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_s22d_deadline_types import G4_SPOT, NOW, P3_OD, P3_SPOT, T4_SPS, decide, trial, view

from spotwise.planner.policies import deadline
from spotwise.planner.policy import Checkpoint, Launch, Phase, TrialView

MOVERS = ["uniform-progress", "spotwise"]
OFFERS = (G4_SPOT, P3_OD)
D, TICK, CKPT = 60.0, 60.0, 30.0  # the s22d view's start-up, decision interval, checkpoint


def on_od(**kw: object) -> TrialView:
    return trial(60.0, Phase.RUNNING, offer_key=P3_OD.key, instance_id="i-1", **kw)


def waiting(t: TrialView) -> TrialView:
    """``t`` after its checkpoint: waiting for an instance at the step it saved."""
    return replace(t, phase=Phase.WAITING, instance_id=None, offer_key=None, launched_at=None)


def moved(name: str, t: TrialView, left: float) -> bool:
    v = view(t, OFFERS, left)
    return any(isinstance(a, Checkpoint) for a in decide(name, v))


def launched_at(name: str, t: TrialView, left: float, after: float) -> list[str]:
    """What the decision ``after`` seconds past a move with ``left`` seconds left launches."""
    v = view(t, OFFERS, left - after, now=NOW + after, deadline=NOW + left, started_at=NOW)
    return [a.offer_key for a in decide(name, v) if isinstance(a, Launch)]


# ---- the decision after the move ------------------------------------------------------------


@pytest.mark.parametrize("name", MOVERS)
def test_the_decision_after_a_move_launches_the_spot_it_was_moved_for(name: str) -> None:
    # 20 steps of 40 left on the V100 on-demand, ahead; the T4 spot needs 2667 s for them.
    # The first decision (every 10 s from 2400 s left) that moves it, and the decisions that
    # can follow: its checkpoint written (30 s), the next tick (60 s), both (90 s). The move came
    # at 2790 s left and the next tick launched NOTHING: the trial idled 13 ticks, then took
    # the V100 on-demand again
    t = on_od(launched_at=NOW - 600)
    first = next((left for left in range(2400, 3600, 10) if moved(name, t, float(left))), None)
    assert first is not None
    # the slack at the T4's speed holds the margin (d + tick) and the changeover (30 + 60 + 60)
    assert first >= 20 * T4_SPS + (D + TICK) + (CKPT + TICK + D)
    assert first == 2940  # the first decision, 10 s apart, with 2936.7 s or more left
    for after in (CKPT, TICK, TICK + CKPT):
        assert launched_at(name, waiting(t), float(first), after) == [G4_SPOT.key], after


@pytest.mark.parametrize("name", MOVERS)
def test_no_move_where_the_spot_fits_now_but_not_after_the_changeover(name: str) -> None:
    # 2800 s left: the T4 keeps the margin today (2667 + 120 <= 2800) but not once the move's
    # 150 s are spent: it stays on the V100 on-demand
    t = on_od(launched_at=NOW - 600)
    assert not moved(name, t, 2800.0)
    assert moved(name, t, 2940.0)
    v = view(t, OFFERS, 2800.0)
    assert deadline.spot_fits(v, t, G4_SPOT)
    assert deadline.changeover_s(v) == CKPT + TICK + D
    assert not deadline.leaves_for_spot(v, t, [G4_SPOT])


# ---- the reviewer's loop: one on-demand launch, one move, then the spot -------------------


def run(name: str, left0: float, steps_total: int = 40) -> tuple[list[str], float | None]:
    """Decide every 60 s from the job's start, ``left0`` seconds before its deadline, with the
    V100 on-demand (60 s a step) and the T4 spot (133.3 s, never revoked) on offer; start-up
    60 s, a checkpoint at every step (taken at once on a move). Returns the log (``od@s``,
    ``move@s``, ``spot@s``, s: seconds since the start) and when the last step was done."""
    speed = {P3_OD.key: 60.0, G4_SPOT.key: T4_SPS}
    deadline = NOW + left0
    now, base, on, at = NOW, 0, None, 0.0  # on: the offer running, at: its launch
    log: list[str] = []

    def step_at(when: float) -> int:  # steps made by ``when`` on the current instance
        if on is None or when < at + D:
            return base
        return min(base + int((when - at - D) / speed[on]), steps_total)

    while now < deadline:
        step = step_at(now)
        if step >= steps_total:
            return log, at + D + (steps_total - base) * speed[on or ""] - NOW
        kw = {"step": step, "checkpoint_step": step, "steps_total": steps_total}
        if on is None:
            t = trial(60.0, **kw)
        else:
            t = trial(60.0, Phase.RUNNING, offer_key=on, instance_id="i", launched_at=at, **kw)
        v = view(t, OFFERS, deadline - now, now=now, deadline=deadline, started_at=NOW)
        for a in decide(name, v):
            if isinstance(a, Checkpoint) and on is not None:
                log.append(f"move@{now - NOW:.0f}")
                base, on = step, None
            elif isinstance(a, Launch) and on is None:
                log.append(f"{'spot' if a.offer_key == G4_SPOT.key else 'od'}@{now - NOW:.0f}")
                base, on, at = step, a.offer_key, now
        now += TICK
    return log, None


@pytest.mark.parametrize("name", MOVERS)
@pytest.mark.parametrize("left0", [3000.0, 3600.0, 4200.0, 4800.0])
def test_a_moved_trial_is_not_sent_back_to_on_demand(name: str, left0: float) -> None:
    # 3600 s: od@60, move@1740, od@2460 (12 ticks idle), move@3180, od@3420, the 40th step done
    # at 3600 s, the deadline itself: three on-demand launches, each with its start-up and minimum
    log, done = run(name, left0)
    assert sum(e.startswith("od@") for e in log) <= 1, log
    assert sum(e.startswith("move@") for e in log) <= 1, log
    for i, e in enumerate(log):  # the spot at the decision right after the move: no idle
        if e.startswith("move@"):
            assert log[i + 1] == f"spot@{float(e[5:]) + TICK:.0f}", log
    assert done is not None and done <= left0 - D, (log, done)  # a changeover's time to spare


@pytest.mark.parametrize("name", MOVERS)
def test_the_3600_s_job_in_numbers(name: str) -> None:
    # the V100 on-demand from the second decision (idle and not behind at the first, the T4
    # too slow), moved at step 29 with 1740 s left, the T4 spot the tick after: 11 steps there
    log, done = run(name, 3600.0)
    assert log == ["od@60", "move@1860", "spot@1920"]
    assert done == pytest.approx(1920 + D + 11 * T4_SPS)  # 3446.7 s: 153 s before the deadline


# ---- one instance type: the move is decided as before -------------------------------------


@pytest.mark.parametrize("name", MOVERS)
def test_on_one_type_the_move_is_unchanged(name: str) -> None:
    # the simulator's markets: no per-type speeds, every spot as fast as the fallback. Ahead on
    # on-demand with the slack right at the margin, it moves (no changeover counted)
    t = replace(on_od(launched_at=NOW - 600), step_seconds=())
    v = view(t, (P3_SPOT, P3_OD), 20 * 60.0 + D + TICK)
    assert not deadline.job_clock(v).safety_net  # type: ignore[union-attr]
    assert [a.trial_id for a in decide(name, v) if isinstance(a, Checkpoint)] == ["t1"]
