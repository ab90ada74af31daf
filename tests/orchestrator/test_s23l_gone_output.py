"""`tune`'s live table whose terminal is gone by the end (review-ba BA1: a closed terminal).

The job's end was written, but the table's last picture raised EIO out of `tune`: exit 70
("internal error", itself unwritable) where the job's code was due (130 for a cancel). The
picture's failure now means stdout is gone (pointed at /dev/null), and the summary ends as a
write to a closed pipe does, which keeps the job's code (141 only when that is 0)."""

from __future__ import annotations

import errno
import io
from typing import Any

import pytest
import typer
from rich.console import Console

from spotwise.cli import jobs as cli_jobs
from spotwise.cli import render

SNAP = {
    "job_id": "j-1234abcd",
    "policy": "spot-greedy",
    "market_time": 1_677_628_800.0,
    "cost_usd": 0.1,
    "revocations": 0,
    "total": 40,
    "progress": 12,
    "trials": [
        {
            "number": 1,
            "params": {"lr": 0.01},
            "step": 12,
            "steps": 40,
            "metric": 0.12,
            "instance": "us-east-1a/spot",
            "state": "running",
            "cost_usd": 0.1,
        }
    ],
}
SUMMARY = {
    "job_id": "j-1234abcd",
    "state": "cancelled",
    "policy": "spot-greedy",
    "best": None,
    "trials": 1,
    "completed": 0,
    "revocations": 0,
    "migrations": 0,
    "early_stopped": 0,
    "cost_usd": 0.1,
    "on_demand_cost_usd": 0.3,
    "wall_seconds": 2.0,
    "limits": {},
}


class _HungUp(io.StringIO):
    """A terminal after its hangup: not a terminal any more (isatty fails), every write EIO."""

    def write(self, s: str) -> int:
        raise OSError(errno.EIO, "Input/output error")


@pytest.mark.parametrize(
    ("state", "code"),
    [("cancelled", 130), ("failed", 1), ("succeeded", None)],
)
def test_a_terminal_gone_by_the_end_keeps_the_jobs_exit_code(
    state: str, code: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.cli import stdout_gone

    quieted: list[bool] = []
    monkeypatch.setattr(stdout_gone, "gone", False)
    monkeypatch.setattr(stdout_gone, "quiet_stdout", lambda: quieted.append(True))
    monkeypatch.setattr(render, "console", Console(file=_HungUp(), width=100))

    def run(on_update: Any) -> dict[str, Any]:
        on_update(SNAP)  # drawn while the terminal was there
        return {**SUMMARY, "state": state}

    with pytest.raises((typer.Exit, SystemExit)) as e:
        cli_jobs._run_live(run, json_out=False)
    if code is None:  # nothing to keep: as a closed pipe ends (main: 141)
        assert isinstance(e.value, SystemExit) and e.value.code == 1
    else:
        assert isinstance(e.value, typer.Exit) and e.value.exit_code == code
    assert quieted == [True]  # once: the summary wrote nowhere
    render.LiveJob().update(SNAP)  # nothing more is drawn
    assert quieted == [True]
