"""A trial's life is its whole process group, not its first process.

A trial's command starts as the leader of a new session and process group (the local
provider's exec helper, the cloud agent's ``Popen(start_new_session=True)``), and every signal
goes to the group. A wrapper (``[bash, run.sh]`` where run.sh runs ``python train.py``
without ``exec``) makes the leader a shell: at a notice's SIGTERM the shell dies at once
while the trainer, in the same group, is still writing its notice checkpoint. Taking the
leader's exit for the end of the life relaunched the trial beside the one still saving (two
writers in one checkpoint folder) and stopped signalling the group, so a trainer that ignores
the stop ran on past the job's end (review-ak F2). :class:`Group` keeps watching:

* the life ends when no live process is left in the group (zombies do not count); its exit
  code is still the leader's (a trainer that finished under a wrapper that exited 0 succeeded);
* the leader is not reaped until then: its zombie holds its pid, which is the group's id, so
  no other process (another user's included) can be given that pid or make a group of that
  number, and ``killpg`` on it reaches only what our trial started. Once reaped, it is never
  signalled again. (A leader reaped by someone else, e.g. a test's ``Popen.wait``, ends the
  watch: the group can no longer be proved ours from here.)
* a leader that exits while the rest of its group runs, when nobody asked the group to stop,
  has the rest asked (SIGTERM) at once, as a hangup would, and SIGKILLed ``grace_s`` later; a
  group that was asked (a notice, a stop) gets until the deadline it was given.

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
POLL_S = 0.02  # how often a blocking wait looks at the group
SETTLE_S = 2.0  # how long a SIGKILLed group may take to go (a process in uninterruptible sleep)


def live_members(pgid: int) -> list[int]:
    """The live (not zombie) processes in process group ``pgid`` that this user can see."""
    if LINUX:
        out = []
        for entry in _PROC.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                text = (entry / "stat").read_text()
            except OSError:  # ended meanwhile, or not ours to see
                continue
            fields = text[text.rfind(")") + 2 :].split()  # state, ppid, pgrp, ...
            if len(fields) > 2 and fields[0] not in ("Z", "X", "x") and fields[2] == str(pgid):
                out.append(int(entry.name))
        return out
    try:
        text = subprocess.run(
            ["ps", "-A", "-o", "pid=,pgid=,stat="],
            env={**os.environ, "LC_ALL": "C"},
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = (line.split() for line in text.splitlines())
    return [int(r[0]) for r in rows if len(r) >= 3 and r[1] == str(pgid) and r[2][0] != "Z"]


def _code(res: os.waitid_result) -> int:
    """A waitid result as :attr:`subprocess.Popen.returncode` says it (a signal: minus it)."""
    return res.si_status if res.si_code == os.CLD_EXITED else -res.si_status


class Group:
    """``popen`` (started as a new session's leader) and the process group it leads."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pgid = popen.pid
        self.kill_at: float | None = None  # monotonic deadline the group was given to end by
        self.leader_exited_at: float | None = None  # monotonic, when the leader was seen gone

    @property
    def ended(self) -> bool:
        """The leader is reaped: the life is over and the group is never signalled again."""
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

    def empty(self) -> bool:
        """Whether the leader has exited and no live process is left in its group."""
        if self.ended:
            return True
        return self.leader_code() is not None and not live_members(self.pgid)

    def signal(self, sig: signal.Signals, kill_at: float | None = None) -> None:
        """Send ``sig`` to the group (nothing once it has ended); ``kill_at``: the monotonic
        time by which it must be gone (the earliest one given counts)."""
        if kill_at is not None:
            self.end_by(kill_at)
        if self.ended:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def end_by(self, kill_at: float) -> None:
        """The group is to be gone by the monotonic ``kill_at`` (the earliest one given counts):
        :meth:`poll` kills what is left of it then, once its leader has exited."""
        self.kill_at = kill_at if self.kill_at is None else min(self.kill_at, kill_at)

    def poll(self, grace_s: float) -> int | None:
        """The life's exit code (the leader's) once the group is empty or was killed at its
        deadline; None while any of it runs. Never blocks longer than a kill's settling."""
        if self.ended:
            return self.popen.returncode
        code = self.leader_code()
        if code is None:
            return None
        if not live_members(self.pgid):
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
        """Wait until the group is empty or the monotonic ``deadline``; whether it is empty."""
        while not self.empty():
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
        return True

    def kill(self) -> None:
        """SIGKILL whatever is left of the group, wait for it to go (``SETTLE_S`` at most for
        processes other than the leader), then reap the leader."""
        if self.ended:
            return
        if not self.empty():
            self.signal(signal.SIGKILL)
            self._wait_leader()
            self.wait_empty(time.monotonic() + SETTLE_S)
        self._reap()

    def stop(self, grace_s: float) -> int:
        """SIGTERM the group, give it ``grace_s`` to end, then kill it; the leader's code."""
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
