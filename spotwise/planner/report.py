"""What a job reports: the best trial, the summary of `tune --json`, the live snapshot.
Pure functions over the orchestrator's trial bookkeeping."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spotwise.planner.failure_text import DISK_FULL
from spotwise.planner.policy import INVALID_METRIC
from spotwise.planner.runstate import Life, TrialRun, runs_again
from spotwise.providers.billing import BillingRule


def best_trial(trials: Sequence[TrialRun], direction: str) -> TrialRun | None:
    """The completed trial with the best final metric (ties: the earlier trial)."""
    done = [t for t in trials if t.state == "completed" and t.final_metric is not None]
    if not done:
        return None
    sign = 1.0 if direction == "maximize" else -1.0
    return max(done, key=lambda t: (sign * (t.final_metric or 0.0), -t.number))


def reported_final(t: TrialRun) -> bool:
    """Whether the trial reported its metric at its last step (``steps``): a finite value (its
    final metric), or NaN/inf as its latest report there (a diverged end: no final metric).
    A step reached by a checkpoint alone is not a report: the trial's result is what it
    reported at ``steps``."""
    return t.final_metric is not None or (t.metric_invalid and t.furthest >= t.steps_total)


def last_reported(t: TrialRun) -> int | None:
    """The furthest step the trial reported its metric at (a NaN/inf report too), in this run
    or, for a trial queued again by `spotwise resume`, in the earlier one; None: never."""
    seen = [*t.curve, *t.reported] + ([t.furthest] if t.furthest else [])
    return max(seen) if seen else None


def unreported_final(t: TrialRun, metric: str) -> str:
    """Why a trial whose work is done (its checkpoint or its reports reached ``steps``) has no
    result: it never reported ``metric`` at ``steps``."""
    total, last = t.steps_total, last_reported(t)
    reached = max(t.step, t.checkpoint_step)
    head = f"the trial reached step {reached} of {total}"
    how = f"report(step, value) at step {total} is the result"
    if last is None:
        return f"{head} but never reported {metric}; {how}"
    if last == total - 1:  # 0-indexed steps, most likely
        return f"{head} but reported {metric} only up to step {last} (steps count from 1: {how})"
    if last < total:
        return f"{head} but reported {metric} only up to step {last} ({how})"
    return f"{head} but reported {metric} at steps up to {last}, not at step {total} ({how})"


def best_of(t: TrialRun, direction: str) -> float | None:
    if not t.curve:
        return None
    vals = list(t.curve.values())
    return max(vals) if direction == "maximize" else min(vals)


def life_cost(
    life: Life,
    segments: list[tuple[float, float]],
    rule: BillingRule,
    revoked: bool,
    kept_step: int,
    seconds_per_step: float | None = None,
) -> tuple[float, float, float]:
    """``(cost, on_demand_reference, seconds)`` of one instance life.

    The on-demand reference prices only the *useful* part of the life at the on-demand price:
    what the same progress would have cost on on-demand capacity, which is never revoked. Useful
    is the steps that were kept (``kept_step``, not those redone after a revocation) at the
    trial's measured ``seconds_per_step``, plus the start-up of the trial's first life only: an
    on-demand run starts once, so the start-up each spot relaunch pays is not work it would
    have paid for (counting it made every migration look like a saving). Without a measured
    speed, the life's seconds are split by steps (start-up included). Never more than the
    life's own seconds.
    """
    cost = rule.charge(segments, revoked_by_provider=revoked, market=life.offer.market)
    seconds = sum(s for s, _ in segments)
    useful_s = _useful_seconds(life, seconds, kept_step, seconds_per_step)
    return cost, useful_s * life.offer.on_demand_price_per_hour / 3600.0, seconds


def _useful_seconds(
    life: Life, seconds: float, kept_step: int, seconds_per_step: float | None
) -> float:
    """The seconds of a life an on-demand run would have paid for too (see :func:`life_cost`)."""
    ran = max(life.max_step - life.start_step, 0)
    useful = max(min(life.max_step, kept_step) - life.start_step, 0)
    if not ran or not useful:
        return 0.0
    if seconds_per_step and life.first_report_at is not None:
        useful_s = useful * seconds_per_step
        if life.start_step == 0:  # the one start-up an on-demand run pays too
            useful_s += _start_up(life, seconds_per_step)
        return min(useful_s, seconds)
    return seconds * (useful / ran)


def _start_up(life: Life, seconds_per_step: float | None) -> float:
    """Market seconds from the launch to the first step (the first report, less the steps it
    took after the resume step at ``seconds_per_step``)."""
    assert life.first_report_at is not None
    before = (life.first_report_step - life.start_step) * (seconds_per_step or 0.0)
    return max(life.first_report_at - life.launched_at - before, 0.0)


def running_reference(
    life: Life,
    segments: list[tuple[float, float]],
    kept_step: int,
    seconds_per_step: float | None,
) -> float:
    """The on-demand reference of a life not billed yet, up to the end of ``segments`` (now):
    the same seconds its running spend covers, at the on-demand price, under the start-up rule
    of :func:`life_cost` (an on-demand run starts once per trial: a relaunch's start-up is
    left out; without a measured speed it cannot be told apart and is counted, as there).

    A life whose trial has left (``life.exited``) is only waiting for its end: its reference is
    the work it did, as its bill will count it (``kept_step``). Its bill replaces all this."""
    seconds = sum(s for s, _ in segments)
    if life.exited:
        useful_s = _useful_seconds(life, seconds, kept_step, seconds_per_step)
    elif life.start_step == 0:
        useful_s = seconds  # the one start-up an on-demand run pays too, then its steps
    elif life.first_report_at is None:
        useful_s = 0.0  # a relaunch still starting up: not paid by an on-demand run
    elif seconds_per_step:
        useful_s = max(seconds - _start_up(life, seconds_per_step), 0.0)
    else:
        useful_s = seconds
    return useful_s * life.offer.on_demand_price_per_hour / 3600.0


def release_is_cheaper(
    rule: BillingRule,
    until_now: list[tuple[float, float]],
    until_deadline: list[tuple[float, float]],
) -> bool:
    """After an interruption notice, with the trial already gone: is terminating the instance
    ourselves now no dearer than letting the provider take it at the notice deadline?

    Waiting pays for the rest of the notice but may earn the provider's refund (AWS: a spot
    instance it interrupts within its first hour is free); terminating ourselves never does.
    Ties go to terminating now (the capacity is released sooner). The simulator applies the
    same rule.
    """
    now = rule.charge(until_now, revoked_by_provider=False)
    return now <= rule.charge(until_deadline, revoked_by_provider=True)


def summary(
    job_id: str,
    state: str,
    policy: str,
    trials: Sequence[TrialRun],
    direction: str,
    totals: dict[str, float],
    wall_seconds: float,
) -> dict[str, Any]:
    best = best_trial(trials, direction)
    return {
        "job_id": job_id,
        "state": state,
        "policy": policy,
        "best": None
        if best is None
        else {
            "trial": best.trial_id,
            "number": best.number,
            "params": best.params,
            "metric": best.final_metric,
        },
        "trials": len(trials),
        "completed": sum(1 for t in trials if t.state == "completed"),
        "failed": sum(1 for t in trials if t.state == "failed"),
        "last_failure": last_failure(trials),
        "revocations": int(totals["revocations"]),
        "migrations": int(totals["migrations"]),
        "early_stopped": int(totals["early_stopped"]),
        # the dollars as the job row holds them, not rounded: `status`, `report` and
        # `tune --json` give the row's, and a script comparing them must see one number
        "cost_usd": totals["cost_usd"],
        "on_demand_cost_usd": totals["on_demand_cost_usd"],
        "wall_seconds": round(wall_seconds, 3),
        "limits": limits(trials),
    }


def last_failure(trials: Sequence[TrialRun]) -> str | None:
    """The error of the last failed trial that has one (by number: the order trials were made),
    None when no failed trial has one."""
    return next(
        (t.last_error for t in reversed(trials) if t.state == "failed" and t.last_error), None
    )


def limits(trials: Sequence[TrialRun]) -> dict[str, dict[str, int]]:
    """Trials the budget or the deadline stopped: how many, and how many of them never ran.
    A trial a limit reached while it was already stopping for another reason (the curve rule,
    the other limit) counts too: that limit did stop it (the budget terminates its instance)."""
    out: dict[str, dict[str, int]] = {}
    for t in trials:
        if t.state != "stopped_early":
            continue
        for limit in t.limits_hit:
            row = out.setdefault(limit, {"stopped": 0, "never_started": 0})
            row["stopped"] += 1
            row["never_started"] += t.lives_started == 0
    return out


def end_state(
    trials: Sequence[TrialRun], cancelled: bool, max_cost_usd: float | None, logs: str
) -> tuple[str, str | None]:
    """The state a job that ran to its end is left in, and the error that says why it failed:
    nothing but crashes, or a limit that left no result, is not a success (a cron job or CI
    must not read it as one)."""
    if cancelled:
        return "cancelled", None
    if trials and all(t.state == "failed" for t in trials):
        last = last_failure(trials)
        because = f"; the last error: {last}" if last else ""
        see = "" if last and DISK_FULL in last else f"; see the trial logs in {logs}"
        return "failed", f"every trial failed ({len(trials)}){because}{see}"
    # NaN/inf ends: completed on one, or stopped early for one (policy.INVALID_METRIC)
    nan = [t for t in trials if t.stop_reason == INVALID_METRIC or t.state == "completed"]
    if nan and best_trial(trials, "maximize") is None and any(t.metric_invalid for t in nan):
        return "failed", (
            f"no trial reported a usable final metric ({len(nan)} ended on NaN or inf); "
            f"see the trial logs in {logs}"
        )
    why = nothing_to_show(trials, max_cost_usd)
    if why:
        return "failed", why
    if best_trial(trials, "maximize") is None:  # whatever the cause: no result is no success
        return "failed", no_final(trials, logs)
    return "succeeded", None


def no_final(trials: Sequence[TrialRun], logs: str) -> str:
    """Why a job that ran to its end has no best trial, when neither a failure of every trial,
    NaN/inf ends nor a limit says so: how its trials ended."""
    if not trials:
        return "no trial ran"
    ends: dict[str, int] = {}
    for t in trials:
        ends[t.state.replace("_", " ")] = ends.get(t.state.replace("_", " "), 0) + 1
    how = ", ".join(f"{n} {state}" for state, n in ends.items())
    steps = trials[0].steps_total
    return (
        f"no trial reported a final metric (a finite value at step {steps}): {how}; "
        f"see the trial logs in {logs}"
    )


def nothing_to_show(trials: Sequence[TrialRun], max_cost_usd: float | None) -> str | None:
    """Why a job that ran trials has no completed one, when a limit is the reason."""
    if not trials or any(t.state == "completed" for t in trials):
        return None
    reasons = {limit for t in trials for limit in t.limits_hit}
    if "budget" in reasons and all(t.lives_started == 0 for t in trials):
        return (
            f"no trial fits in the budget (max_cost_usd {max_cost_usd}): each was projected to "
            "cost more (start-up and steps at the cheapest offer); raise budget.max_cost_usd or "
            "lower steps"
        )
    if "budget" in reasons:
        return (
            f"the budget (max_cost_usd {max_cost_usd}) was reached, or projected to be, before "
            "any trial completed; raise budget.max_cost_usd or lower steps"
        )
    if "deadline" in reasons:
        return (
            "the deadline was reached, or projected to be, before any trial completed; "
            "raise budget.deadline_hours or lower steps"
        )
    return None


def snapshot(
    job_id: str,
    policy: str,
    trials: Sequence[TrialRun],
    now: float,
    cost_usd: float,
    totals: dict[str, float],
    total_steps: int,
    direction: str = "",
) -> dict[str, Any]:
    """The live view's picture of a running job; ``direction`` (the metric's ``maximize`` or
    ``minimize``) tells which finished trials are the best (the live table shows those first
    when not every trial fits the terminal)."""
    rows = [
        {
            "number": t.number,
            "trial": t.trial_id,
            "params": t.params,
            "step": t.step,
            "steps": t.steps_total,
            "metric": t.last_metric,
            "state": t.state,
            "instance": f"{t.life.offer.zone}/{t.life.offer.market.value}" if t.life else "",
            "cost_usd": t.cost_usd,
            "revocations": t.revocations,
        }
        for t in trials
    ]
    done_steps = sum(
        t.steps_total if t.state == "completed" else min(t.step, t.steps_total) for t in trials
    )
    return {
        "job_id": job_id,
        "policy": policy,
        "trials": rows,
        "market_time": now,
        "cost_usd": cost_usd,
        "revocations": int(totals["revocations"]),
        "migrations": int(totals["migrations"]),
        "progress": done_steps,
        "total": total_steps,
        "direction": direction,
    }


def resumable(trials: Sequence[TrialRun], planned: int) -> bool:
    """Whether `spotwise resume` would run anything of the job (planner/resume.py's rules): a
    trial left unfinished, one the budget or deadline stopped first, or one never made."""
    return len(trials) < planned or any(runs_again(t.state, t.stop_reason) for t in trials)
