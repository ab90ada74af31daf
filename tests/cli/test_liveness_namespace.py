"""The host name does not say which pid namespace a pid was read in (review-aa F3): an
orchestrator in a container sharing the host's name (``docker --uts host``, a pod's second
container) recorded a pid of its namespace, and a cancel on the host read that pid in its own:
another process or none, "gone", and the dead path released the running job's instances. The
start token now carries the namespace it was read in (``pid:[N]|<boot id>:<ticks>``): a
checker in another namespace answers ``elsewhere`` (refused without --force), never ``gone``.
Tokens of the previous format (no namespace) still match the same process, for the
orchestrator and for the local provider's trial records alike."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spotwise import jobs, liveness
from spotwise.errors import ConfigError
from spotwise.providers import local_records
from spotwise.providers.local_records import LINUX, MARKER_ENV, ProcRecord, process_start
from spotwise.store import Store

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from shared_helpers import running_local_job  # noqa: E402 (needs the path above)

pytestmark = pytest.mark.skipif(not LINUX, reason="pid namespaces are Linux's")

HOST_NS, CONTAINER_NS = "pid:[4026531836]", "pid:[4026532999]"


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))  # local pid records


@pytest.fixture
def proc() -> Iterator[subprocess.Popen[bytes]]:
    """A live process in its own group, marked as local instance ``i-1``."""
    p = subprocess.Popen(
        ["sleep", "60"], env={**os.environ, MARKER_ENV: "i-1"}, start_new_session=True
    )
    yield p
    p.kill()
    p.wait(5)


def _bare_token(pid: int) -> str:
    """``<boot id>:<ticks>`` of ``pid``, as every token was written before namespaces."""
    fields = (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"{boot}:{fields[19]}"


def _job(db: str, pid: int, token: str | None) -> Any:
    with Store.open(db) as s:
        return s.get_job(running_local_job(db, pid, pid_start=token))


def test_the_token_records_the_pid_namespace_it_was_read_in() -> None:
    token = process_start(os.getpid())
    assert token == f"{os.readlink('/proc/self/ns/pid')}|{_bare_token(os.getpid())}"


def test_an_orchestrator_in_another_pid_namespace_is_elsewhere_not_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proc: subprocess.Popen[bytes]
) -> None:
    """It recorded pid N of its container's namespace; the host-side checker's pid N is
    another process (here: a live one with another start) or none."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    monkeypatch.setattr(local_records, "pid_namespace", lambda: HOST_NS, raising=False)
    recorded = f"{CONTAINER_NS}|{_bare_token(proc.pid).rpartition(':')[0]}:1"
    job = _job(db, proc.pid, recorded)

    assert liveness.orchestrator_state(job) == "elsewhere"
    assert jobs.status(job.id, db=db)["orchestrator"] == "elsewhere"
    with pytest.raises(ConfigError) as e:
        jobs.cancel(job.id, db=db, wait_s=0)
    assert e.value.message.startswith(
        f"job {job.id} runs on {socket.gethostname()} in another pid namespace "
        f"({CONTAINER_NS}: a container) (pid {proc.pid}): run `spotwise cancel {job.id}` there"
    )
    assert jobs.status(job.id, db=db)["state"] == "running"

    out = jobs.cancel(job.id, db=db, wait_s=0, force=True)  # that container is lost
    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    assert proc.poll() is None  # its pid here was never signalled


def test_a_token_of_the_previous_format_still_matches_the_same_process(
    tmp_path: Path, proc: subprocess.Popen[bytes]
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    assert liveness.orchestrator_state(_job(db, proc.pid, _bare_token(proc.pid))) == "here"
    same_ns = f"{os.readlink('/proc/self/ns/pid')}|{_bare_token(proc.pid)}"
    assert liveness.orchestrator_state(_job(db, proc.pid, same_ns)) == "here"
    earlier = _bare_token(proc.pid).rpartition(":")[0] + ":1"  # the pid's previous holder
    assert liveness.orchestrator_state(_job(db, proc.pid, earlier)) == "gone"


def test_an_unreadable_namespace_on_this_side_falls_back_to_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proc: subprocess.Popen[bytes]
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    token = process_start(proc.pid)
    assert token is not None
    monkeypatch.setattr(local_records, "pid_namespace", lambda: "", raising=False)
    assert liveness.orchestrator_state(_job(db, proc.pid, token)) == "here"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("pid:[1]|b-1:100", "pid:[1]|b-1:100", True),
        ("b-1:100", "pid:[1]|b-1:100", True),  # the previous format
        ("pid:[1]|b-1:100", "b-1:100", True),
        ("pid:[1]|b-1:100", "pid:[2]|b-1:100", False),  # another namespace
        ("pid:[1]|:100", "pid:[1]|b-1:100", True),  # no boot id on one side: the start decides
        ("b-1:100", ":100", True),
        ("pid:[1]|:100", "pid:[1]|b-1:101", False),
        ("pid:[1]|b-1:100", "pid:[1]|b-2:100", False),  # another boot
        ("Tue Nov 24 15:00:00 2026", "Tue Nov 24 15:00:00 2026", True),  # ps lstart
        ("Tue Nov 24 15:00:00 2026", "Tue Nov 24 15:00:01 2026", False),
    ],
)
def test_same_start(a: str, b: str, same: bool) -> None:
    assert local_records.same_start(a, b) is same


def _record(proc: subprocess.Popen[bytes], start: str) -> ProcRecord:
    return ProcRecord(
        instance_id="i-1",
        job_id="j-1",
        pid=proc.pid,
        pgid=proc.pid,
        start=start,
        tags={},
        argv=["sleep", "60"],
        launcher_pid=os.getpid(),
        created_at=time.time(),
    )


def test_local_trial_records_compare_tokens_of_either_format(
    monkeypatch: pytest.MonkeyPatch, proc: subprocess.Popen[bytes]
) -> None:
    """A trial's record written before the namespace was in the token is still its own (its
    group is killed by a cancel); one read in another namespace is never taken for it."""
    token = process_start(proc.pid)
    assert token is not None and token.endswith(_bare_token(proc.pid))
    assert local_records.is_ours_now(_record(proc, token))
    assert local_records.is_ours_now(_record(proc, _bare_token(proc.pid)))
    assert not local_records.is_ours_now(_record(proc, f"{CONTAINER_NS}|{_bare_token(proc.pid)}"))
