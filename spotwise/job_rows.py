"""The rows the job commands answer with (`status`, `trials`, `tune`, `cancel`), and the shape
of their ``--json``: every key docs/json.md lists is there, ``null`` / ``[]`` when it does not
apply, so a script reads ``out["orchestrator"]`` rather than ``out.get("orchestrator")``
(review-af F8). Split from :mod:`spotwise.jobs`.

The core functions keep their sparse dicts (a key only when it applies: what the Python API
and its tests read); :func:`status_json`, :func:`tune_json` and :func:`cancel_json` fill in the
rest for the command line, before the JSON or the text is printed."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from typing import Any

from spotwise.job_facts import simulated
from spotwise.liveness import orchestrator_state
from spotwise.states import FINISHED_JOB_STATES


def bill_split(
    cost_usd: float, finished: bool, closed_usd: float, held_usd: float
) -> dict[str, float]:
    """A job's ``cost_usd`` as ``billed_usd`` (final bills) + ``running_usd`` (the rest: lives
    still held, estimated), the two adding up to ``cost_usd`` exactly (as floats). Not
    finished: its ``cost_usd`` is its orchestrator's last save, the bills written by then
    (``closed_usd``, :meth:`~spotwise.store.Store.bill_sums`) plus its running lives as if
    they ended then; the rest is running. Finished: what its records still open hold
    (``held_usd``: billed up to its end, a leftover `spotwise cancel` bills further) is
    running, the rest billed. A difference below a billionth of the cost is the float sum's
    order (the orchestrator added its bills as they came): 0."""
    running = held_usd if finished else cost_usd - closed_usd
    running = min(max(running, 0.0), max(cost_usd, 0.0))
    if running <= 1e-9 * abs(cost_usd):
        running = 0.0
    billed = cost_usd - running
    for _ in range(8):  # one step of the last digit at most, in practice
        if billed + running == cost_usd:
            break
        running = math.nextafter(running, math.inf if billed + running < cost_usd else -math.inf)
    return {"billed_usd": billed, "running_usd": running}


def job_dict(job: Any, bills: tuple[float, float]) -> dict[str, Any]:
    """A job's row; ``bills``: its records' sums, :meth:`~spotwise.store.Store.bill_sums`."""

    def v(x: Any) -> Any:
        return x.value if hasattr(x, "value") else x

    state = v(job.state)
    finished = state in FINISHED_JOB_STATES
    return {
        "job_id": job.id,
        "name": job.name,
        "state": state,
        "policy": job.policy,
        "direction": job.direction,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        # wall time its orchestrator last said it was alive (every few seconds while it runs)
        "heartbeat_at": getattr(job, "heartbeat_at", None),
        "best_trial": job.best_trial_id,
        "best_metric": job.best_metric,
        "cost_usd": job.cost_usd,
        "on_demand_cost_usd": job.on_demand_cost_usd,
        # not finished: running lives as if they ended at the orchestrator's last save (a dead
        # one's is stale: `spotwise cancel` bills them); the end writes the billed totals
        "cost_is_estimate": not finished,
        **bill_split(job.cost_usd, finished, *bills),
        "simulated": simulated(job.spec_json),  # the replayed market's dollars: not money
        "revocations": job.revocations,
        "migrations": job.migrations,
        "early_stopped": job.early_stopped,
        "error": job.error,
    }


def spec_order(job: Any) -> list[str]:
    """The job's parameter names in its spec's order (its stored spec keeps it; the stored
    params, JSON with sorted keys, do not); none for a spec that cannot be read."""
    try:
        space = json.loads(job.spec_json).get("search_space")
    except (TypeError, ValueError, AttributeError):
        return []
    return list(space) if isinstance(space, dict) else []


def params(params_json: str, order: list[str]) -> dict[str, Any]:
    """Stored params in the spec's ``order``, as `tune` shows them (names it lacks last)."""
    stored = json.loads(params_json)
    return {**{n: stored[n] for n in order if n in stored}, **stored}


def trial_dict(t: Any, order: list[str] | None = None) -> dict[str, Any]:
    return {
        "trial": t.id,
        "number": t.number,
        "state": t.state.value if hasattr(t.state, "value") else t.state,
        "params": params(t.params_json, order or []),
        "step": t.step,
        "metric": t.metric,
        "best_metric": t.best_metric,
        "final_metric": t.final_metric,
        "predicted_final": t.predicted_final,
        "checkpoint_step": t.checkpoint_step,
        "cost_usd": t.cost_usd,
        "revocations": t.revocations,
        "migrations": t.migrations,
    }


