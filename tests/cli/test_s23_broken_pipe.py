"""A reader of stdout that goes away (`spotwise report --check | head`) is not a result
(review-ax AX3): click, typer and rich each exited 1 on the broken pipe, the code `report
--check` gives for "an instance is held" and `tune` for "something may still be billed", so a
cron with pipefail read a held instance where there was none. Now 141 (128 + SIGPIPE, as a
shell reports a command a broken pipe killed); errors keep their own codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shared_helpers import record_life

from spotwise.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], tmp_path: Path, *, closed: bool) -> subprocess.CompletedProcess[bytes]:
    """``spotwise ARGS`` with stdout a pipe whose reader is already gone (``closed``), else
    a pipe read to the end."""
    env = {**os.environ, "SPOTWISE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    env.pop("SPOTWISE_DB", None)
    env.pop("SPOTWISE_DEBUG", None)
    cmd = [sys.executable, "-m", "spotwise.cli.app", *args]
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


@pytest.fixture()
def db(tmp_path: Path) -> str:
    """An empty spotwise database (nothing held, nothing billed)."""
    url = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with Store.open(url):
        pass
    return url


def test_report_check_into_a_closed_pipe_is_not_read_as_a_held_instance(
    tmp_path: Path, db: str
) -> None:
    args = ["report", "--check", "--since", "all", "--db", db]
    whole = _run(args, tmp_path, closed=False)
    assert whole.returncode == 0, whole.stderr  # nothing held
    assert b"nothing held now" in whole.stdout
    cut = _run(args, tmp_path, closed=True)
    assert cut.returncode == 141, cut.stderr  # was 1: "an instance is held"
    assert cut.stderr == b""


@pytest.mark.parametrize("args", [["--help"], ["status", "--json"], ["status"]])
def test_any_output_into_a_closed_pipe_exits_141(tmp_path: Path, db: str, args: list[str]) -> None:
    done = _run([*args, *(["--db", db] if args[0] == "status" else [])], tmp_path, closed=True)
    assert done.returncode == 141, done.stderr  # rich (help, tables) and plain writes alike


def test_an_error_keeps_its_code_whatever_stdout_is(tmp_path: Path) -> None:
    args = ["status", "--db", f"sqlite:///{tmp_path / 'none.db'}"]
    for closed in (False, True):
        done = _run(args, tmp_path, closed=closed)
        assert done.returncode == 3, done.stderr  # no database: its one line on stderr
        assert done.stderr.startswith(b"error: no spotwise database")


@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_a_held_instance_still_exits_1_when_the_report_cannot_be_written(
    tmp_path: Path, db: str, fmt: list[str]
) -> None:
    """What `--check` found (an instance held: exit 1) is not lost behind the pipe's 141."""
    now = time.time()
    with Store.open(db) as s:
        spec = json.dumps({"providers": [{"name": "aws"}]})
        s.create_job("j-held", spec, "job.yaml", "spotwise", "maximize", job_id="j-held")
        s.update_job("j-held", state="running")
        record_life(
            s, "j-held", 0, "l-held", requested_at=now - 3600, state="running",
            launched_at=now - 3600, provider_instance_id="i-held",
        )  # fmt: skip
    args = ["report", "--check", "--since", "all", "--db", db, *fmt]
    whole = _run(args, tmp_path, closed=False)
    assert whole.returncode == 1, whole.stderr
    assert b"i-held" in whole.stdout
    cut = _run(args, tmp_path, closed=True)
    assert cut.returncode == 1, cut.stderr  # held, as when the report is read
    assert b"Traceback" not in cut.stderr and b"Exception ignored" not in cut.stderr
