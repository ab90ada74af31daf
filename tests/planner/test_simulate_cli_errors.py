"""``spotwise simulate`` / ``simulate deadline`` as a user meets them: every bad number names
its flag and range in one line, valid names come from the registries, hints point at the
shipped data (``builtin:skynomad-v100-2023``), tables and help stay whole at 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spotwise.cli import simulate_render
from spotwise.cli.simulate import SHIPPED_CURVES, app
from spotwise.errors import SpecError
from spotwise.predictors.revocation import MODEL_NAMES
from spotwise.providers.billing import RULES

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
MODELS = ", ".join(("pretrained", "none", *MODEL_NAMES))
BILLING = ", ".join(("paper", *RULES))
TUNE = ["--traces", "nope", "--curves", "nope"]  # the checks come before anything is loaded
DEADLINE = ["deadline", "--traces", "nope"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    return subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "simulate", *args],
        env={**base, "COLUMNS": "80"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _spec_error(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert isinstance(res.exception, SpecError), res.output
    return str(res.exception)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--time-scale", "-1"], "--time-scale must be > 0, got -1"),
        (["--time-scale", "nan"], "--time-scale must be > 0, got nan"),
        (["--restart-seconds", "-1"], "--restart-seconds must be >= 0, got -1"),
        (["--checkpoint-seconds", "-5"], "--checkpoint-seconds must be >= 0, got -5"),
        (["--max-cost", "0"], "--max-cost must be > 0 (USD), got 0"),
        (["--deadline-hours", "-2"], "--deadline-hours must be > 0, got -2"),
        (["--theta", "1"], "--theta must be in (0, 1), got 1"),
        (["--start-from", "1.5"], "--start-from must be in [0, 1), got 1.5"),
        (["--window-hours", "0"], "--window-hours must be > 0, got 0"),
        (["--spot-price", "0"], "--spot-price must be > 0 ($/h), got 0"),
        (["--on-demand-price", "-1"], "--on-demand-price must be > 0 ($/h), got -1"),
        (["--revocation-model", "bogus"], f"--revocation-model: unknown 'bogus'; valid: {MODELS}"),
    ],
)
def test_tuning_numbers_name_their_flag_and_range(args: list[str], message: str) -> None:
    assert _spec_error([*TUNE, *args]) == message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--job-hours", "60"], "--job-hours (60) must be at most --deadline-hours (52)"),
        (["--job-hours", "0"], "--job-hours must be > 0, got 0"),
        (["--deadline-hours", "inf"], "--deadline-hours must be > 0, got inf"),
        (["--restart-hours", "-3"], "--restart-hours must be in [0, 4] (deadline - job), got -3"),
        (["--restart-hours", "4.5"], "--restart-hours must be in [0, 4] (deadline - job), got 4.5"),
        (["--start-from", "1.5"], "--start-from must be in [0, 1), got 1.5"),
        (["--spot-price", "0"], "--spot-price must be > 0 ($/h), got 0"),
        (["--on-demand-price", "0"], "--on-demand-price must be > 0 ($/h), got 0"),
        (["--billing", "bogus"], f"--billing: unknown 'bogus'; valid: {BILLING}"),
        (["--revocation-model", "bogus"], f"--revocation-model: unknown 'bogus'; valid: {MODELS}"),
    ],
)
def test_deadline_numbers_name_their_flag_and_range(args: list[str], message: str) -> None:
    assert _spec_error([*DEADLINE, *args]) == message


def test_valid_name_lists_are_complete() -> None:
    assert MODELS.startswith("pretrained, none, ") and "lstm" in MODELS
    assert BILLING.startswith("paper, ") and "aws" in BILLING


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        ([*TUNE, "--trials", "0"], "--trials"),
        ([*TUNE, "--seeds", "0"], "--seeds"),
        ([*TUNE, "--parallel", "0"], "--parallel"),
        ([*TUNE, "--workers", "0"], "--workers"),
        ([*DEADLINE, "--starts", "0"], "--starts"),
        ([*DEADLINE, "--seed", "-1"], "--seed"),
        ([*DEADLINE, "--workers", "0"], "--workers"),
    ],
)
def test_counts_are_checked_by_typer(args: list[str], flag: str) -> None:
    res = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 2 and f"Invalid value for '{flag}'" in res.output


def test_a_bad_number_is_one_line_naming_both_flags() -> None:
    done = _cli("deadline", "--traces", "builtin:skynomad-v100-2023", "--job-hours", "60")
    assert done.returncode == 2
    assert done.stderr == "error: --job-hours (60) must be at most --deadline-hours (52)\n"


def test_start_from_is_checked_before_the_trace_is_read() -> None:
    msg = _spec_error(["deadline", "--traces", "builtin:skynomad-v100-2023", "--start-from", "1.5"])
    assert msg == "--start-from must be in [0, 1), got 1.5"


def test_options_before_the_subcommand_are_rejected_with_the_command_to_run() -> None:
    done = _cli("--traces", "builtin:skynomad-v100-2023", "--curves", "x", "deadline")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: simulate deadline: options before 'deadline' belong to simulate: put --traces "
        "after 'deadline'; --curves does not apply to 'deadline'",
        "hint: spotwise simulate deadline --traces builtin:skynomad-v100-2023",
    ]


def test_deadline_help_marks_traces_required_and_names_the_real_options() -> None:
    res = runner.invoke(app, ["deadline", "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0
    assert "[required]" in res.output and "…" not in res.output
    assert "--train-fraction" not in res.output
    for name in ("on-demand,", "greedy,", "uniform-progress,", "spotwise)."):
        assert name in res.output
    missing = runner.invoke(app, ["deadline"], env={"COLUMNS": "200"})
    assert missing.exit_code == 2 and "Missing option '--traces'" in missing.output


def test_tuning_help_is_whole_at_80_columns() -> None:
    res = runner.invoke(app, ["--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0 and "…" not in res.output
    assert "--train-fraction" not in res.output
    for name in ("on-demand,", "spot-greedy,", "asha,", "spottune,", "spotwise)."):
        assert name in res.output
    for name in MODEL_NAMES:  # every registered model is named in --revocation-model's help
        assert name in res.output


def test_hints_point_at_the_shipped_data() -> None:
    res = runner.invoke(app, [])
    assert isinstance(res.exception, SpecError)
    assert res.exception.hint == (  # works from any folder (review-u F6)
        "spotwise simulate --traces builtin:skynomad-v100-2023 --curves builtin:lcbench-subset"
    )
    assert SHIPPED_CURVES.is_dir()
    assert _spec_error(["deadline", "--traces", "no/such/dir"]) == (
        "--traces: no/such/dir does not exist; use builtin:skynomad-v100-2023 or a trace path"
    )
    assert _spec_error(["deadline", "--traces", "builtin:zzz"]) == (
        "--traces: unknown builtin trace 'zzz'; valid: builtin:skynomad-v100-2023"
    )


def test_builtin_traces_are_accepted() -> None:
    res = runner.invoke(app, [
        "deadline", "--traces", "builtin:skynomad-v100-2023", "--starts", "1", "--policy",
        "on-demand", "--revocation-model", "none", "--workers", "1", "--json",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["traces"].endswith(".csv.gz") and "skynomad-v100-2023" in doc["traces"]
    assert len(doc["zones"]) == 9 and doc["policies"]["on-demand"]["misses"] == 0
    res = runner.invoke(app, [
        "--traces", "builtin:skynomad-v100-2023", "--curves", str(SHIPPED_CURVES), "--policy",
        "on-demand", "--trials", "2", "--seeds", "1", "--revocation-model", "none",
        "--workers", "1", "--json",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["instance_type"] == "p3.2xlarge"


def _tuning_result(names: list[str]) -> dict[str, Any]:
    p = {"cost_usd": 1234.56, "cost_vs_on_demand": 1.0, "makespan_hours": 123.4,
         "regret": 0.01234, "revocations": 15.0, "lost_hours": 0.96, "early_stopped": 16.0,
         "completed": 100.0}  # fmt: skip
    return {
        "settings": {"trials": 100, "parallel": 8},
        "seeds": [0, 1, 2],
        "metric": "val_balanced_accuracy",
        "direction": "maximize",
        "revocation_model": "pretrained lstm (shipped)",
        "policies": dict.fromkeys(names, p),
    }


def _deadline_result(names: list[str]) -> dict[str, Any]:
    p = {"mean_cost": 1.004, "p25_cost": 0.437, "p50_cost": 0.675, "p75_cost": 0.92,
         "misses": 2700, "mean_spot_hours": 29.6, "mean_on_demand_hours": 48.2,
         "mean_changeovers": 10.3}  # fmt: skip
    return {
        "job_hours": 48.0,
        "deadline_hours": 52.0,
        "restart_hours": 0.2,
        "starts_per_zone": 300,
        "zones": ["a", "b"],
        "policies": dict.fromkeys(names, p),
    }


@pytest.mark.parametrize(
    ("render", "result", "cells"),
    [
        (simulate_render.tuning_table, _tuning_result, ["1234.56", "100.0%", "0.01234", "100.0"]),
        (simulate_render.deadline_table, _deadline_result, ["1.004", "2700", "48.2", "10.3"]),
    ],
)
def test_tables_are_whole_at_80_columns(
    render: Any, result: Any, cells: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    names = ["on-demand", "spot-greedy", "spottune", "spotwise", "uniform-progress"]
    render(result(names))
    out = capsys.readouterr().out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    rows = [line.split() for line in out.splitlines()]
    for name in names:  # every policy name whole, in the first cell of its row
        assert any(row and row[0] == name for row in rows), out
    for cell in cells:
        assert cell in out


def test_deadline_out_in_a_missing_folder_is_refused_before_the_run(tmp_path: Path) -> None:
    out = tmp_path / "nonexist" / "dir" / "x.json"
    done = _cli("deadline", "--traces", "builtin:skynomad-v100-2023", "--out", str(out))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: --out {out}: folder {out.parent} does not exist",
        f"hint: create it first (mkdir -p {out.parent}), or check the path for a typo",
    ]
    assert not (tmp_path / "nonexist").exists()  # no folder tree made


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "{tmp}/no/x.json"], "--out {tmp}/no/x.json: folder {tmp}/no does not exist"),
        (["--plot", "{tmp}/no/x.png"], "--plot {tmp}/no/x.png: folder {tmp}/no does not exist"),
        (
            ["--out", "{tmp}"],
            "--out {tmp}: is a folder; name the file, e.g. --out {tmp}/result.json",
        ),
        (
            ["--out", "{tmp}/f/x.json"],
            "--out {tmp}/f/x.json: {tmp}/f is a file, not a folder; pick another path",
        ),
    ],
)
def test_tuning_out_and_plot_need_an_existing_folder(
    args: list[str], message: str, tmp_path: Path
) -> None:
    (tmp_path / "f").write_text("")
    given = [a.replace("{tmp}", str(tmp_path)) for a in args]
    for where in ([*TUNE, *given], [*DEADLINE, *given]):
        if "--plot" in given and where[0] == "deadline":
            continue  # deadline has no --plot
        assert _spec_error(where) == message.replace("{tmp}", str(tmp_path))
    assert not (tmp_path / "no").exists()


def test_emit_never_creates_folders(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(SpecError) as err:
        simulate_render.emit({}, tmp_path / "f" / "x.json", True, print)
    assert str(err.value) == (
        f"--out {tmp_path}/f/x.json: cannot write there (Not a directory); pick another path"
    )
    with pytest.raises(SpecError, match="No such file or directory"):
        simulate_render.emit({}, tmp_path / "no" / "x.json", True, print)
    assert not (tmp_path / "no").exists()
    simulate_render.emit({"a": 1}, tmp_path / "ok.json", True, print)
    assert json.loads((tmp_path / "ok.json").read_text())["a"] == 1


# ---- curves the simulator cannot replay as recorded (review of 2026-11-23) -------------------
def _curves(tmp_path: Path, rows: list[str]) -> str:
    path = tmp_path / "curves.csv"
    path.write_text("curve_id,step,value\n" + "\n".join(rows) + "\n")
    return str(path)


def _run(curves: str, *more: str) -> str:
    args = ["--traces", "builtin:skynomad-v100-2023", "--curves", curves, "--seeds", "1"]
    return _spec_error([*args, "--policy", "on-demand", "--workers", "1", *more])


def test_a_non_finite_curve_value_is_refused_naming_curve_and_step(tmp_path: Path) -> None:
    """A NaN or inf final came out as regret null with no_result 0, and nan in the table."""
    rows = [f"{c},{k},{0.5 + k / 10}" for c in ("a", "b") for k in (1, 2)] + ["b,3,inf", "a,3,0.9"]
    path = _curves(tmp_path, rows)
    assert _run(path, "--trials", "2") == (
        f"--curves: {path}: curve 'b' has inf at step 3; the simulator replays every value as "
        "recorded: drop that curve or fill the value"
    )


def test_a_curve_with_only_step_0_is_refused_not_an_internal_error(tmp_path: Path) -> None:
    path = _curves(tmp_path, ["a,0,0.1", "b,1,0.2", "b,2,0.3"])
    assert _run(path, "--trials", "1") == (
        f"--curves: {path}: curve a: no steps; a curve needs steps 1, 2, ..."
    )


def test_more_trials_than_curves_is_refused(tmp_path: Path) -> None:
    """Trials were drawn with replacement past the pool (docs: without), silently: 150 trials
    of the 100 shipped curves held 78 distinct configurations."""
    rows = [f"{c},{k},{0.5 + k / 10}" for c in ("a", "b", "c") for k in (1, 2)]
    rows += [f"long,{k},0.5" for k in (1, 2, 3)]  # another length: left out
    path = _curves(tmp_path, rows)
    assert _run(path, "--trials", "4") == (
        "--trials 4 is more than the 3 curves of 2 steps in --curves: each trial replays one "
        "recorded configuration, drawn without replacement; lower --trials or give more curves"
    )
