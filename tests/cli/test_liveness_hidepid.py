"""A live orchestrator whose start this user cannot read is not "gone" (review-aa F2): on a
shared host with ``/proc`` mounted ``hidepid`` another user's ``/proc/PID`` is invisible, so
the start token read as "no process" and `spotwise cancel` took the dead path, releasing the
instances of a running job under it. Now only ``os.kill(pid, 0)`` answering "no such process"
is gone; a live process that cannot be inspected is ``hidden``: cancel refuses in one line
(`--force` takes it for gone, as for a lost machine) and status does not flag it gone. A boot
id one side could not read does not by itself make a live process gone either."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotwise import jobs, liveness
from spotwise.errors import ConfigError
from spotwise.providers import local_records
from spotwise.providers.local_records import LINUX, process_start
from spotwise.store import Store

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from shared_helpers import running_local_job  # noqa: E402 (needs the path above)

pytestmark = pytest.mark.skipif(not LINUX, reason="/proc and its hidepid are Linux's")


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))  # local pid records


@pytest.fixture
def orchestrator() -> Iterator[subprocess.Popen[bytes]]:
    """A live process standing for the job's orchestrator (never signalled by these tests)."""
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait(5)


def _running_job(db: str, pid: int, token: str | None) -> str:
    return running_local_job(db, pid, pid_start=token)


def _hidepid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``/proc`` mounted ``hidepid=2``: another user's ``/proc/PID`` is not there for us."""
    empty = tmp_path / "proc"
    empty.mkdir()
    monkeypatch.setattr(local_records, "_PROC", empty)


def _job(db: str, pid: int, **fields: Any) -> Any:
    job_id = _running_job(db, pid, **fields)
    with Store.open_existing(db) as s:
        return s.get_job(job_id)


def test_a_live_orchestrator_hidden_by_hidepid_is_not_cancelled_as_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, orchestrator: subprocess.Popen[bytes]
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    job = _running_job(db, orchestrator.pid, process_start(orchestrator.pid))
    _hidepid(tmp_path, monkeypatch)

    assert jobs.status(job, db=db)["orchestrator"] == "hidden"  # not "gone"
    with pytest.raises(ConfigError) as e:
        jobs.cancel(job, db=db, wait_s=0)

    msg = e.value.message
    assert e.value.hint is None and "\n" not in msg  # one line
    assert msg.startswith(f"job {job}'s orchestrator (pid {orchestrator.pid}) may still run")
    assert "cancel it as the user who started it" in msg
    assert f"`spotwise cancel --force {job}`" in msg
    assert jobs.status(job, db=db)["state"] == "running"  # nothing was closed
    assert orchestrator.poll() is None  # nor signalled

    out = jobs.cancel(job, db=db, wait_s=0, force=True)  # --force: taken for gone
    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    assert out["message"].startswith("orchestrator was not running; job marked cancelled")
    assert orchestrator.poll() is None


def test_another_users_process_refusing_the_probe_is_hidden_not_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hidepid=1``: ``/proc/PID`` unreadable and ``kill(pid, 0)`` refused (EPERM)."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    _hidepid(tmp_path, monkeypatch)
    asked: list[tuple[int, int]] = []

    def refuse(pid: int, sig: int) -> None:
        asked.append((pid, sig))
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(liveness.os, "kill", refuse)
    job = _job(db, 4242, token="pid:[4026531836]|b0b0-1:12345")

    assert liveness.orchestrator_state(job) == "hidden"
    assert asked == [(4242, 0)]  # probed, never signalled


def test_a_pid_no_process_holds_is_gone_when_its_start_cannot_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    proc = subprocess.Popen(["true"])
    proc.wait(5)  # reaped: no process holds its pid (until it is given again)
    _hidepid(tmp_path, monkeypatch)
    job = _job(db, proc.pid, token="b0b0-1:12345")

    assert liveness.orchestrator_state(job) == "gone"


def test_a_zombie_orchestrator_is_gone_although_kill_0_reaches_it(tmp_path: Path) -> None:
    """A zombie answers ``kill(pid, 0)``; its stat says it ended: gone, never hidden."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    proc = subprocess.Popen(["sleep", "60"])
    try:
        token = process_start(proc.pid)
        proc.kill()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
        assert local_records.read_start(proc.pid) == local_records.ENDED
        assert liveness.orchestrator_state(_job(db, proc.pid, token=token)) == "gone"
    finally:
        proc.wait(5)


@pytest.mark.parametrize("side", ["recorded", "checked"])
def test_a_boot_id_one_side_could_not_read_compares_the_start_time(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    orchestrator: subprocess.Popen[bytes],
    side: str,
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    real_boot = local_records._boot_id
    if side == "recorded":
        monkeypatch.setattr(local_records, "_boot_id", lambda: "")
    token = process_start(orchestrator.pid)
    assert token is not None and ":" in token
    monkeypatch.setattr(local_records, "_boot_id", (lambda: "") if side == "checked" else real_boot)
    job = _job(db, orchestrator.pid, token=token)

    assert liveness.orchestrator_state(job) == "here"
    # the start time still decides: another start with no boot id is another process
    head, _, ticks = token.rpartition(":")
    other = _job(db, orchestrator.pid, token=f"{head}:{int(ticks) - 100}")
    assert liveness.orchestrator_state(other) == "gone"


def test_a_job_recorded_before_revision_0003_keeps_its_old_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token: judged by :func:`~spotwise.liveness.orchestrator_alive` (EPERM: gone)."""
    db = f"sqlite:///{tmp_path / 's.db'}"

    def refuse(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(liveness.os, "kill", refuse)
    assert liveness.orchestrator_state(_job(db, 4242, token=None)) == "gone"


def test_status_text_says_a_hidden_orchestrator_may_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, orchestrator: subprocess.Popen[bytes]
) -> None:
    """The text showed a hidden orchestrator's job as plainly running (only --json said
    "hidden"); it now says what cancel will say: it may still run, and why it cannot tell."""
    from rich.console import Console
    from typer.testing import CliRunner

    from spotwise.cli import render
    from spotwise.cli.app import app

    db = f"sqlite:///{tmp_path / 's.db'}"
    job = _running_job(db, orchestrator.pid, process_start(orchestrator.pid))
    _hidepid(tmp_path, monkeypatch)
    saved = render.console
    render.console = Console(width=200, highlight=False, color_system=None)
    try:
        listing = CliRunner().invoke(app, ["status", "--db", db]).stdout
        one = CliRunner().invoke(app, ["status", job, "--db", db]).stdout
    finally:
        render.console = saved
    why = "its orchestrator may still run: a live process holds its pid, and this user cannot"
    assert "running (orchestrator hidden)" in listing
    assert f"{job}: {why}" in " ".join(listing.split())
    assert why in " ".join(one.split())
