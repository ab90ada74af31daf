"""review-al F1 off Linux: where there is no /proc, :mod:`spotwise.providers.proc_group` reads
the session from ``ps -A -o pid=,pgid=,sid=,stat=``, trusted only where the leader's own row
gives it its pid as session id; a ``ps`` without the column (macOS) or whose column means
something else (FreeBSD's ``sess``, a kernel address) keeps the group rule. Run here on Linux
with the /proc reader switched off, on procps' real ``ps`` (which has ``sid``)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from test_s20i_timeout_session import Trainer, alive, trainers, wait_for  # noqa: F401 (fixture)

from spotwise.providers import proc_group
from spotwise.providers.proc_group import Group

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None
    or shutil.which("timeout") is None
    or shutil.which("ps") is None
    or not sys.platform.startswith("linux"),
    reason="bash, GNU timeout, procps' ps and /proc (to check what ps said)",
)
# ps -A -o COLUMNS as rows (none before review-al F1: the first test then fails on behaviour)
real_ps: Callable[[str], list[list[str]] | None] = getattr(proc_group, "_ps", print)


@pytest.fixture
def off_linux(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proc_group, "LINUX", False)
    monkeypatch.setattr(proc_group, "_ps_has_sid", None, raising=False)


@pytest.fixture
def wrapped(trainers: Callable[[], Trainer]) -> Iterator[tuple[Group, Trainer]]:  # noqa: F811
    """A session: bash, and under it ``timeout`` and the trainer in a group of their own."""
    trainer = trainers()
    popen = subprocess.Popen(trainer.argv("ignore"), start_new_session=True)
    group = Group(popen)
    wait_for(trainer.ready, "the trainer")
    trainer.check_apart(popen.pid)
    yield group, trainer
    group.kill()  # what it does not reach, the trainers fixture kills by pid


@pytest.mark.usefixtures("off_linux")
def test_ps_with_session_ids_stops_the_trainer_under_timeout(
    wrapped: tuple[Group, Trainer],
) -> None:
    group, trainer = wrapped
    assert group.stop(0.3) == -signal.SIGTERM  # the shell's code
    assert trainer.terms() >= 1 and trainer.left() == []  # HEAD: never signalled, ran on


@pytest.mark.usefixtures("off_linux")
@pytest.mark.parametrize("ps_kind", ["procps", "no sid column", "sid means something else"])
def test_what_ps_says_of_the_session(
    wrapped: tuple[Group, Trainer], monkeypatch: pytest.MonkeyPatch, ps_kind: str
) -> None:
    """procps' ps: the whole session; a ps that cannot tell sessions: the trial's own group."""

    def ps(columns: str) -> list[list[str]] | None:
        if "sid" not in columns or ps_kind == "procps":
            return real_ps(columns)
        if ps_kind == "no sid column":
            return None  # as macOS's ps refuses an unknown keyword
        rows = real_ps(columns) or []
        return [[r[0], r[1], "0xfffff80001234567", *r[3:]] for r in rows]

    monkeypatch.setattr(proc_group, "_ps", ps)
    group, trainer = wrapped
    leader = group.popen.pid
    everyone = [
        (leader, leader),
        (trainer.timeout, trainer.timeout),
        (trainer.pid, trainer.timeout),
    ]
    expected = sorted(everyone) if ps_kind == "procps" else [(leader, leader)]
    assert sorted(group.members()) == expected
    assert proc_group._ps_has_sid is (ps_kind != "no sid column")
