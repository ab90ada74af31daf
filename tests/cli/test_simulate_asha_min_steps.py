"""``spotwise simulate --asha-min-steps N``: asha's first rung in simulation, as a spec's
``policy_options: {min_steps: N}`` sets it for a real job. With N = 3 no trial is judged at
step 1; with the default every stop of the first rung is at step 1."""

from __future__ import annotations

import csv
import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spotwise.cli.simulate import app
from spotwise.errors import SpecError
from spotwise.planner.sim_suite import Suite

runner = CliRunner()


def _inputs(tmp_path: Path) -> list[str]:
    """Two days of an always-available zone, 9 curves of 10 steps ranked alike at every step."""
    traces, curves = tmp_path / "trace.csv.gz", tmp_path / "curves.csv"
    t0 = datetime(2023, 3, 1, tzinfo=UTC).timestamp()
    with gzip.open(traces, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "availability_zone", "instance_type", "spot_available",
                    "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"])  # fmt: skip
        for i in range(2 * 24 * 2):
            ts = datetime.fromtimestamp(t0 + i * 1800, UTC).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([ts, "us-east-2a", "p3.2xlarge", 1, 0.92, 3.06])
    with curves.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["curve_id", "step", "value", "seconds"])
        for c in range(9):
            for s in range(1, 11):
                w.writerow([f"cfg{c}", s, (0.5 + 0.04 * c) * (1 - 0.5**s), 60])
    return [
        "--traces", str(traces), "--curves", str(curves), "--policy", "asha", "--trials", "9",
        "--parallel", "1", "--seeds", "1", "--revocation-model", "none", "--start-from", "0",
        "--window-hours", "24", "--time-scale", "1", "--workers", "1", "--json",
    ]  # fmt: skip


def _run(args: list[str]) -> dict[str, Any]:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.output)
    return doc


def test_asha_min_steps_moves_the_first_rung(tmp_path: Path) -> None:
    args = _inputs(tmp_path)
    default = _run(args)
    later = _run([*args, "--asha-min-steps", "3"])

    assert (default["settings"]["asha_min_steps"], later["settings"]["asha_min_steps"]) == (1, 3)
    (run1,), (run3,) = default["runs"]["asha"], later["runs"]["asha"]
    # rungs at 1, 3, 9 by default, at 3, 9 from --asha-min-steps 3: the same 5 and 2 trials
    # are stopped at the first and second rung, each now after more steps
    assert run1["stopped_by"] == {"asha rung 1": 5, "asha rung 3": 2}
    assert run3["stopped_by"] == {"asha rung 3": 5, "asha rung 9": 2}
    assert run1["completed"] == run3["completed"] == 2  # of 10 steps each
    assert run1["steps_run"] == 5 * 1 + 2 * 3 + 2 * 10
    assert run3["steps_run"] == 5 * 3 + 2 * 9 + 2 * 10


@pytest.mark.parametrize("bad", ["0", "-2", "x"])
def test_asha_min_steps_below_1_is_refused(tmp_path: Path, bad: str) -> None:
    res = runner.invoke(app, [*_inputs(tmp_path), "--asha-min-steps", bad])
    assert res.exit_code == 2
    assert "Invalid value for '--asha-min-steps'" in res.output


def test_the_suite_checks_it_too() -> None:
    with pytest.raises(SpecError, match=r"^--asha-min-steps must be >= 1, got 0$"):
        Suite(asha_min_steps=0)
