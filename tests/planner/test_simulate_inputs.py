"""Fixes from review-u to ``spotwise simulate``: ``--plot`` without matplotlib refused before the
run, a curve pool without recorded seconds not multiplied by ``--time-scale`` (and the table says
which step time was used), the metric picked as ``curve eval`` picks it, ``builtin:lcbench-
subset``, ``simulate deadline`` refusing tuning-only policies."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_simulate_cli import write_skynomad
from typer.testing import CliRunner

from spotwise.cli.simulate import app
from spotwise.errors import SpecError
from spotwise.planner.sim_curves import load_curve_pool

runner = CliRunner()


def _curves(path: Path, header: str = "curve_id,step,value", steps: int = 5) -> Path:
    rows = [f"c{c},{k},{0.5 + 0.02 * c + 0.01 * k}" for c in range(4) for k in range(1, steps + 1)]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def _sim(traces: Path, curves: str, *more: str) -> Any:
    return runner.invoke(app, [
        "--traces", str(traces), "--curves", curves, "--policy", "on-demand", "--trials", "2",
        "--parallel", "2", "--seeds", "1", "--revocation-model", "none", "--start-from", "0",
        "--window-hours", "72", "--workers", "1", *more,
    ], env={"COLUMNS": "100"})  # fmt: skip


# ---- finding 2: --plot's matplotlib is checked before the run ------------------------------
def test_plot_without_matplotlib_is_refused_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It ran the whole simulation (minutes at the defaults), printed it, and only then
    failed."""
    import spotwise.traces

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed

    def loaded(*_: Any, **__: Any) -> None:
        raise AssertionError("the trace was loaded: the run started")

    monkeypatch.setattr(spotwise.traces, "load_traces", loaded)
    res = runner.invoke(app, [
        "--traces", "builtin:skynomad-v100-2023", "--curves", "builtin:lcbench-subset",
        "--plot", str(tmp_path / "sim.png"),
    ])  # fmt: skip
    assert isinstance(res.exception, SpecError), res.exception
    assert (str(res.exception), res.exception.hint) == (
        "--plot needs matplotlib",
        "pip install 'spotwise[plot]'",
    )
    assert res.exception.exit_code == 2 and res.stdout == ""


# ---- finding 4: the 60 s prior is market seconds, not scaled by --time-scale ---------------
def test_curves_without_seconds_take_60_s_a_step_unscaled(tmp_path: Path) -> None:
    """2 trials of 5 steps on on-demand in parallel: 5 × 60 s + the 180 s restart and the
    checkpoint writes, well under an hour; it was 5 × 60 × 120 s = 10 h of market time."""
    traces = write_skynomad(tmp_path / "t.csv.gz")
    curves = str(_curves(tmp_path / "c.csv"))
    res = _sim(traces, curves, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["step_time"] == "no recorded time: 60 s per step (the prior, not scaled)"
    assert doc["settings"]["time_scale"] == 1.0
    assert doc["policies"]["on-demand"]["makespan_hours"] < 0.2
    table = _sim(traces, curves)
    assert table.exit_code == 0, table.output
    caption = " ".join(table.stdout.split())
    assert "Step time: no recorded time: 60 s per step (the prior, not scaled)." in caption
    with pytest.raises(SpecError) as e:  # a scale given for them would scale nothing
        raise _sim(traces, curves, "--time-scale", "10").exception or AssertionError("ran")
    assert str(e.value) == (
        f"--time-scale 10: {curves} records no step times, so each step lasts the 60 s prior in "
        "market seconds and nothing is scaled; drop --time-scale, or add a seconds column"
    )


def test_recorded_seconds_are_scaled_and_the_table_says_so(tmp_path: Path) -> None:
    traces = write_skynomad(tmp_path / "t.csv.gz")
    path = tmp_path / "timed.csv"
    rows = [f"c{c},{k},{0.5 + 0.01 * k},{10 * k}" for c in range(4) for k in range(1, 6)]
    path.write_text("curve_id,step,value,seconds\n" + "\n".join(rows) + "\n")
    res = _sim(traces, str(path))
    assert res.exit_code == 0, res.output
    assert (
        "Step time: recorded seconds (per-step or cumulative 'seconds' column) × 120 "
        "(--time-scale)." in " ".join(res.stdout.split())
    )
    path.write_text(path.read_text().replace("c3,5,0.55,50", "c3,5,0.55,"))
    with pytest.raises(SpecError, match=r"curve 'c3' has no recorded seconds at some step"):
        load_curve_pool(path)


# ---- finding 5: the metric is picked as curve eval picks it --------------------------------
def test_a_long_csv_with_one_metric_column_uses_it(tmp_path: Path) -> None:
    traces = write_skynomad(tmp_path / "t.csv.gz")
    curves = _curves(tmp_path / "loss.csv", header="curve_id,step,loss")
    res = _sim(traces, str(curves), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["metric"], doc["direction"]) == ("loss", "minimize")


def test_lcbench_keeps_its_documented_default_and_the_help_shows_it() -> None:
    """docs/simulation.md's results are of val_balanced_accuracy (curve eval's LCBench default
    is val_accuracy): simulate keeps its own, and says so in --help."""
    assert load_curve_pool("builtin:lcbench-subset").metric == "val_balanced_accuracy"
    text = runner.invoke(app, ["--help"], env={"COLUMNS": "80"}).output
    out = " ".join(text.replace("│", " ").split())  # the options panel's text, unwrapped
    assert "default: val_balanced_accuracy in" in out and "default: 120)" in out


# ---- finding 6: builtin:lcbench-subset from any folder -------------------------------------
def test_builtin_curves_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = write_skynomad(tmp_path / "t.csv.gz")
    monkeypatch.chdir(tmp_path)
    res = _sim(traces, "builtin:lcbench-subset", "--time-scale", "1", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["curves"].endswith(
        "lcbench-subset/blood-transfusion-service-center_curves_long.csv.gz"
    )
    assert doc["metric"] == "val_balanced_accuracy" and doc["curve_count"] == 100
    assert "--curves builtin:lcbench-subset" in runner.invoke(app, ["--help"]).output


# ---- finding 8: simulate deadline runs only deadline policies ------------------------------
@pytest.mark.parametrize("name", ["asha", "spot-greedy", "spottune"])
def test_deadline_refuses_a_tuning_policy(name: str) -> None:
    res = runner.invoke(app, ["deadline", "--traces", "nope", "--policy", f"greedy,{name}"])
    assert isinstance(res.exception, SpecError)
    assert str(res.exception) == (
        f"--policy: {name!r} is not a deadline policy; valid: on-demand, greedy, "
        "uniform-progress, spotwise"
    )
