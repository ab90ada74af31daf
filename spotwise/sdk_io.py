"""The stateless plumbing under :mod:`spotwise.sdk`: the ``SPOTWISE_*`` variable names and how
they are read, the control file's value, the events file's writer, and the checks of a step
and a metric.

Nothing here keeps process state (the SIGTERM flag, the stop and resume bookkeeping and the
control file's cache live in :mod:`spotwise.sdk`), and only the standard library and
:mod:`spotwise.errors` are imported, so ``import spotwise.sdk`` stays cheap. The contract these
implement (the variables, the event lines, the control file) is documented in
:mod:`spotwise.sdk`; a training script imports that module, never this one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import operator
import os
import time
from typing import Any, SupportsIndex

from spotwise.errors import ConfigError

ENV_JOB_ID = "SPOTWISE_JOB_ID"
ENV_TRIAL_ID = "SPOTWISE_TRIAL_ID"
ENV_ATTEMPT = "SPOTWISE_ATTEMPT"
ENV_PARAMS = "SPOTWISE_PARAMS"
ENV_STEPS = "SPOTWISE_STEPS"
ENV_CHECKPOINT_URI = "SPOTWISE_CHECKPOINT_URI"
ENV_CHECKPOINT_EVERY = "SPOTWISE_CHECKPOINT_EVERY"
ENV_EVENTS_FILE = "SPOTWISE_EVENTS_FILE"
ENV_STOP_FILE = "SPOTWISE_STOP_FILE"
ENV_CONTROL_FILE = "SPOTWISE_CONTROL_FILE"
ENV_RESUME_STEP = "SPOTWISE_RESUME_STEP"
#: Beside the events file (``events-0.jsonl.writer``): which process writes them (note_writer).
WRITER_SUFFIX = ".writer"

STANDALONE_CHECKPOINT_DIR = "spotwise-checkpoints"
DEFAULT_CHECKPOINT_EVERY = 5
CONTROL_MAX_BYTES = 4096  # a control file is a few bytes; never read a huge one
MAX_STEP = 2**63 - 1  # the largest step the store's 64-bit INTEGER columns hold
SHOWN_CHARS = 80  # of a bad value's repr in an error message
ControlSeen = tuple[str, int, int, int]  # a control file's (path, inode, size, mtime_ns)
BOOL_DTYPES = ("bool", "torch.bool")  # a numpy bool's dtype, a bool tensor's: not a metric
#: a checkpoint write failed for these: this machine's storage (full, over quota, read-only,
#: failing), not the trial (its ``checkpoint_failed`` event; review-bf BF1)
STORAGE_ERRNOS = frozenset(
    e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EROFS, errno.EIO) if e
)


def env_int(name: str, default: int, *, minimum: int) -> int:
    """The integer in the environment variable ``name`` (``default`` when unset or blank); a
    one-line :class:`~spotwise.errors.ConfigError` when it is not an integer >= ``minimum``."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def read_control(path: str) -> int | None:
    """The valid ``checkpoint_every`` in the control file at ``path``, or None (never raises)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(CONTROL_MAX_BYTES + 1)
        doc = json.loads(raw) if len(raw) <= CONTROL_MAX_BYTES else None
    except (OSError, ValueError, RecursionError):  # bad JSON or UTF-8 (a partial write), ...
        return None
    value = doc.get("checkpoint_every") if isinstance(doc, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None


def control_value(
    path: str, seen: ControlSeen | None, last: int | None
) -> tuple[ControlSeen | None, int | None]:
    """The control file at ``path`` as the SDK caches it: ``(its identity, size and mtime now,
    its last valid checkpoint_every)``, read again only when the first changed from ``seen``;
    ``(None, None)`` when there is no such file (the environment's value applies), and
    ``last`` kept when the file holds no valid value (a partial write)."""
    try:
        st = os.stat(path)
    except OSError:  # not written (yet), or removed: the environment's value
        return None, None
    now = (path, st.st_ino, st.st_size, st.st_mtime_ns)
    if now == seen:
        return seen, last
    value = read_control(path)
    return now, (value if value is not None else last)


def self_start() -> str:
    """This process's start time as Linux counts it (field 22 of ``/proc/self/stat``, clock
    ticks since boot); "" where it cannot be read (off Linux)."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            text = fh.read().decode()
        return text[text.rfind(")") + 2 :].split()[19]
    except (OSError, IndexError, UnicodeDecodeError):
        return ""


