"""What a job reports: the best trial, the summary of `tune --json`, the live snapshot.
Pure functions over the orchestrator's trial bookkeeping."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spotwise.planner.runstate import Life, TrialRun
from spotwise.providers.billing import BillingRule


def best_trial(trials: Sequence[TrialRun], direction: str) -> TrialRun | None:
    """The completed trial with the best final metric (ties: the earlier trial)."""
    done = [t for t in trials if t.state == "completed" and t.final_metric is not None]
    if not done:
        return None
    sign = 1.0 if direction == "maximize" else -1.0
    return max(done, key=lambda t: (sign * (t.final_metric or 0.0), -t.number))


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
) -> tuple[float, float, float]:
    """``(cost, on_demand_reference, seconds)`` of one instance life.

    The on-demand reference prices only the *useful* part of the life (the steps that were kept,
    ``kept_step``, rather than redone after a revocation) at the on-demand price: what the same
    progress would have cost on on-demand capacity, which is never revoked.
    """
    cost = rule.charge(segments, revoked_by_provider=revoked)
    seconds = sum(s for s, _ in segments)
    ran = max(life.max_step - life.start_step, 0)
    useful = max(min(life.max_step, kept_step) - life.start_step, 0)
    useful_s = seconds * (useful / ran) if ran else 0.0
    return cost, useful_s * life.offer.on_demand_price_per_hour / 3600.0, seconds


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
        "revocations": int(totals["revocations"]),
        "migrations": int(totals["migrations"]),
        "early_stopped": int(totals["early_stopped"]),
        "cost_usd": round(totals["cost_usd"], 6),
        "on_demand_cost_usd": round(totals["on_demand_cost_usd"], 6),
        "wall_seconds": round(wall_seconds, 3),
    }


def snapshot(
    job_id: str,
    policy: str,
    trials: Sequence[TrialRun],
    now: float,
    cost_usd: float,
    totals: dict[str, float],
    total_steps: int,
) -> dict[str, Any]:
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
    }
