"""Records of the local provider's trial processes, and cleaning up after a dead orchestrator.

On Linux a local trial dies with its orchestrator (``PR_SET_PDEATHSIG``, see
:mod:`spotwise.providers.local_exec`), but only the trial's first process does: what it started
stays alive in its session (its process group, or another group of that session: ``timeout``
makes one). On other platforms nothing kills the trial at all. So every launch leaves a record
that ``spotwise cancel`` can act on (:func:`reconcile_job`).

Where and what. One small JSON file per instance, ``<root>/<job id>/<instance id>.json``, with
``root`` = ``$SPOTWISE_HOME/local`` (else the user data directory's ``local/``, beside
``runs/``). Not the store: the process id is known only after the fork, when the store's launch
row is already written and the orchestrator (not the provider) owns it; and not the run
directory: ``spotwise cancel`` is given only the job id, and a run root chosen by the caller is
recorded nowhere. Not the instance id either: it is fixed (``local-<client token>``) before
the launch so that launches stay idempotent. The record is written after the fork but before
the trial's command runs (the first process waits for it), and removed when the provider sees
the process end.

Never a stranger. A pid is signalled only when the live process holding it has the recorded
start time (Linux: boot id + field 22 of ``/proc/<pid>/stat``; elsewhere ``ps``'s start time),
is still the leader of the recorded process group, and, where the environment is readable,
carries :data:`MARKER_ENV` = the instance id. When the leader is gone (Linux), the session is
signalled only if a live member carries the marker: Linux does not reuse a pid while a process
group or session of that number exists, so such a session is the one our trial started. What
is signalled is every process group seen in the session (the recorded one first), as the
provider does (:mod:`spotwise.providers.proc_group`, which says why groups and not pids); a
process that called ``setsid()`` is in a session of its own and is not reached. Off Linux
the session is what :func:`~spotwise.providers.proc_group.session_members` reads from ``ps``
(the recorded group alone where ``ps`` has no session id).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from spotwise.providers.base import TAG_JOB, TAG_LAUNCH, is_ours
from spotwise.providers.proc_group import session_members
from spotwise.sdk_io import ENV_EVENTS_FILE, read_writer

#: Set in every local trial's environment to its instance id (not ``SPOTWISE_*``: that prefix
#: is the trial's contract with :mod:`spotwise.sdk`).
MARKER_ENV = "_SPOTWISE_LOCAL_INSTANCE"
LINUX = sys.platform.startswith("linux")
_PROC = Path("/proc")


def records_root() -> Path:
    home = os.environ.get("SPOTWISE_HOME")
    if home:
        return Path(home) / "local"
    import platformdirs

    return Path(platformdirs.user_data_dir("spotwise")) / "local"


@dataclass(frozen=True)
class ProcRecord:
    instance_id: str
    job_id: str
    pid: int
    pgid: int
    start: str  # see process_start()
    tags: dict[str, str]
    argv: list[str]
    launcher_pid: int
    created_at: float


def _safe(name: str) -> str:
    """A file name for an id: anything but ``[A-Za-z0-9._-]`` becomes ``_``; never ``..``."""
    out = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    return out if out.strip(".") else f"_{out}"


def record_path(root: Path, job_id: str, instance_id: str) -> Path:
    return root / _safe(job_id) / f"{_safe(instance_id)}.json"


def write_record(root: Path, rec: ProcRecord) -> Path:
    """Write ``rec`` atomically (temporary file, fsync, rename); returns its path."""
    path = record_path(root, rec.job_id, rec.instance_id)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)  # local/: private
    path.parent.mkdir(exist_ok=True, mode=0o700)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    try:
        with open(tmp, "w") as fh:
            json.dump(asdict(rec), fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk (ENOSPC) leaves no half-written temporary behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def remove_record(path: Path) -> None:
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # the job's directory, once empty
        path.parent.rmdir()


def read_records(root: Path, job_id: str) -> list[tuple[Path, ProcRecord]]:
    """The job's records; unreadable or malformed files are skipped (and left alone)."""
    d = root / _safe(job_id)
    out: list[tuple[Path, ProcRecord]] = []
    for path in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            out.append((path, ProcRecord(**json.loads(path.read_text()))))
        except (OSError, ValueError, TypeError):
            continue
    return out


# ---- processes ----------------------------------------------------------------------------
def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (state first), or None if it cannot be read: no such
    process, or one this user cannot see (``/proc`` mounted ``hidepid``)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:  # no such process (any more), or not ours to see
        return None
    return text[text.rfind(")") + 2 :].split()


def _boot_id() -> str:
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """The pid namespace this process reads pids in (Linux: ``pid:[4026531836]``), "" where it
    cannot be read or there is none (off Linux): a pid means a process only within one."""
    if not LINUX:
        return ""
    try:
        return os.readlink(_PROC / "self/ns/pid")
    except OSError:
        return ""


