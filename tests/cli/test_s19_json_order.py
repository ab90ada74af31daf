"""The keys `--json` fills in (null / [] where they do not apply) come after the answer's own,
in docs/json.md's order (review-ai F4: they came first, so `status JOB --json` began with
``orchestrator`` and `tune --json` with ``error``; `cancel --json` had ``job_id`` near its end)."""

from __future__ import annotations

from spotwise.job_rows import cancel_json, status_json, tune_json


def test_filled_keys_follow_the_answers_own() -> None:
    job = {"job_id": "j-1", "state": "succeeded", "error": None, "budget": {"max_cost_usd": 5.0}}
    one = status_json(job)
    assert list(one) == ["job_id", "state", "error", "orchestrator", "budget"]
    assert list(one["budget"]) == ["max_cost_usd", "exceeded_usd"]
    summary = tune_json({"job_id": "j-1", "state": "succeeded", "cost_usd": 1.0})
    assert list(summary)[:3] == ["job_id", "state", "cost_usd"]
    assert list(summary)[3:] == ["error", "resumed", "leftover_instances", "not_ours"]
    cancelled = cancel_json({"job_id": "j-1", "state": "cancelled", "message": "done"})
    assert list(cancelled)[:3] == ["job_id", "state", "message"]
    assert cancelled["records"] == [] and cancelled["billed_to"] is None
