"""What the CLI renders: the trials table stays readable in a narrow terminal (every column
shown, nothing cut); the job summary compares with on demand honestly; a job whose every trial
failed exits 1 and says why."""

from __future__ import annotations

import pytest
from rich.console import Console

from spotwise.cli import render

TRIALS = {
    "job_id": "j-1234abcd",
    "trials": [
        {
            "number": n,
            "trial": f"t-{n:08x}",
            "params": {"dropout": 0.4241, "hidden": 111, "lr": 0.04612, "weight_decay": 0.0027},
            "step": 40 if n else 17,
            "metric": 0.9582 if n else 0.71,
            "final_metric": 0.9582 if n else None,
            "state": "completed" if n else "running",
            "revocations": n,
            "cost_usd": 0.3335 * (n + 1),
        }
        for n in range(3)
    ],
}


@pytest.mark.parametrize("width", [80, 120])
def test_trials_table_shows_every_column_whole(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    console = Console(width=width, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    render.print_trials(TRIALS)
    text = console.export_text()
    assert all(len(line) <= width for line in text.splitlines())
    header = next(line for line in text.splitlines() if line.lstrip().startswith("#"))
    for col in ("trial", "params", "step", "metric", "state", "rev", "$"):
        assert col in header.split(), (col, header)
    for value in ("t-00000002", "completed", "running", "1.0005", "0.9582", "0.71"):
        assert value in text, value  # ids, states and numbers are never cut or wrapped
    assert "hidden=111" in text and "weight_decay=" in text


SUMMARY = {
    "job_id": "j-1234abcd",
    "state": "succeeded",
    "policy": "spot-greedy",
    "best": None,
    "trials": 2,
    "completed": 2,
    "early_stopped": 0,
    "revocations": 1,
    "migrations": 1,
    "wall_seconds": 3.5,
}


@pytest.mark.parametrize(
    ("cost", "on_demand", "state", "words"),
    [
        (1.0, 4.0, "succeeded", "(75% saved)"),
        (5.0, 4.0, "succeeded", "(25% more than on demand)"),
        (0.03, 0.0, "succeeded", "(no step done to compare with on demand)"),
        # a failed job with no result saved nothing, however cheap its lives were
        (0.55, 0.83, "failed", "(no result, so nothing saved)"),
    ],
)
def test_summary_compares_with_on_demand_honestly(
    monkeypatch: pytest.MonkeyPatch, cost: float, on_demand: float, state: str, words: str
) -> None:
    console = Console(width=120, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    summary = {**SUMMARY, "state": state, "cost_usd": cost, "on_demand_cost_usd": on_demand}
    render.print_summary(summary)
    assert words in console.export_text()
    if state == "failed":
        assert "% saved" not in console.export_text()


def test_tune_exits_1_and_says_why_when_every_trial_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from spotwise import jobs
    from spotwise.cli.app import app

    failed = {
        **SUMMARY,
        "state": "failed",
        "completed": 0,
        "cost_usd": 0.03,
        "on_demand_cost_usd": 0.0,
        "error": "every trial failed (2); see the trial logs in /runs/j-1234abcd/logs",
    }
    monkeypatch.setattr(jobs, "tune", lambda *a, **k: failed)
    runner = CliRunner()
    res = runner.invoke(app, ["tune", "spec.yaml", "--json"])
    assert res.exit_code == 1 and '"state": "failed"' in res.output
    console = Console(width=120, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    res = runner.invoke(app, ["tune", "spec.yaml"])
    assert res.exit_code == 1
    assert "every trial failed (2); see the trial logs in /runs/j-1234abcd/logs" in (
        console.export_text()
    )
    monkeypatch.setattr(jobs, "tune", lambda *a, **k: {**failed, "state": "succeeded"})
    assert runner.invoke(app, ["tune", "spec.yaml", "--json"]).exit_code == 0


def test_summary_says_which_limit_bound_and_what_is_still_held(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    console = Console(width=80, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    render.print_summary(
        {
            **SUMMARY,
            "cost_usd": 0.3,
            "on_demand_cost_usd": 0.9,
            "trials_planned": 8,
            "limits": {"budget": {"stopped": 1, "never_started": 1}},
            "leftover_instances": ["i-0abc"],
        }
    )
    text = console.export_text()
    # SUMMARY has 2 trials: 1 of them stopped before starting, 6 of the 8 planned never made
    assert "budget: 1 trial(s) stopped (1 before starting); 6 of 8 planned never created" in text
    assert "still held, may be billed: i-0abc (`spotwise cancel j-1234abcd`)" in text


@pytest.mark.parametrize(
    ("extra", "hint"),
    [
        ({"state": "cancelled", "resumable": True}, True),
        ({"state": "failed", "resumable": True}, True),
        (
            {
                "state": "failed",
                "resumable": True,
                "limits": {"budget": {"stopped": 1, "never_started": 0}},
            },
            True,
        ),
        # a limit that reached a trial the policy was stopping already: nothing to resume
        (
            {
                "state": "succeeded",
                "resumable": False,
                "limits": {"deadline": {"stopped": 1, "never_started": 0}},
            },
            False,
        ),
        ({"state": "failed", "error": "every trial failed (2)"}, False),
        ({"state": "succeeded"}, False),
    ],
)
def test_summary_says_how_to_continue_a_job_that_can_be(
    monkeypatch: pytest.MonkeyPatch, extra: dict, hint: bool
) -> None:
    console = Console(width=120, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    render.print_summary({**SUMMARY, "cost_usd": 1.0, "on_demand_cost_usd": 4.0, **extra})
    text = console.export_text()
    assert ("continue it: spotwise resume j-1234abcd" in text) is hint
    assert ("--max-cost USD" in text) is (hint and "budget" in extra.get("limits", {}))


def test_summary_of_a_resumed_job_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(width=120, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    resumed = {"previous_state": "cancelled", "requeued_trials": ["t-1", "t-2"]}
    render.print_summary(
        {**SUMMARY, "cost_usd": 1.0, "on_demand_cost_usd": 4.0, "resumed": resumed}
    )
    text = console.export_text()
    assert "resumed a cancelled job: 2 trial(s) queued again from their last checkpoints" in text
