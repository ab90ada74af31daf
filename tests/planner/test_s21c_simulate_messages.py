"""review-am's messages about ``spotwise simulate``: an unknown ``--policy`` is the option's
error with a did-you-mean (it started "policy:"), ``--direction`` takes what ``curve
--direction`` takes (max/min were refused), and the recorded ``command`` is one a person can
paste (under ``python -m spotwise`` it started with __main__.py's path)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_simulate_cli import write_curves, write_skynomad
from typer.testing import CliRunner

from spotwise.cli import simulate_render
from spotwise.cli.simulate import app
from spotwise.errors import SpecError
from spotwise.planner.sim_suite import DEADLINE_POLICIES, parse_policies

runner = CliRunner()


# ---- item 1: --policy ------------------------------------------------------------------------
def test_an_unknown_policy_is_a_policy_option_error_with_did_you_mean() -> None:
    with pytest.raises(SpecError) as e:
        parse_policies("asha,spotwize")
    assert str(e.value).startswith(
        "--policy: unknown policy 'spotwize' (did you mean 'spotwise'?); valid: "
    )


def test_simulate_deadline_suggests_and_lists_only_deadline_policies() -> None:
    with pytest.raises(SpecError) as e:
        parse_policies("greedyy", DEADLINE_POLICIES)
    assert str(e.value) == (
        "--policy: unknown policy 'greedyy' (did you mean 'greedy'?); "
        "valid: on-demand, greedy, uniform-progress, spotwise"
    )


def test_the_cli_raises_it_before_reading_any_trace() -> None:
    res = runner.invoke(app, [
        "--traces", "/nonexistent/t.csv", "--curves", "/nonexistent/c.csv", "--policy", "spotwize",
    ])  # fmt: skip
    assert isinstance(res.exception, SpecError), res.output
    assert str(res.exception).startswith("--policy: unknown policy 'spotwize' (did you mean")
    res = runner.invoke(app, ["deadline", "--traces", "/nonexistent", "--policy", "spotwize"])
    assert isinstance(res.exception, SpecError), res.output
    assert str(res.exception).startswith("--policy: unknown policy 'spotwize' (did you mean")


# ---- item 2: --direction ---------------------------------------------------------------------
def _sim(tmp_path: Path, *more: str) -> Any:
    traces = write_skynomad(tmp_path / "t.csv.gz", days=4)
    curves = write_curves(tmp_path / "c.csv", n=4, steps=4)
    return runner.invoke(app, [
        "--traces", str(traces), "--curves", str(curves), "--policy", "on-demand", "--trials",
        "2", "--parallel", "2", "--seeds", "1", "--revocation-model", "none", "--start-from",
        "0", "--window-hours", "48", "--workers", "1", "--json", *more,
    ])  # fmt: skip


@pytest.mark.parametrize(
    ("given", "recorded"),
    [("max", "maximize"), ("MIN", "minimize"), ("minimize", "minimize"), (" Max ", "maximize")],
)
def test_direction_takes_curves_spellings(tmp_path: Path, given: str, recorded: str) -> None:
    res = _sim(tmp_path, "--direction", given)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["direction"] == recorded


def test_a_direction_typo_gets_curves_message(tmp_path: Path) -> None:
    res = _sim(tmp_path, "--direction", "up")
    assert isinstance(res.exception, SpecError), res.output
    assert str(res.exception) == (
        "--direction must be maximize or minimize (or max/min; leave it out to infer it), got 'up'"
    )


# ---- item 3: the recorded command ------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv0", "head"),
    [
        ("/venv/lib/python3.12/site-packages/spotwise/__main__.py", "python -m spotwise"),
        ("/venv/bin/spotwise", "spotwise"),
        ("C:\\venv\\Scripts\\spotwise.exe", "spotwise"),
    ],
)
def test_the_recorded_command_can_be_pasted(
    monkeypatch: pytest.MonkeyPatch, argv0: str, head: str
) -> None:
    if "\\" in argv0 and sys.platform != "win32":
        argv0 = argv0.replace("\\", "/")
    argv = [argv0, "simulate", "deadline", "--traces", "my traces", "--starts", "3"]
    monkeypatch.setattr(sys, "argv", argv)
    assert simulate_render._command() == (
        f"{head} simulate deadline --traces 'my traces' --starts 3"
    )
