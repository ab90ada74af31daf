"""One policy's runs of a simulation suite summed up: mean cost (absolute and against
on-demand on the same seed), regret, time and what was stopped or missed."""

from __future__ import annotations

from typing import Any

from spotwise.planner.simulator import RunResult


def summarize(rs: list[RunResult], od_cost: dict[int, float]) -> dict[str, Any]:
    import numpy as np

    def mean(key: str) -> float:
        return float(np.mean([getattr(r, key) for r in rs]))

    rel = [r.cost_usd / od_cost[r.seed] for r in rs if od_cost.get(r.seed)]
    # a run that completed no trial returned nothing: its regret is undefined, and so is the
    # policy's (a mean over the other seeds would rank a policy that failed some as good)
    regrets = [r.regret for r in rs if r.regret is not None]
    defined = len(regrets) == len(rs)
    return {
        "cost_usd": mean("cost_usd"),
        "cost_vs_on_demand": float(np.mean(rel)) if rel else None,
        "makespan_hours": mean("makespan_hours"),
        "regret": float(np.mean(regrets)) if defined else None,
        "regret_max": float(max(regrets)) if defined else None,
        "no_result": len(rs) - len(regrets),  # runs that completed no trial
        "revocations": mean("revocations"),
        "lost_hours": mean("lost_hours"),
        "overhead_hours": mean("overhead_hours"),
        "early_stopped": mean("early_stopped"),
        "budget_stopped": mean("budget_stopped"),
        "deadline_stopped": mean("deadline_stopped"),
        "completed": mean("completed"),
        "steps_run": mean("steps_run"),
        "spot_hours": mean("spot_hours"),
        "on_demand_hours": mean("on_demand_hours"),
        "refunded_hours": mean("refunded_hours"),
        "budget_exceeded": int(sum(r.budget_exceeded for r in rs)),
        "deadline_missed": int(sum(r.deadline_missed for r in rs)),
        "unfinished": int(sum(r.unfinished for r in rs)),
    }
