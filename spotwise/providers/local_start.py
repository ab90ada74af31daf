"""Starting a local trial's process: fork the exec helper (:mod:`spotwise.providers.local_exec`)
in a new session, record its pid (:mod:`spotwise.providers.local_records`) before the trial's
argv runs, then let it exec. Split from :mod:`spotwise.providers.local`.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from spotwise.errors import MachineShortError, ProviderError
from spotwise.providers import local_exec
from spotwise.providers.base import TAG_JOB, LaunchRequest
from spotwise.providers.local_records import ProcRecord, process_start, remove_record, write_record

#: what each errno of a failed start says this machine is short of (not the trial's fault)
MACHINE_LIMITS = {
    errno.EMFILE: "open files (raise `ulimit -n`)",
    errno.ENFILE: "open files of the whole system (fs.file-max)",
    errno.EAGAIN: "processes or memory (`ulimit -u`, free memory)",
    errno.ENOMEM: "memory (free some, or run fewer trials at once: `parallel`)",
    errno.ENOSPC: "disk space (free some)",
    errno.EDQUOT: "disk quota (free some)",
}


def refusal(message: str, err: int | None) -> ProviderError:
    """The error of a failed start: :class:`MachineShortError` when ``err`` is an errno of a
    resource this machine lacks, else a plain :class:`ProviderError` (the trial's failure)."""
    limit = MACHINE_LIMITS.get(err or 0)
    return ProviderError(message) if limit is None else MachineShortError(message, limit=limit)


def start_trial(
    request: LaunchRequest,
    instance_id: str,
    env: dict[str, str],
    log: IO[bytes] | None,
    records_dir: Path,
) -> tuple[subprocess.Popen[bytes], Path]:
    """Fork the exec helper, record its pid, then let it exec the trial's argv."""
    argv = list(request.argv)
    try:
        go_r, go_w = os.pipe()
    except OSError as e:
        raise refusal(f"local: cannot start {argv[0]!r}: {e.strerror}", e.errno) from None
    try:
        status_r, status_w = os.pipe()
    except OSError as e:
        os.close(go_r)
        os.close(go_w)
        raise refusal(f"local: cannot start {argv[0]!r}: {e.strerror}", e.errno) from None
    with open(go_w, "wb") as go, open(status_r, "rb") as status:
        try:
            helper = [sys.executable, "-I", "-S", local_exec.__file__]
            popen = subprocess.Popen(
                [*helper, str(go_r), str(status_w), str(os.getpid())],
                pass_fds=(go_r, status_w),
                cwd=request.workdir or None,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log if log is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            raise refusal(_start_failure(argv[0], request.workdir, e), e.errno) from None
        finally:
            os.close(go_r)
            os.close(status_w)
        try:
            record = record_trial(popen.pid, instance_id, request, records_dir)
        except (OSError, ProviderError) as e:
            popen.kill()  # still the helper, waiting for its argv: nothing else to kill
            popen.wait()
            said = f"local: cannot record {instance_id} before start: {e}"
            raise refusal(said, e.errno if isinstance(e, OSError) else None) from e
        try:
            go.write(json.dumps({"argv": argv, "env": env}).encode())
            go.close()
            failure = status.read().decode(errors="replace")  # end of file once exec'd
        except BrokenPipeError:  # the helper died before reading its argv
            failure = "0:the exec helper exited before starting it"
    if failure:
        popen.wait()
        remove_record(record)
        code, _, why = failure.partition(":")  # errno:message from the exec helper
        err = int(code) if code.isdigit() else None
        raise refusal(f"local: cannot start {argv[0]!r}: {why}", err)
    return popen, record


def record_trial(pid: int, instance_id: str, request: LaunchRequest, records_dir: Path) -> Path:
    """Record the helper's pid, process group and start time before the trial's argv runs."""
    start = process_start(pid)
    if start is None:
        raise ProviderError(f"process {pid} ended before it could be recorded")
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        pgid = pid
    rec = ProcRecord(
        instance_id=instance_id,
        job_id=request.tags[TAG_JOB],
        pid=pid,
        pgid=pgid,
        start=start,
        tags=dict(request.tags),
        argv=list(request.argv),
        launcher_pid=os.getpid(),
        created_at=time.time(),
    )
    return write_record(records_dir, rec)


def _start_failure(program: str, workdir: str, e: OSError) -> str:
    """Why the trial's process could not start, naming its working directory when that is
    what failed (the error's file is then the folder, not the program)."""
    if workdir and not os.path.isdir(workdir):
        what = "is not a folder" if os.path.exists(workdir) else "does not exist"
        return f"local: cannot start {program!r}: its working directory {workdir} {what}"
    if workdir and e.filename == workdir:
        return f"local: cannot start {program!r}: its working directory {workdir}: {e.strerror}"
    return f"local: cannot start {program!r}: {e.strerror}"
