"""What `tune`/`resume` tell a script when their output cannot be written or their run fails
after the job was recorded (review-ax AX2, AX3): `tune --json` printed nothing when the
database failed mid-run, so a script never learnt which job to `spotwise resume`; and a job
that failed, was cancelled or left an instance billed exited 141 (then 1 for any) when stdout's
reader was gone, hiding what happened."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: runs `spotwise tune x.yaml [--json]` with the core's `tune` replaced by a stand-in
STAND_IN = """
import sys
from spotwise import jobs
from spotwise.errors import StoreError
summary = {summary!r}
def tune(spec, **kw):
    if summary is None:
        e = StoreError("database error while updating instance 'i': database is locked")
        e.job_id = "j-0123456789abcdef"
        raise e
    return summary
jobs.tune = tune
from spotwise.cli.app import main
sys.argv = ["spotwise", "tune", "x.yaml", *{args!r}]
main()
"""


def _summary(**changes: object) -> dict[str, object]:
    out: dict[str, object] = {
        "job_id": "j-0123456789abcdef", "state": "succeeded", "policy": "spot-greedy",
        "best": None, "trials": 1, "completed": 1, "revocations": 0, "migrations": 0,
        "early_stopped": 0, "cost_usd": 0.5, "on_demand_cost_usd": 1.0, "wall_seconds": 1.0,
        "limits": {}, "trials_planned": 1, "resumable": False, "simulated": True,
        "error": None, "resumed": None, "leftover_instances": [], "not_ours": [],
    }  # fmt: skip
    out.update(changes)
    return out


def _run(
    summary: dict[str, object] | None, args: list[str], tmp_path: Path, *, closed: bool
) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "SPOTWISE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    env.pop("SPOTWISE_DEBUG", None)
    cmd = [sys.executable, "-c", STAND_IN.format(summary=summary, args=args)]
    if not closed:
        return subprocess.run(cmd, env=env, capture_output=True, check=False, timeout=120)
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(
            cmd, env=env, stdout=w, stderr=subprocess.PIPE, check=False, timeout=120
        )
    finally:
        os.close(w)


def test_a_run_that_failed_after_its_job_was_recorded_still_names_the_job(
    tmp_path: Path,
) -> None:
    done = _run(None, ["--json"], tmp_path, closed=False)
    assert done.returncode == 5, done.stderr  # the database's exit code, as before
    said = json.loads(done.stdout)  # was empty: no job id to resume
    assert said == {
        "job_id": "j-0123456789abcdef",
        "state": "failed",
        "error": "database error while updating instance 'i': database is locked",
    }
    assert done.stderr.decode().startswith("error: database error while updating instance")


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"state": "failed", "error": "every trial failed"}, 1),
        ({"leftover_instances": ["i-1"]}, 1),
        ({"state": "cancelled"}, 130),
        ({"not_ours": ["i-2"]}, 4),
        ({}, 141),  # nothing to say but the pipe
    ],
)
@pytest.mark.parametrize("args", [[], ["--json"]])
def test_what_the_job_did_outlives_a_closed_pipe(
    tmp_path: Path, changes: dict[str, object], code: int, args: list[str]
) -> None:
    summary = _summary(**changes)
    whole = _run(summary, args, tmp_path, closed=False)
    assert whole.returncode == (0 if code == 141 else code), whole.stderr
    cut = _run(summary, args, tmp_path, closed=True)
    assert cut.returncode == code, cut.stderr
    assert b"Traceback" not in cut.stderr and b"Exception ignored" not in cut.stderr


def test_a_failure_after_the_job_was_recorded_keeps_its_line_and_code_behind_a_closed_pipe(
    tmp_path: Path,
) -> None:
    """Printing the job's id into a closed pipe raised a BrokenPipeError that replaced the
    database error: exit 141 and no error line (review-az AZ4)."""
    done = _run(None, ["--json"], tmp_path, closed=True)
    assert done.returncode == 5, done.stderr
    assert done.stderr.decode().startswith("error: database error while updating instance")
    assert b"Traceback" not in done.stderr and b"Exception ignored" not in done.stderr


CANCEL = """
import sys
from spotwise import jobs
jobs.cancel = lambda job, **_: {{"job_id": "j-1", "state": "cancelled", "cancelled": True,
                                **{found!r}, "message": "x" * 200000}}
from spotwise.cli.app import main
sys.argv = ["spotwise", "cancel", "j-1", *{args!r}]
main()
"""


@pytest.mark.parametrize(
    ("found", "code"),
    [({"open_instances": ["i-1"]}, 1), ({"stopping": True}, 1), ({"not_ours": ["i-2"]}, 4)],
)
@pytest.mark.parametrize("args", [[], ["--json"]])
def test_cancel_keeps_what_it_found_behind_a_closed_pipe(
    tmp_path: Path, found: dict[str, object], code: int, args: list[str]
) -> None:
    """`spotwise cancel | head`: an instance that may still be billed (1) or one not ours (4)
    exited 141 (review-az AZ4)."""
    env = {**os.environ, "SPOTWISE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", CANCEL.format(found=found, args=args)]
    whole = subprocess.run(cmd, env=env, capture_output=True, check=False, timeout=120)
    assert whole.returncode == code, whole.stderr
    r, w = os.pipe()
    os.close(r)
    try:
        cut = subprocess.run(cmd, env=env, stdout=w, stderr=subprocess.PIPE, check=False)
    finally:
        os.close(w)
    assert cut.returncode == code, cut.stderr


def test_check_of_an_unusable_provider_keeps_its_1_behind_a_closed_pipe(tmp_path: Path) -> None:
    """`spotwise check --provider aws | head` with no AWS credentials: 1 (not usable), not 141."""
    env = {
        **os.environ,
        "SPOTWISE_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(ROOT),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "spotwise.cli.app", "check", "--provider", "aws"]
    whole = subprocess.run(cmd, env=env, capture_output=True, check=False, timeout=120)
    assert whole.returncode == 1, whole.stderr
    r, w = os.pipe()
    os.close(r)
    try:
        cut = subprocess.run(cmd, env=env, stdout=w, stderr=subprocess.PIPE, check=False)
    finally:
        os.close(w)
    assert cut.returncode == 1, cut.stderr