#: What :func:`read_start` answers for a process the process table shows ended (a zombie).
ENDED = ""
_NS_SEP = "|"  # namespace|token: no namespace part in tokens written before it was recorded
_LINUX_TOKEN = re.compile(r"([0-9A-Za-z-]*):(\d+)")  # <boot id>:<start time in clock ticks>


def read_start(pid: int) -> str | None:
    """:func:`process_start`'s reading of ``pid``: its token, :data:`ENDED` for a zombie, or
    None when no process could be read: none runs, or this user cannot see it (Linux ``/proc``
    mounted ``hidepid``; only ``os.kill(pid, 0)`` can tell those apart)."""
    if LINUX:
        fields = _stat_fields(pid)
        if fields is None:
            return None
        if fields[0] in ("Z", "X", "x"):
            return ENDED
        ns = pid_namespace()
        token = f"{_boot_id()}:{fields[19]}"  # field 22: starttime
        return f"{ns}{_NS_SEP}{token}" if ns else token
    try:
        out = subprocess.run(
            ["ps", "-o", "stat=,lstart=", "-p", str(pid)],
            env={**os.environ, "TZ": "UTC", "LC_ALL": "C"},  # the same text for every caller
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    stat, _, start = out.partition(" ")
    if not start:
        return None
    return ENDED if stat.startswith("Z") else start.strip()


def process_start(pid: int) -> str | None:
    """When ``pid``'s process started, as an opaque token; None if none is running (a zombie
    counts as gone) or it cannot be read. Linux: ``<pid namespace>|<boot id>:<start time in
    clock ticks>`` (the namespace the pid was read in; none where it cannot be read); else
    ``ps``'s lstart. Compare tokens with :func:`same_start`, never ``==``."""
    return read_start(pid) or None


def token_namespace(token: str) -> str:
    """The pid namespace a :func:`process_start` token was read in; "" for a token without
    one (written before namespaces were recorded, off Linux, or none could be read)."""
    ns, sep, _ = token.partition(_NS_SEP)
    return ns if sep else ""


def same_start(recorded: str, now: str) -> bool:
    """Whether two :func:`process_start` tokens name the same process start. Tokens read in
    two known pid namespaces that differ never match (the pid names another process there); a
    side without a namespace part (the previous format) or without a boot id (it could not be
    read) is compared on what both sides have: the start time at least."""
    ns_a, ns_b = token_namespace(recorded), token_namespace(now)
    if ns_a and ns_b and ns_a != ns_b:
        return False
    a, b = recorded.partition(_NS_SEP)[2] or recorded, now.partition(_NS_SEP)[2] or now
    la, lb = _LINUX_TOKEN.fullmatch(a), _LINUX_TOKEN.fullmatch(b)
    if la is None or lb is None:
        return a == b
    boots = (la.group(1), lb.group(1))
    return la.group(2) == lb.group(2) and (boots[0] == boots[1] or "" in boots)


def _carries_marker(pid: int, instance_id: str) -> bool | None:
    """Whether ``pid``'s environment marks it as ``instance_id``; None if it cannot be read."""
    if not LINUX:
        return None
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:  # another user's process
        return None
    return f"{MARKER_ENV}={instance_id}".encode() in environ.split(b"\0")


def _members(rec: ProcRecord) -> list[tuple[int, int]]:
    """``(pid, process group)`` of the live (not zombie) processes of ``rec``'s session (its
    leader made one: pid = process group = session id), else of its process group."""
    session = rec.pgid == rec.pid
    if not LINUX:
        return session_members(rec.pgid) if session else []
    out = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if not fields or len(fields) < 4 or fields[0] in ("Z", "X", "x"):
                continue
            if fields[3 if session else 2] == str(rec.pgid):
                out.append((int(entry.name), int(fields[2])))
    return out


def _alive(rec: ProcRecord) -> bool:
    """Whether anything of ``rec``'s session is left (see :func:`_members`)."""
    if _members(rec):
        return True
    if LINUX:
        return False
    try:
        os.killpg(rec.pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(rec: ProcRecord, sig: signal.Signals) -> None:
    """``sig`` to ``rec``'s process group, then to every other group seen in its session."""
    for pgid in dict.fromkeys([rec.pgid, *sorted(g for _, g in _members(rec))]):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def leader_alive(rec: ProcRecord) -> bool:
    """Whether ``rec``'s recorded first process (the trial's command itself, exec'd in place of
    the exec helper) still runs: the live process holding its pid has the recorded start, is
    still the leader of the recorded group and carries the marker where that is readable.
    False for a pid no process holds, a zombie, or a stranger holding a reused pid."""
    start = process_start(rec.pid)
    if start is None:
        return False
    try:
        same_group = os.getpgid(rec.pid) == rec.pgid
    except ProcessLookupError:
        return False
    return (
        same_start(rec.start, start)
        and same_group
        and _carries_marker(rec.pid, rec.instance_id) is not False
    )


def _environ(pid: int) -> dict[bytes, bytes]:
    """``pid``'s environment (Linux; {} where it cannot be read)."""
    try:
        raw = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    return dict(kv.partition(b"=")[::2] for kv in raw.split(b"\0") if b"=" in kv)


def trainer_alive(rec: ProcRecord) -> bool:
    """Linux: whether the process that last wrote the trial's events (its trainer: the one
    using :mod:`spotwise.sdk`, which says so beside the events file) still runs in ``rec``'s
    session: a live member carrying the marker, with the start the SDK wrote. The events file
    is the one named in a marked member's environment. Under a wrapper (``bash train.sh``)
    the recorded first process is the shell, which dies with the orchestrator
    (``PR_SET_PDEATHSIG`` reaches only it) while the trainer it started runs on: that trial
    still runs. False where the trainer died (what lives on are its helpers: DataLoader
    workers), where no process of the trial wrote an event yet (or its SDK predates the
    note), and off Linux (nothing kills the first process there: :func:`leader_alive`)."""
    if not LINUX:
        return False
    live = {pid for pid, _ in _members(rec)}
    marked = {pid: env for pid in live if (env := _environ(pid)) and _marked(env, rec)}
    for events in {env.get(ENV_EVENTS_FILE.encode(), b"") for env in marked.values()} - {b""}:
        writer = read_writer(os.fsdecode(events).strip())  # as the SDK reads it
        if writer is None or writer[0] not in marked:
            continue
        fields = _stat_fields(writer[0])  # the same process the SDK named, not a reused pid
        if fields is not None and len(fields) > 19 and fields[19] == writer[1]:
            return True
    return False


def _marked(env: dict[bytes, bytes], rec: ProcRecord) -> bool:
    return env.get(MARKER_ENV.encode()) == rec.instance_id.encode()


def is_ours_now(rec: ProcRecord) -> bool:
    """Whether ``rec``'s process group is, right now, provably the one its launch started."""
    if process_start(rec.pid) is not None:  # a live process holds the pid: ours if the same
        return leader_alive(rec)
    if not LINUX or rec.pgid != rec.pid:
        return False
    return any(_carries_marker(m, rec.instance_id) for m, _ in _members(rec))


def _terminate_group(rec: ProcRecord, grace_s: float) -> None:
    """SIGTERM the session's groups, wait up to ``grace_s``, then SIGKILL them if the session is
    still provably ours."""
    _signal(rec, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _alive(rec) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(rec) and is_ours_now(rec):
        _signal(rec, signal.SIGKILL)


def _job_records(job_id: str, root: Path | None) -> list[tuple[Path, ProcRecord]]:
    """The records of ``job_id``'s own launches (a record naming another job is left alone)."""
    return [
        (path, rec)
        for path, rec in read_records(root or records_root(), job_id)
        if rec.job_id == job_id and is_ours(rec.tags) and rec.tags.get(TAG_JOB) == job_id
    ]


@dataclass(frozen=True)
class Seen:
    """What a local launch's process record says before a cancel kills anything
    (:func:`survey_job`): the launch's process was started (the record is written after the
    fork, before the trial's command runs) at ``created_at`` (wall time), and whether its
    recorded first process, the trial's command, still runs (``leader_alive``). On Linux that
    process dies with its orchestrator (``PR_SET_PDEATHSIG``): when it is gone while others of
    its session live on (a trainer's DataLoader workers), those are helpers that outlived the
    trial, not the trial still running, unless one of them is the trainer a wrapper started
    (``trainer_alive``: :func:`trainer_alive`)."""

    instance_id: str
    launch_id: str
    created_at: float
    leader_alive: bool
    trainer_alive: bool = False


def survey_job(job_id: str, root: Path | None = None) -> list[Seen]:
    """Each recorded local launch of ``job_id``, read before :func:`reconcile_job` kills and
    removes anything (it changes nothing)."""
    out = []
    for _, rec in _job_records(job_id, root):
        launch = rec.tags.get(TAG_LAUNCH) or rec.instance_id.removeprefix("local-")
        leader = leader_alive(rec)
        trainer = not leader and trainer_alive(rec)
        out.append(Seen(rec.instance_id, launch, rec.created_at, leader, trainer))
    return out


def reconcile_job(job_id: str, root: Path | None = None, *, grace_s: float = 5.0) -> list[str]:
    """Kill the session of every recorded local instance of ``job_id`` that is still running
    and provably ours (see the module docstring); returns their instance ids.

    Records of processes that are gone, or whose pid now belongs to a stranger, are removed
    without signalling anything.
    """
    killed: list[str] = []
    for path, rec in _job_records(job_id, root):
        if is_ours_now(rec):
            _terminate_group(rec, grace_s)
            killed.append(rec.instance_id)
        remove_record(path)
    return killed