def note_writer(events_path: str) -> None:
    """Say which process writes the trial's events: ``{"pid": ..., "start": ...}`` in
    ``<events file>`` + :data:`WRITER_SUFFIX`, rewritten (atomically) when another process
    writes them. A cancel of a dead local job reads it to tell the trainer still running under
    a wrapper that died (``bash train.sh``) from helpers that outlived a dead trainer
    (:func:`spotwise.providers.local_records.survey_job`). Never raises: it is not an event."""
    side = events_path + WRITER_SUFFIX
    pid = os.getpid()
    try:
        with open(side, "rb") as fh:
            if json.loads(fh.read(CONTROL_MAX_BYTES)).get("pid") == pid:
                return  # said already (one read per event: the event itself was fsynced)
    except (OSError, ValueError, AttributeError):
        pass  # none yet, or unreadable: (re)write it
    tmp = f"{side}.tmp-{pid}"
    try:
        with open(tmp, "w") as fh:
            json.dump({"pid": pid, "start": self_start()}, fh)
        os.replace(tmp, side)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def read_writer(events_path: str) -> tuple[int, str] | None:
    """``(pid, start)`` :func:`note_writer` left beside the events file at ``events_path``;
    None when there is none, it is malformed, or its start could not be read."""
    try:
        with open(events_path + WRITER_SUFFIX, "rb") as fh:
            doc = json.loads(fh.read(CONTROL_MAX_BYTES))
    except (OSError, ValueError):
        return None
    pid, start = (doc.get("pid"), doc.get("start")) if isinstance(doc, dict) else (None, None)
    if isinstance(pid, int) and not isinstance(pid, bool) and isinstance(start, str) and start:
        return pid, start
    return None


def emit(event: dict[str, Any]) -> None:
    """Append one event line to the events file (flushed and fsynced), then say which process
    wrote it (:func:`note_writer`); no-op without one."""
    path = os.environ.get(ENV_EVENTS_FILE, "").strip()
    if not path:
        return
    line = json.dumps({**event, "time": time.time()}, allow_nan=False, separators=(",", ":"))
    data = (line + "\n").encode()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while data:  # O_APPEND: each write lands at the end, whole lines in one write
            n = os.write(fd, data)
            data = data[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    note_writer(path)


def storage_cause(error: BaseException) -> OSError | None:
    """The :class:`OSError` among ``error`` and its causes (a CheckpointError raised ``from``
    it) whose errno is one of :data:`STORAGE_ERRNOS`, or None."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno in STORAGE_ERRNOS:
            return cause
        cause = cause.__cause__ or cause.__context__
    return None


def say_storage_failed(error: BaseException, uri: str, step: int) -> None:
    """Before a failed save's ``error`` is raised: a ``checkpoint_failed`` event when its cause
    is the storage (:func:`storage_cause`), so that the orchestrator does not count the trial's
    exit as its own failure. Never raises: the events file may be on the full disk too."""
    cause = storage_cause(error)
    if cause is None or cause.errno is None:
        return
    reason = os.strerror(cause.errno)
    event = {"type": "checkpoint_failed", "step": step, "errno": cause.errno, "reason": reason}
    with contextlib.suppress(OSError, ValueError):
        emit({**event, "uri": uri})


def shown(value: object) -> str:
    """``repr(value)`` for an error message, at most ``SHOWN_CHARS`` characters; an int too
    long to print (Python refuses more than 4300 digits) by its size."""
    try:
        text = repr(value)
    except ValueError:  # int -> str conversion limit
        bits = value.bit_length() if isinstance(value, int) else 0
        return f"an int of {bits} bits"
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 3] + "..."
    return text


def described(value: object) -> str:
    """A bad value as an error names it: its type, then :func:`shown`."""
    text = shown(value)
    return text if text.startswith("an int of ") else f"{type(value).__name__} {text}"


def check_step(step: object) -> int:
    """``step`` as an int from 0 to ``MAX_STEP`` (ints, numpy ints, 0-d integer tensors);
    TypeError or ValueError otherwise (a bool is not a step). The store keeps a step in a
    64-bit INTEGER: a larger one (a timestamp in ns, a hash) would stop the orchestrator."""
    if isinstance(step, bool):
        raise TypeError(f"step must be an int >= 0, got {step!r}")
    if not isinstance(step, SupportsIndex):
        raise TypeError(f"step must be an int >= 0, got {described(step)}")
    value = operator.index(step)  # ints, numpy ints, 0-d integer tensors
    if value < 0:
        raise ValueError(f"step must be an int >= 0, got {value}")
    if value > MAX_STEP:
        raise ValueError(
            f"step must be an int from 0 to {MAX_STEP} (2**63-1, what the store keeps), "
            f"got {shown(value)}: report a step count, not a timestamp or a hash"
        )
    return value


def check_metric(metric: object) -> float:
    """``metric`` as a float (ints, floats, numpy scalars, one-element tensors; NaN and inf
    too: :func:`spotwise.sdk.report` records those as invalid). TypeError for a bool (a bool
    tensor or numpy bool too), a string or bytes (``"0.9"`` was once read as 0.9: a number
    is asked for, as for a step), or anything ``float()`` refuses; ValueError for a number
    too large for a float (``10**400``), which ``float()`` cannot turn even into inf."""
    boolean = isinstance(metric, bool) or str(getattr(metric, "dtype", "")) in BOOL_DTYPES
    if boolean or isinstance(metric, str | bytes | bytearray):
        fix = ": pass float(...) of it" if isinstance(metric, str) else ""
        raise TypeError(f"metric must be a number, got {described(metric)}{fix}")
    try:
        return float(metric)  # type: ignore[arg-type]  # what float() takes is checked here
    except OverflowError:
        raise ValueError(
            f"metric must be a finite number, got {described(metric)} (too large for a float)"
        ) from None
    except (TypeError, ValueError):
        raise TypeError(f"metric must be a number, got {described(metric)}") from None
