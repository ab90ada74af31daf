"""The first moments of a local trial: tie it to its launcher, wait to be recorded, then exec.

The local provisioner does not start a trial's command directly. It starts this file as a
script (``python -I -S local_exec.py GO_FD STATUS_FD LAUNCHER_PID``, stdlib only, no spotwise
import) in the trial's new session, and this process then ``exec``s the trial's argv, so the
trial keeps this process's pid, process group and start time. Before the exec it:

1. On Linux, asks for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), then
   checks that its parent is still ``LAUNCHER_PID``: a launcher that died before the prctl
   would never send the signal. Elsewhere this step is skipped; the provisioner's records and
   :func:`spotwise.providers.local_records.reconcile_job` cover those platforms.
2. Reads the trial's argv and environment (JSON) from ``GO_FD``. The launcher writes them only
   after it has recorded this pid, so no trial command ever runs unrecorded; end of file
   before them means the launcher died or gave up, and the process exits without running
   anything. (Passing the environment this way also keeps it exact: the helper interpreter may
   coerce ``LC_CTYPE`` in its own environment, PEP 538.)
3. Execs. ``STATUS_FD`` is close-on-exec: the launcher reads end of file when the exec
   succeeded, or ``errno:message`` when it failed.

PR_SET_PDEATHSIG fires when the *thread* that forked the child exits: launch trials from a
thread that lives as long as the orchestrator (the orchestrator's main loop does). The signal
survives ``execve`` (except of set-uid programs) but is not inherited by the trial's own
children; those stay in the trial's session, which reconciliation finds (a ``setsid()``
child does not).
"""

from __future__ import annotations

import json
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
EXIT_ORPHANED = 111  # the launcher was gone before the trial could be tied to it
EXIT_NOT_STARTED = 112  # the launcher closed GO_FD without sending argv (it died or gave up)
EXIT_EXEC_FAILED = 127  # as a shell does for a command it cannot run


def die_with_parent(launcher_pid: int) -> bool:
    """Linux: SIGKILL this process when its parent dies; False if the parent already has.

    Elsewhere, or if prctl is refused (a seccomp filter), nothing happens and True is returned.
    """
    if not sys.platform.startswith("linux"):
        return True
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        print(f"spotwise: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}", file=sys.stderr)
    return os.getppid() == launcher_pid


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def main(args: list[str]) -> int:
    go_fd, status_fd, launcher_pid = (int(a) for a in args)
    if not die_with_parent(launcher_pid):
        return EXIT_ORPHANED
    payload = _read_all(go_fd)
    if not payload:
        return EXIT_NOT_STARTED
    spec = json.loads(payload)
    argv: list[str] = spec["argv"]
    os.set_inheritable(status_fd, False)  # closed by a successful exec
    try:
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as e:
        os.write(status_fd, f"{e.errno}:{e.strerror}".encode())
    return EXIT_EXEC_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
