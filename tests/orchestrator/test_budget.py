"""The budget in the real loop: never spent past ``max_cost_usd``, and said so when it binds.

The market of ``test_orchestrator`` (us-east-1a spot at $1.00/h, here always obtainable),
replayed at 60x, with a trial whose steps take 5 wall s = 300 market s, slower than the 60 s per
step a policy assumes before it has measured any: the first launch is projected at (60 s
start-up + 12 x 60 s) = $0.217, within a $0.25 budget, but would really cost about $1. The
budget guard must stop it before $0.25 and terminate its instance at once (before, the instance
was billed until the trial noticed the stop at the end of its step, up to 300 market s later,
past the budget). The local provider ends the bill when termination is asked, as AWS does, not
once the trial has wound down. The second trial is then projected at the measured speed, does
not fit, and is stopped without ever launching; after that no new trial is created.

At 60x the $0.25 (900 market s) are spent in 15 wall s (30 at 30x). The guard stops the trial
a poll plus 60 market s (a wall second) before the cap, and the termination is asked in the
same pass as the stop: milliseconds later.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_orchestrator import TRACE_TICKS, spec_dict, write_spec, write_trace

from spotwise import jobs
from spotwise.store import Store

BUDGET = 0.25


@pytest.mark.timeout(240)
def test_the_budget_is_never_exceeded_and_the_job_says_it_bound(tmp_path: Path) -> None:
    write_trace(tmp_path / "trace.csv", avail_ticks=TRACE_TICKS)
    spec = spec_dict(tmp_path, steps=12, trials=2, env={"STEADY_TRIAL_STEP_S": "5"})
    spec["providers"][0]["replay"]["speedup"] = 60.0  # 5 wall s = 300 market s a step
    spec["budget"] = {"max_cost_usd": BUDGET}
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")

    assert 0 < summary["cost_usd"] <= BUDGET, summary
    assert summary["completed"] == 0
    # the first was stopped running; the second, projected at the measured speed, never
    # launched: then no new trial is created (it could only be stopped)
    n = summary["trials"]
    assert n == 2
    assert summary["limits"] == {"budget": {"stopped": 2, "never_started": 1}}, summary
    # nothing completed because of the budget: a failed job, with the fix in its error
    assert summary["state"] == "failed"
    assert summary["error"] == (
        f"the budget (max_cost_usd {BUDGET}) was reached, or projected to be, before "
        "any trial completed; "
        "raise budget.max_cost_usd or lower steps"
    )
    with Store.open_existing(db) as store:
        job = summary["job_id"]
        (life,) = store.list_instances(job)
        stops = [e.detail["reason"] for e in store.events(job, kind="stop_early")]
        released = store.events(job, kind="error")
        (launch,) = store.events(job, kind="launch")
        first_stop = store.events(job, kind="stop_early")[0]
    # terminated by us at the budget stop, and billed within it
    assert (life.state, life.end_reason) == ("terminated", "stopped")
    assert life.cost_usd == pytest.approx(summary["cost_usd"], abs=1e-6)
    assert stops == ["budget"] * n  # once per trial, not once per tick
    assert released == []
    # billed to the stop (plus a poll), not to the end of the step the trial was in
    assert life.market_seconds <= first_stop.time - launch.time + 60.0


def test_a_budget_no_trial_fits_in_says_so_and_spends_nothing(tmp_path: Path) -> None:
    """It said the budget "was reached" at $0.00."""
    write_trace(tmp_path / "trace.csv", avail_ticks=TRACE_TICKS)
    spec = spec_dict(tmp_path, steps=12, trials=3)
    spec["budget"] = {"max_cost_usd": 0.01}  # one trial: (60 s + 12 x 60 s) at $1/h = $0.217
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    assert (summary["state"], summary["cost_usd"], summary["trials"]) == ("failed", 0.0, 1)
    assert summary["limits"] == {"budget": {"stopped": 1, "never_started": 1}}
    assert summary["error"] == (
        "no trial fits in the budget (max_cost_usd 0.01): each was projected to cost more "
        "(start-up and steps at the cheapest offer); raise budget.max_cost_usd or lower steps"
    )
