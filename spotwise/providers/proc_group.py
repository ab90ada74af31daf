"""A trial's life is its whole session, not its first process nor only its process group.

A trial's command starts as the leader of a new session and process group (the local
provider's exec helper, the cloud agent's ``Popen(start_new_session=True)``): its pid is the
session's id and the group's. A wrapper (``[bash, run.sh]`` where run.sh runs ``python
train.py`` without ``exec``) makes the leader a shell: at a notice's SIGTERM the shell dies at
once while the trainer is still writing its notice checkpoint. Taking the leader's exit for the
end of the life relaunched the trial beside the one still saving (two writers in one checkpoint
folder) and stopped signalling, so a trainer that ignores the stop ran on past the job's end
(review-ak F2). Nor is the process group enough: GNU ``timeout`` (without ``--foreground``)
and a ``set -m`` script move what they run into a group of its own inside the session, so a
``killpg`` on the trial's group never reached the trainer and the group read empty as soon as
the shell died (review-al F1). :class:`Group` keeps watching the session:

* the life ends when no live process is left in the session (zombies do not count); its exit
  code is still the leader's (a trainer that finished under a wrapper that exited 0 succeeded);
* a signal goes to every process group found in the session, the trial's own first (one
  ``killpg`` each, not a ``kill`` per pid: see "Never a stranger"). A trainer under
  ``timeout`` gets a SIGTERM twice: ours, and ``timeout``'s relay of the one it got;
* the leader is not reaped until then. Never a stranger: the leader's zombie holds its pid,
  which is the session's id and its group's, so no other process (another user's included)
  can be given that pid or make a group or session of that number, and a ``killpg`` on it
  reaches only what our trial started. Every other group signalled was seen in the session an
  instant before (a process can only join a group of its own session, so a group never spans
  two), and its number stays taken while any of its members, zombies included, is left: a
  stranger could get it only if the whole group ended, was reaped, and the pid counter came
  round to that number, and the new holder then made itself a group leader, all between the
  look and the ``killpg``. A ``kill`` per pid would be exposed to the pid's reuse alone, so
  groups are signalled, not pids. Once the leader is reaped, nothing is signalled again. (A
  leader reaped by someone else, e.g. a test's ``Popen.wait``, ends the watch: the session
  can no longer be proved ours from here.)
* a leader that exits while the rest of its session runs, when nobody asked the trial to
  stop, has the rest asked (SIGTERM) at once, as a hangup would, and SIGKILLed ``grace_s``
  later; a trial that was asked (a notice, a stop) gets until the deadline it was given.

What leaves the life: a process that calls ``setsid()`` (``setsid cmd``, a daemon) starts a
session of its own, is not waited for and gets no signal from here (``spotwise cancel`` after
a crash does not reach it either): it asked to be detached; a trainer must not. (``script -c``
runs its command so, but ``script`` itself stays in the session, passes a SIGTERM on to the
command and waits for it, so the life still lasts as long as the command.)

Off Linux the session is read from ``ps -A -o pid=,pgid=,sid=,stat=`` where ``ps`` has ``sid``
and the leader's own row confirms it (its session id is its pid); elsewhere (macOS's ``ps``
has no session id) only the trial's process group is the life, as before review-al F1.

Standard library only: the cloud agent runs it on the instance.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

LINUX = sys.platform.startswith("linux")
_PROC = Path("/proc")
POLL_S = 0.02  # how often a blocking wait looks at the session
SETTLE_S = 2.0  # how long a SIGKILLed session may take to go (a process in uninterruptible sleep)
_ps_has_sid: bool | None = None  # off Linux: whether ``ps -o sid=`` was accepted (None: untried)


def session_members(sid: int) -> list[tuple[int, int]]:
    """``(pid, process group)`` of every live (not zombie) process in session ``sid`` that this
    user can see (off Linux where ``ps`` cannot tell sessions: in process group ``sid``)."""
    if not LINUX:
        return _ps_members(sid)
    out = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # ended meanwhile, or not ours to see
            continue
        fields = text[text.rfind(")") + 2 :].split()  # state, ppid, pgrp, session, ...
        if len(fields) > 3 and fields[0] not in ("Z", "X", "x") and fields[3] == str(sid):
            out.append((int(entry.name), int(fields[2])))
    return out


def _ps(columns: str) -> list[list[str]] | None:
    """``ps -A -o <columns>`` as rows of words; None where ``ps`` fails (an unknown column)."""
    try:
        done = subprocess.run(
            ["ps", "-A", "-o", columns],
            env={**os.environ, "LC_ALL": "C"},
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return [line.split() for line in done.stdout.splitlines()] if done.returncode == 0 else None


def _ps_members(sid: int) -> list[tuple[int, int]]:
    """:func:`session_members` from ``ps``: by session where its ``sid`` column exists and
    gives the leader (pid ``sid``) its own pid, else by process group ``sid`` (the group rule:
    the leader's group id is its session id too)."""
    global _ps_has_sid
    rows = _ps("pid=,pgid=,sid=,stat=") if _ps_has_sid is not False else None
    if _ps_has_sid is None:  # the first answer says whether this ps has the column
        _ps_has_sid = rows is not None
    if rows is None:
        rows = [[r[0], r[1], "", *r[2:]] for r in _ps("pid=,pgid=,stat=") or []]
    rows = [r for r in rows if len(r) >= 4 and r[0].isdigit() and r[1].isdigit()]
    want = str(sid)
    col = 2 if any(r[0] == want and r[2] == want for r in rows) else 1  # the leader confirms
    return [(int(r[0]), int(r[1])) for r in rows if r[col] == want and not r[3].startswith("Z")]


def _code(res: os.waitid_result) -> int:
    """A waitid result as :attr:`subprocess.Popen.returncode` says it (a signal: minus it)."""
    return res.si_status if res.si_code == os.CLD_EXITED else -res.si_status


class Group:
    """``popen`` (started as a new session's leader) and the session it leads: the trial's
    life (see the module docstring). Named for the process group, which was the life before
    review-al F1."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pgid = popen.pid  # the leader's process group id, and its session's id
        self.kill_at: float | None = None  # monotonic deadline the session was given to end by
        self.leader_exited_at: float | None = None  # monotonic, when the leader was seen gone

    @property
    def ended(self) -> bool:
        """The leader is reaped: the life is over and nothing is signalled again."""
        return self.popen.returncode is not None

    def leader_code(self) -> int | None:
        """The leader's exit code once it has exited, without reaping it; None while it runs."""
        if self.popen.returncode is not None:
            return self.popen.returncode
        if not hasattr(os, "waitid"):  # no way to look without reaping: the leader is the life
            return self.popen.poll()
        try:
            res = os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped by someone else: Popen learns what it can
            return self.popen.poll()
        if res is None:
            return None
        if self.leader_exited_at is None:
            self.leader_exited_at = time.monotonic()
        return _code(res)

    def members(self) -> list[tuple[int, int]]:
        """``(pid, process group)`` of the live processes in the leader's session."""
        return session_members(self.pgid)

    def empty(self) -> bool:
        """Whether the leader has exited and no live process is left in its session."""
        if self.ended:
            return True
        return self.leader_code() is not None and not self.members()

    def _send(self, sig: signal.Signals, live: list[tuple[int, int]]) -> None:
        """``sig`` to the leader's own group (the leader, alive or a zombie, keeps its number
        ours), then to each other group among ``live`` (just seen in the session; see the
        module docstring)."""
        for pgid in dict.fromkeys([self.pgid, *sorted(g for _, g in live)]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

    def signal(self, sig: signal.Signals, kill_at: float | None = None) -> None:
        """Send ``sig`` to every process group in the session (nothing once the leader is
        reaped); ``kill_at``: the monotonic time by which it must be gone (the earliest one
        given counts)."""
        if kill_at is not None:
            self.end_by(kill_at)
        if not self.ended:
            self._send(sig, self.members())

    def end_by(self, kill_at: float) -> None:
        """The session is to be gone by the monotonic ``kill_at`` (the earliest one given
        counts): :meth:`poll` kills what is left of it then, once its leader has exited."""
        self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)

    def poll(self, grace_s: float) -> int | None:
        """The life's exit code (the leader's) once the session is empty or was killed at its
        deadline; None while any of it runs. Never blocks longer than a kill's settling."""
        if self.ended:
            return self.popen.returncode
        code = self.leader_code()
        if code is None:
            return None
        if not self.members():
            return self._reap()
        now = time.monotonic()
        if self.kill_at is None:  # the leader left on its own: the rest is asked to go too
            self.signal(signal.SIGTERM, now + grace_s)
        assert self.kill_at is not None
        if now < self.kill_at:
            return None
        self.kill()
        return self.popen.returncode

    def wait_empty(self, deadline: float) -> bool:
        """Wait until the session is empty or the monotonic ``deadline``; whether it is."""
        while not self.empty():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    def kill(self) -> None:
        """SIGKILL whatever is left of the session, wait for it to go (``SETTLE_S`` at most for
        processes other than the leader; SIGKILL again at each look, for a group made after
        the last one), then reap the leader."""
        if self.ended:
            return
        if not self.empty():
            self.signal(signal.SIGKILL)
            self._wait_leader()
            deadline = time.monotonic() + SETTLE_S
            while (live := self.members()) and time.monotonic() < deadline:
                self._send(signal.SIGKILL, live)
                time.sleep(POLL_S)
        self._reap()

    def stop(self, grace_s: float) -> int:
        """SIGTERM the session, give it ``grace_s`` to end, then kill it; the leader's code."""
        self.signal(signal.SIGTERM)
        self.wait_empty(time.monotonic() + grace_s)
        self.kill()
        return int(self.popen.returncode)

    def _wait_leader(self) -> None:
        """Block until the leader has exited, without reaping it."""
        if self.ended or not hasattr(os, "waitid"):
            self.popen.wait()
            return
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOWAIT)
        self.leader_code()

    def _reap(self) -> int:
        return self.popen.wait()
