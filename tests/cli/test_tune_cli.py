"""The main job end to end through the real CLI, and reading it back after the process exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPOTWISE = [sys.executable, "-m", "spotwise.cli.app"]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    env["SPOTWISE_DB"] = f"sqlite:///{tmp_path / 'state.db'}"
    env["SPOTWISE_HOME"] = str(tmp_path / "home")
    env["COLUMNS"] = "200"  # rich wraps tables to the terminal width
    return env


def _run(
    args: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPOTWISE, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_main_job_end_to_end_then_read_back(tmp_path: Path) -> None:
    env = _env(tmp_path)
    spec = tmp_path / "job.yaml"
    # the README's main job, with checkpoints kept out of the source tree
    text = (ROOT / "examples/digits/job.yaml").read_text()
    spec.write_text(text.replace("location: checkpoints", f"location: {tmp_path / 'ckpt'}"))
    (tmp_path / "train.py").symlink_to(ROOT / "examples/digits/train.py")
    done = _run(["tune", str(spec), "--json"], env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(summary) >= {
        "job_id",
        "state",
        "best",
        "trials",
        "completed",
        "revocations",
        "migrations",
        "early_stopped",
        "cost_usd",
        "on_demand_cost_usd",
        "wall_seconds",
    }
    assert summary["state"] == "succeeded"
    assert summary["trials"] >= 8 and summary["completed"] == summary["trials"]
    assert summary["revocations"] >= 1 and summary["migrations"] >= 1
    assert 0 < summary["cost_usd"] < summary["on_demand_cost_usd"]
    assert summary["best"]["metric"] > 0.9  # a real model learned the digits
    assert summary["wall_seconds"] < 300

    job = summary["job_id"]
    status = _run(["status", job, "--json"], env)
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)
    assert st["state"] == "succeeded" and st["trials"] == summary["trials"]
    assert st["cost_usd"] == pytest.approx(summary["cost_usd"], abs=1e-6)
    assert st["best"]["metric"] == summary["best"]["metric"]
    revoked = [i for i in st["instances"] if i["end_reason"] == "revoked"]
    assert len(revoked) >= 1
    assert not [i for i in st["instances"] if i["state"] in ("requested", "running")]

    trials = _run(["trials", job, "--json"], env)
    rows = json.loads(trials.stdout)["trials"]
    assert len(rows) == summary["trials"]
    assert all(r["state"] == "completed" and r["step"] == 40 for r in rows)
    resumed = [r for r in rows if r["revocations"] > 0]
    assert resumed, "a revoked trial must appear in the trials listing"
    listing = _run(["status"], env)
    assert job in listing.stdout


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"bogus": 1}, "bogus"),
        ({"steps": "many"}, "steps"),
        ({"search_space": {}}, "search_space"),
        ({"command": None}, "command"),
    ],
)
def test_bad_spec_one_line_nonzero_nothing_written(tmp_path: Path, patch: dict, field: str) -> None:
    import yaml

    data = yaml.safe_load((ROOT / "examples/digits/job.yaml").read_text())
    data.update(patch)
    if patch.get("command", "") is None:
        del data["command"]
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump(data))
    env = _env(tmp_path)
    done = _run(["tune", str(spec)], env)
    assert done.returncode == 2
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) <= 2 and lines[0].startswith("error:")  # the error, then at most a hint
    assert field in lines[0]
    assert not (tmp_path / "state.db").exists()


def test_status_without_database_says_what_to_run(tmp_path: Path) -> None:
    done = _run(["status", "--json"], _env(tmp_path))
    assert done.returncode == 3
    assert "spotwise tune" in done.stderr
    assert not (tmp_path / "state.db").exists()


def test_help_is_fast_and_lists_commands(tmp_path: Path) -> None:
    done = _run(["--help"], _env(tmp_path))
    assert done.returncode == 0
    for cmd in ("tune", "status", "trials", "cancel"):
        assert cmd in done.stdout
    probe = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "spotwise.cli.app", "--help"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        cwd=ROOT,
    )
    heavy = {"torch", "sklearn", "skopt", "boto3", "botocore", "sqlalchemy", "numpy", "scipy"}
    loaded = {
        ln.split("|")[-1].strip().split(".")[0] for ln in probe.stderr.splitlines() if "|" in ln
    }
    assert not (heavy & loaded), f"heavy modules imported by --help: {heavy & loaded}"


@pytest.mark.parametrize(
    ("extra", "code"),
    [({}, 0), ({"leftover_instances": ["i-0abc"]}, 1), ({"state": "failed"}, 1)],
)
def test_tune_exits_non_zero_when_something_may_still_be_billed(
    monkeypatch: pytest.MonkeyPatch, extra: dict, code: int
) -> None:
    """A job whose drain could not terminate an instance ends "succeeded" but may still cost
    money: cron jobs and CI must see a non-zero exit, as for a job whose every trial failed."""
    from typer.testing import CliRunner

    from spotwise import jobs
    from spotwise.cli.app import app

    summary = {"job_id": "j-1", "state": "succeeded", **extra}
    monkeypatch.setattr(jobs, "tune", lambda *a, **k: summary)
    done = CliRunner().invoke(app, ["tune", "job.yaml", "--json"])
    assert done.exit_code == code, done.output
    # the JSON is the summary with every key docs/json.md lists (null or [] when none)
    from spotwise.job_rows import tune_json

    assert json.loads(done.stdout) == tune_json(summary)


def test_tune_help_names_every_policy_it_accepts() -> None:
    """`--policy` accepted policies its help did not list (greedy, uniform-progress)."""

    from typer.testing import CliRunner

    from spotwise.cli.app import app
    from spotwise.planner.policy import policy_names

    done = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "400"})
    for name in policy_names():
        assert name in done.stdout, name


def test_an_unexpected_exception_is_one_line_with_a_hint(tmp_path: Path) -> None:
    """A bug still prints one error line (and how to get the traceback), not a traceback."""
    code = (
        "import sys; from spotwise.cli import app as a\n"
        "def boom(): raise TypeError('Improper input')\n"
        "a.app = boom\n"
        "a.main()\n"
    )
    env = _env(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 70  # EX_SOFTWARE (was 1, report --check's "held")
    assert done.stderr.splitlines() == [
        "error: internal error: TypeError: Improper input",
        "hint: this is a bug in spotwise: rerun with SPOTWISE_DEBUG=1 for the traceback and "
        "report it",
    ]
    env["SPOTWISE_DEBUG"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert "Traceback" in done.stderr
