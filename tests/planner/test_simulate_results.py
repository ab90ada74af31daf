"""What ``spotwise simulate`` says about runs that complete nothing, and about the limits.

A run that completed no trial returned nothing (``spotwise tune`` reports no best trial then):
it used to get the regret of the trial with the best last metric, as if that trial had run to
its end (often 0, or the same as a policy that completed trials), and a policy whose runs
completed nothing could rank best. Its regret is now null ("—" in the table), and so is the
policy's mean over seeds. Trials stopped by the budget or the deadline are counted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from plan_helpers import T0, curve, make_traces
from test_simulate_cli import write_curves, write_skynomad
from typer.testing import CliRunner

from spotwise.cli import simulate_render
from spotwise.cli.simulate import app
from spotwise.planner.policy import get_policy
from spotwise.planner.sim_suite import summarize
from spotwise.planner.simulator import Engine, RunResult, SimSettings
from spotwise.providers.billing import rule_for
from spotwise.providers.replay import ReplayMarket

runner = CliRunner()
SETTINGS = SimSettings(parallel=1, time_scale=1.0, restart_overhead_s=120.0, checkpoint_s=10.0)


def one_run(seed: int = 0, **settings: Any) -> RunResult:
    """On-demand ($3/h) on two trials of 12 steps x 600 s: $6.12 each to complete."""
    tr = make_traces({"z": [1] * 300}, {"z": 0.8})
    cs = [curve("best", 0.9, steps=12), curve("other", 0.8, steps=12)]
    s = SimSettings(**{**SETTINGS.__dict__, **settings})  # type: ignore[arg-type]
    r = Engine(get_policy("on-demand"), ReplayMarket(tr), rule_for("aws"), cs, s, T0).run()
    r.seed = seed
    return r


def test_a_run_that_completes_no_trial_has_no_regret() -> None:
    r = one_run(max_cost_usd=3.0)  # the first trial is stopped half-way, the second never fits
    assert r.completed == 0 and r.stopped_by == {"budget": 2}
    assert r.budget_stopped == 2 and r.deadline_stopped == 0
    assert (r.returned, r.returned_final, r.regret) == (None, None, None)
    assert json.loads(json.dumps(r.as_dict()))["regret"] is None
    done = one_run()
    assert done.completed == 2 and done.returned == "best" and done.regret == 0.0
    assert done.budget_stopped == done.deadline_stopped == 0


def test_trials_stopped_by_the_deadline_are_counted() -> None:
    r = one_run(deadline_s=3600.0)  # one trial needs 2 h
    assert r.completed == 0 and r.regret is None
    assert r.deadline_stopped == 2 and r.budget_stopped == 0


def test_the_summary_gives_no_regret_to_a_policy_with_a_run_that_returned_nothing() -> None:
    ok, failed = one_run(0), one_run(1, max_cost_usd=3.0)
    s = summarize([ok, failed], {0: ok.cost_usd, 1: failed.cost_usd})
    assert (s["regret"], s["regret_max"], s["no_result"]) == (None, None, 1)
    assert (s["budget_stopped"], s["deadline_stopped"], s["completed"]) == (1.0, 0.0, 1.0)
    s = summarize([ok, one_run(1)], {})
    assert (s["regret"], s["regret_max"], s["no_result"]) == (0.0, 0.0, 0)


def test_simulate_shows_no_regret_for_a_policy_that_completed_nothing(tmp_path: Path) -> None:
    """At $7.50, on-demand completes no trial (a trial costs $6.80 or more, and the guard stops
    a trial half an hour of ticks early): its regret was a number, as if each seed had
    returned its best-looking partial trial."""
    traces = write_skynomad(tmp_path / "trace.csv.gz")
    curves = write_curves(tmp_path / "curves.csv")
    args = [
        "--traces", str(traces), "--curves", str(curves), "--policy", "on-demand,spot-greedy",
        "--trials", "4", "--parallel", "2", "--seeds", "2", "--revocation-model", "none",
        "--start-from", "0", "--window-hours", "72", "--time-scale", "1", "--workers", "1",
        "--max-cost", "7.5",
    ]  # fmt: skip
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    od, greedy = doc["policies"]["on-demand"], doc["policies"]["spot-greedy"]
    assert [r["completed"] for r in doc["runs"]["on-demand"]] == [0, 0]
    assert [r["regret"] for r in doc["runs"]["on-demand"]] == [None, None]
    assert (od["regret"], od["regret_max"], od["no_result"]) == (None, None, 2)
    assert (od["budget_stopped"], od["deadline_stopped"]) == (2.0, 0.0)
    assert greedy["no_result"] == 0 and greedy["regret"] == pytest.approx(0.2198, abs=1e-4)
    assert greedy["budget_stopped"] == 2.0

    res = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in res.output
    header = next(line.split() for line in lines if line.split()[:1] == ["policy"])
    assert header == [
        "policy", "cost", "$", "vs", "OD", "hours", "regret", "revoc", "lost", "stop", "limit",
        "done",
    ]  # fmt: skip
    rows = {
        row[0]: row for row in map(str.split, lines) if row[:1] in (["on-demand"], ["spot-greedy"])
    }
    assert rows["on-demand"][4:] == ["—", "0.0", "0.00", "0.0", "2.0", "0.0"]
    assert rows["spot-greedy"][4:] == ["0.2198", "2.0", "0.45", "0.0", "2.0", "1.0"]
    caption = " ".join(res.output.split())
    assert "limit: trials stopped by the budget or deadline" in caption
    assert "regret —: some runs completed no trial and returned nothing (on-demand: 2 of 2)." in (
        caption
    )


def _result(names: list[str], cost: float) -> dict[str, Any]:
    p = {"cost_usd": cost, "cost_vs_on_demand": 1.0, "makespan_hours": 123.4, "regret": 0.01234,
         "revocations": 15.0, "lost_hours": 0.96, "early_stopped": 16.0, "budget_stopped": 17.5,
         "deadline_stopped": 2.0, "completed": 100.0, "no_result": 0}  # fmt: skip
    return {
        "settings": {"trials": 100, "parallel": 8},
        "seeds": [0, 1, 2],
        "metric": "val_balanced_accuracy",
        "direction": "maximize",
        "revocation_model": "pretrained lstm (shipped)",
        "policies": {n: dict(p) for n in names},
    }


def test_the_limit_column_moves_to_a_footer_line_when_80_columns_are_too_few(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    simulate_render.tuning_table(_result(["on-demand", "spotwise"], 14.07))
    out = capsys.readouterr().out
    assert re.search(r"^ *policy .* limit +done *$", out, re.M)
    assert re.search(r"^ *spotwise .* 19\.5 +100\.0 *$", out, re.M)

    names = ["on-demand", "spot-greedy", "spottune", "spotwise", "uniform-progress"]
    simulate_render.tuning_table(_result(names, 1234.56))
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in out
    assert re.search(r"^ *policy .* stop +done *$", out, re.M)  # no limit column
    assert re.search(r"^ *uniform-progress +1234\.56 .* 16\.0 +100\.0 *$", out, re.M)
    footer = " ".join(out[out.index("limit (") :].split())
    assert footer == (
        "limit (trials stopped by the budget or deadline): on-demand 19.5 · spot-greedy 19.5 · "
        "spottune 19.5 · spotwise 19.5 · uniform-progress 19.5."
    )
    assert " · limit: " not in " ".join(out.split())  # said once, in the footer
