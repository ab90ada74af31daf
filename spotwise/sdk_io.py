"""The stateless plumbing under :mod:`spotwise.sdk`: the ``SPOTWISE_*`` variable names and how
they are read, the control file's value, the events file's writer, and the check of a step.

Nothing here keeps process state (the SIGTERM flag, the stop and resume bookkeeping and the
control file's cache live in :mod:`spotwise.sdk`), and only the standard library and
:mod:`spotwise.errors` are imported, so ``import spotwise.sdk`` stays cheap. The contract these
implement (the variables, the event lines, the control file) is documented in
:mod:`spotwise.sdk`; a training script imports that module, never this one.
"""

from __future__ import annotations

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

STANDALONE_CHECKPOINT_DIR = "spotwise-checkpoints"
DEFAULT_CHECKPOINT_EVERY = 5
CONTROL_MAX_BYTES = 4096  # a control file is a few bytes; never read a huge one


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


def emit(event: dict[str, Any]) -> None:
    """Append one event line to the events file (flushed and fsynced); no-op without one."""
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


def check_step(step: object) -> int:
    """``step`` as an int >= 0 (ints, numpy ints, 0-d integer tensors); TypeError or
    ValueError otherwise (a bool is not a step)."""
    if isinstance(step, bool):
        raise TypeError(f"step must be an int >= 0, got {step!r}")
    if not isinstance(step, SupportsIndex):
        raise TypeError(f"step must be an int >= 0, got {type(step).__name__} {step!r}")
    value = operator.index(step)  # ints, numpy ints, 0-d integer tensors
    if value < 0:
        raise ValueError(f"step must be an int >= 0, got {value}")
    return value