def with_orchestrator(job: Any, bills: tuple[float, float]) -> dict[str, Any]:
    """:func:`job_dict`, and for a job not finished where its orchestrator is: ``here``,
    ``elsewhere``, ``hidden``, or ``gone`` (a crash: `spotwise cancel JOB` closes it)."""
    out = job_dict(job, bills)
    if out["state"] in ("pending", "running"):
        out["orchestrator"] = orchestrator_state(job)
    return out


#: A running job whose orchestrator wrote no heartbeat for longer (it writes one every 2 to 5 s)
#: is said to be quiet by `spotwise status` (review-ax AX4: frozen, stopped, its machine asleep).
QUIET_AFTER_S = 60.0


def quiet_note(job: dict[str, Any], now: float | None = None) -> str | None:
    """`status`'s line for a running job whose orchestrator has not been heard from for over
    :data:`QUIET_AFTER_S` (its ``heartbeat_at``): None otherwise, and for a finished job or one
    whose orchestrator is gone (said on its own)."""
    beat = job.get("heartbeat_at")
    if job.get("state") != "running" or beat is None or job.get("orchestrator") == "gone":
        return None
    ago = (time.time() if now is None else now) - float(beat)
    if ago <= QUIET_AFTER_S:
        return None
    return (
        f"{job['job_id']}: its orchestrator was last heard {ago:.0f} s ago (it writes every few "
        "seconds while it runs: stopped, asleep, or waiting on the database?)"
    )


def last_active(jobs: Iterable[Any]) -> Any | None:
    """The job most recently active: the latest of its start, heartbeat and end (its creation
    when it has none), ties to the newest created. `trials` without a JOB shows it: after
    `spotwise resume` of an older job, that job, not the newest created (review-af F11)."""

    def when(job: Any) -> tuple[float, float, str]:
        times = [job.started_at, getattr(job, "heartbeat_at", None), job.ended_at]
        seen = [t for t in times if t is not None]
        return (max(seen) if seen else job.created_at, job.created_at, job.id)

    return max(jobs, key=when, default=None)


# ---- the --json shapes (docs/json.md) --------------------------------------------------------
def _filled(out: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``out`` with each key of ``defaults`` it lacks (a fresh copy of the default) after its
    own, in ``out``'s order (review-ai F4: the defaults came first)."""
    missing = {k: v for k, v in defaults.items() if k not in out}
    return {
        **out,
        **{k: (v.copy() if isinstance(v, list | dict) else v) for k, v in missing.items()},
    }


def _job_json(job: dict[str, Any]) -> dict[str, Any]:
    """A job with ``orchestrator`` (null: finished) where a running job has it: after ``error``."""
    if "orchestrator" in job:
        return job
    out: dict[str, Any] = {}
    for k, v in job.items():
        out[k] = v
        if k == "error":
            out["orchestrator"] = None
    return _filled(out, {"orchestrator": None})


def status_json(out: dict[str, Any]) -> dict[str, Any]:
    """`status` (one job, or the listing) with every documented key: ``orchestrator`` null
    for a finished job, ``budget`` null without a cap, ``budget.exceeded_usd`` null within it."""
    if "jobs" in out and "job_id" not in out:
        return {**out, "jobs": [_job_json(j) for j in out["jobs"]]}
    one = _job_json(out)
    budget = one.get("budget")
    one["budget"] = None if budget is None else _filled(budget, {"exceeded_usd": None})
    return one


def tune_json(out: dict[str, Any]) -> dict[str, Any]:
    """`tune`'s and `resume`'s summary with every documented key: ``error`` and ``resumed``
    null, ``leftover_instances`` and ``not_ours`` [] when they do not apply; each limit's
    ``exceeded_usd`` null unless the budget's cost ended above its cap."""
    full = _filled(out, {"error": None, "resumed": None, "leftover_instances": [], "not_ours": []})
    limits = full.get("limits")
    if isinstance(limits, dict):
        full["limits"] = {k: _filled(v, {"exceeded_usd": None}) for k, v in limits.items()}
    return full


#: What `cancel` answers when a key does not apply (its paths each fill a part of it).
CANCEL_DEFAULTS: dict[str, Any] = {
    "stopping": False,
    "terminated_instances": [],
    "open_instances": [],
    "closed_records": 0,
    "records": [],
    "found_instances": [],
    "looked_in": [],
    "errors": [],
    "billed_to": None,
    "on_demand_unknown": [],
    "not_ours": [],
}


def cancel_json(out: dict[str, Any]) -> dict[str, Any]:
    """`cancel`'s answer with every documented key (:data:`CANCEL_DEFAULTS`), each record's
    ``error`` and ``note`` null when it has none."""
    full = _filled(out, CANCEL_DEFAULTS)
    full["records"] = [_filled(r, {"error": None, "note": None}) for r in full["records"]]
    return full
