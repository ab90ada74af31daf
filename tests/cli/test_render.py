"""The trials table stays readable in a narrow terminal: every column shown, nothing cut."""

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
