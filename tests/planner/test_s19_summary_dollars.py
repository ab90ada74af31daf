"""The job summary (`spotwise.jobs.tune`'s answer through the Python API, `tune`'s text) gives
its dollars as the job row holds them: they were rounded to 6 places there while `status`,
`report` and `tune --json` gave the row's, so one job had two costs. ``wall_seconds`` may stay
rounded (not money)."""

from __future__ import annotations

from spotwise.planner.report import summary

TOTALS = {
    "cost_usd": 0.123456789123,  # more than 6 places: rounding would change it
    "on_demand_cost_usd": 1.000000444444,
    "revocations": 2,
    "migrations": 1,
    "early_stopped": 0,
}


def test_the_summary_does_not_round_dollars() -> None:
    out = summary("j-1", "succeeded", "spot-greedy", [], "maximize", TOTALS, 12.3456789)
    assert out["cost_usd"] == 0.123456789123
    assert out["on_demand_cost_usd"] == 1.000000444444
    assert out["wall_seconds"] == 12.346  # seconds, not money: rounded as before
    assert (out["revocations"], out["migrations"], out["early_stopped"]) == (2, 1, 0)
