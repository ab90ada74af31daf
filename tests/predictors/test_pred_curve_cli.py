"""`spotwise curve fit | eval`: one-line errors naming the flag, the default metric, 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pred_helpers import LCBENCH_SUBSET, REPO
from typer.testing import CliRunner

from spotwise.cli import curve

runner = CliRunner()
METHODS = ("earlycurve", "last-value", "mean-last-k", "power-law")
DIRECTION_UP = (
    "error: --direction must be maximize or minimize (or max/min; leave it out to infer it), "
    "got 'up'"
)
VALID = "valid: earlycurve, last-value, mean-last-k, power-law"


def spotwise(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("SPOTWISE_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "curve", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("fit", LCBENCH_SUBSET, "--curve-id", "20", "--total-steps", "-5"),
            "error: --total-steps must be a positive number of steps, got -5",
        ),
        (
            ("fit", LCBENCH_SUBSET, "--curve-id", "20", "--total-steps", "0"),
            "error: --total-steps must be a positive number of steps, got 0",
        ),
        (
            ("fit", LCBENCH_SUBSET, "--curve-id", "20", "--theta", "0.3", "--total-steps", "10"),
            "error: --total-steps 10 is before the last observed step 15; pass at least that, "
            "or leave it out",
        ),
        (
            ("fit", LCBENCH_SUBSET, "--curve-id", "20", "--direction", "up"),
            DIRECTION_UP,
        ),
        (
            ("eval", "--curves", LCBENCH_SUBSET, "--direction", "up", "--methods", "last-value"),
            DIRECTION_UP,
        ),
        (
            ("eval", "--curves", LCBENCH_SUBSET, "--methods", "foo"),
            f"error: --methods: unknown method 'foo'; {VALID}",
        ),
        (
            ("eval", "--curves", LCBENCH_SUBSET, "--methods", "last-value,powerlaw"),
            f"error: --methods: unknown method 'powerlaw' (did you mean 'power-law'?); {VALID}",
        ),
        (
            ("eval", "--curves", LCBENCH_SUBSET, "--methods", " , "),
            "error: --methods is empty; name one or more of "
            "earlycurve, last-value, mean-last-k, power-law",
        ),
        (
            ("fit", "/nope.csv", "--curve-id", "1"),
            "error: FILE: /nope.csv does not exist; pass a long CSV or the LCBench folder "
            "(builtin:lcbench-subset: the shipped one)",
        ),
        (
            ("eval", "--curves", "/nope.csv"),
            "error: --curves: /nope.csv does not exist; pass a long CSV or the LCBench folder "
            "(builtin:lcbench-subset: the shipped one)",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(args: tuple[str, ...], line: str) -> None:
    res = spotwise(*args)
    assert (res.returncode, res.stderr.splitlines(), res.stdout) == (2, [line], "")


def test_default_metric_on_the_shipped_data_and_a_long_csv(tmp_path: Path) -> None:
    res = runner.invoke(curve.app, ["fit", str(LCBENCH_SUBSET), "--curve-id", "20", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert (doc["metric"], doc["direction"], doc["total_steps"]) == ("val_accuracy", "max", 50)
    p = tmp_path / "loss.csv"
    rows = [f"{c},{s},{1 / s + 0.1 * c}" for c in range(4) for s in range(1, 21)]
    p.write_text("curve_id,step,loss\n" + "\n".join(rows) + "\n")
    res = runner.invoke(curve.app, ["eval", "--curves", str(p), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert (doc["metric"], doc["direction"], len(doc["rows"])) == ("loss", "min", 4)


def test_eval_table_is_whole_at_80_columns() -> None:
    res = spotwise("eval", "--curves", LCBENCH_SUBSET, "--theta", "0.3")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80 and "…" not in res.stdout
    header = next(x for x in lines if "method" in x)
    assert [h.strip() for h in header.strip("┃").split("┃")] == [
        "method",
        "MAE",
        "Spearman",
        "top-10%",
        "band",
        "ms/curve",
    ]
    body = [x for x in lines if x.startswith("│")]
    assert [x.split("│")[1].strip() for x in body] == list(METHODS)
    for x in body:  # every number whole: a decimal point and digits on both sides
        cells = [c.strip() for c in x.strip("│").split("│")[1:]]
        assert all(c.replace(".", "", 1).isdigit() for c in cells), x


def test_fit_of_a_short_curve_says_it_was_not_fitted(tmp_path: Path) -> None:
    p = tmp_path / "short.csv"
    p.write_text("curve_id,step,value\nx,1,0.30\nx,2,0.60\nx,3,0.75\n")
    res = runner.invoke(curve.app, ["fit", str(p), "--curve-id", "x", "--total-steps", "10"])
    assert res.exit_code == 0, res.output
    assert "stage from step 1: constant 0.75" in res.output
    assert "3 points, fewer than the 5 a fit needs: predicted the last value" in res.output
    assert "predicted final at step 10: 0.75" in res.output
    res = runner.invoke(curve.app, ["fit", str(p), "--curve-id", "x", "--json"])
    doc = json.loads(res.output)
    assert doc["final"] == 0.75 and doc["note"].startswith("3 points, fewer than the 5")


@pytest.mark.parametrize(
    ("given", "direction"),
    [("maximize", "max"), ("MAX", "max"), ("minimize", "min"), ("min", "min")],
)
def test_direction_takes_the_job_spec_words(given: str, direction: str) -> None:
    """maximize/minimize as in job specs and `simulate --direction`; max/min still work."""
    res = runner.invoke(
        curve.app,
        ["fit", str(LCBENCH_SUBSET), "--curve-id", "20", "--direction", given, "--json"],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["direction"] == direction
    args = ["--curves", str(LCBENCH_SUBSET), "--methods", "last-value", "--direction", given]
    res = runner.invoke(curve.app, ["eval", *args, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["direction"] == direction


def test_direction_help_names_maximize_and_minimize() -> None:
    for command in ("fit", "eval"):
        res = spotwise(command, "--help")
        assert res.returncode == 0
        assert "maximize or minimize (max/min also work)" in " ".join(res.stdout.split())
