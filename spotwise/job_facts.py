"""What a job's stored spec says of its money, read the same way by every command: whether its
dollars are simulated (a replayed market) and its budget cap. Split from :mod:`spotwise.costs`
and :mod:`spotwise.jobs` so that `report`, `status`, `trials` and the summaries share one rule."""

from __future__ import annotations

import json
from typing import Any


def simulated(spec: Any) -> bool:
    """Whether a job traded on the replayed market: its stored spec (a dict, or its JSON)
    names providers and every one is ``local``. Its dollars are then simulated, not money:
    `report` keeps them apart (``replay``), `status`, `trials` and the summary of `tune` and
    `resume` say ``simulated``. A spec that cannot be read is not taken for a replay."""
    try:
        providers = (json.loads(spec) if isinstance(spec, str) else spec).get("providers")
    except (TypeError, ValueError, AttributeError):
        return False
    if not isinstance(providers, list) or not providers:
        return False
    return all(isinstance(p, dict) and p.get("name") == "local" for p in providers)


def budget_of(spec_json: str, cost_usd: float) -> dict[str, float] | None:
    """A job's budget cap (its stored spec's ``budget.max_cost_usd``) and, when ``cost_usd``
    ended above it, by how much; None without a cap or for a spec that cannot be read."""
    try:
        cap = json.loads(spec_json)["budget"]["max_cost_usd"]
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    if isinstance(cap, bool) or not isinstance(cap, int | float):
        return None
    over = round(cost_usd - cap, 6)
    return {"max_cost_usd": float(cap), **({"exceeded_usd": over} if over > 0 else {})}
