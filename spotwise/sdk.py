"""What a training script imports: hyper-parameters in; metrics, checkpoints and exits out.

A trial is the user's command, started by the orchestrator as a child process (an argv list,
never a shell) once per *attempt*: the first launch and every relaunch after an interruption or
a migration. Everything passes through environment variables — this is the whole contract:

=============================  =====================================================================
``SPOTWISE_JOB_ID``            the job's id (str)
``SPOTWISE_TRIAL_ID``          the trial's id (str)
``SPOTWISE_ATTEMPT``           int: 0 on the first launch, +1 on each relaunch
``SPOTWISE_PARAMS``            JSON object of hyper-parameters, e.g. ``{"lr": 0.05, "hidden": 64}``
``SPOTWISE_STEPS``             int: total steps of the trial
``SPOTWISE_CHECKPOINT_URI``    the trial's checkpoint folder path or URI (``s3://b/prefix``, ...)
``SPOTWISE_CHECKPOINT_EVERY``  int >= 1: steps between periodic checkpoints
``SPOTWISE_EVENTS_FILE``       path of a JSON-lines file the SDK appends events to
``SPOTWISE_STOP_FILE``         path; once it exists, :func:`should_stop` is True
``SPOTWISE_CONTROL_FILE``      optional path of a JSON file ``{"checkpoint_every": N}`` the
                               orchestrator may (re)write at any time; while it exists and holds
                               an int >= 1 it overrides ``SPOTWISE_CHECKPOINT_EVERY``
``SPOTWISE_RESUME_STEP``       optional int >= 0: the step of the newest checkpoint the
                               orchestrator saw saved (0: none); see *Resuming* below
=============================  =====================================================================

Events, one JSON object per line, each line flushed and fsynced (``time`` is epoch seconds)::

    {"type": "report", "step": 3, "metric": 0.91, "time": 1.7e9}
    {"type": "report", "step": 4, "metric": null, "invalid": true, "time": ...}   NaN / inf
    {"type": "checkpoint", "step": 5, "uri": "/ckpt/trial-3/ckpt-00000005.pt", "seconds": 1.234,
     "time": ...}   seconds: the save's wall time, serialising to the put (older SDKs: none)
    {"type": "stopping", "reason": "signal" | "stop_file", "step": 7, "time": ...}
    {"type": "done", "step": 40, "time": ...}
    {"type": "checkpoint_rejected", "step": 10, "file": ".../ckpt-00000010.pt", "reason": "...",
     "kept_as": ".../ckpt-00000010.pt.corrupt", "resume_step": 5, "time": ...}
    {"type": "resume_behind", "step": 0, "expected": 10, "uri": "...", "time": ...}
    {"type": "checkpoint_behind", "step": 5, "latest": 10, "uri": "...", "time": ...}
    {"type": "checkpoint_cleanup_failed", "step": 15, "what": "latest" | "retention",
     "reason": "...", "uri": "...", "time": ...}
    {"type": "sigterm_handler_reset", "step": 3, "handler": "SIG_IGN", "time": ...}
    {"type": "checkpoint_failed", "step": 5, "errno": 28, "reason": "No space left on device",
     "uri": "/ckpt/trial-3", "time": ...}   a save the machine's storage refused (full, over
     quota, read-only, I/O error), written before the CheckpointError is raised

Beside the events file the SDK keeps ``<events file>.writer``, ``{"pid": ..., "start": ...}``
of the process that last wrote an event (rewritten atomically when another process writes):
`spotwise cancel` of a dead local job reads it to tell a trainer still running under a wrapper
(``bash train.sh``) from helper processes that outlived a dead trainer. A writer of events
other than this SDK need not keep it (its trial is then judged by its first process alone).

Stopping: the orchestrator asks a trial to checkpoint and exit (a spot interruption notice, a
migration, an early stop) by creating the stop file or sending SIGTERM. The SDK's SIGTERM
handler — installed on the first call into the SDK, from the main thread only — just sets a
flag (it never raises inside the training loop, and never ends the process); :func:`should_stop`
then returns True, and the script saves a checkpoint and exits 0. The ``stopping`` event is
written once, when the script first observes the request. The script's own SIGTERM handlers
keep working: the SDK's calls the one it replaced, and a handler installed after it (a
framework's, during ``fit``) is taken back on the SDK's next call and called after the flag is
set; one reset to ``SIG_DFL``/``SIG_IGN`` after it is taken back with a warning and a
``sigterm_handler_reset`` event (:mod:`spotwise.sdk_signal`).

Live settings: the orchestrator may change a running trial's checkpoint interval (a policy's
``SetCheckpointEvery``) by replacing the control file atomically (temp file + rename; on a cloud
the instance agent relays it from the trial's artifacts folder). :func:`checkpoint_every` stats
the file on each call and parses it only when its identity, size or mtime changed; a missing file
means the environment's value, a malformed or partial one (or a value < 1) keeps the last good
value — never an error.

A training loop::

    from spotwise import sdk

    state = sdk.load_checkpoint()               # None on a fresh start
    start = state["step"] if state else 0
    for step in range(start + 1, sdk.steps() + 1):
        ...train one step...
        sdk.report(step, val_accuracy)
        due = sdk.checkpoint_due(step)          # periodic, or a stop was requested
        stop = sdk.should_stop()                # read once, before saving (see below)
        if due or stop:
            sdk.save_checkpoint({"step": step, "model": model.state_dict(), ...}, step)
        if stop:
            raise SystemExit(0)
    sdk.done(sdk.steps())

Read :func:`should_stop` once per step, before the decision to save, and leave only after saving:
a SIGTERM can land between any two calls, and a loop that asks again after saving may leave
without a checkpoint of the step it stopped at (a request seen later is saved and obeyed at the
next step).

Resuming: :func:`load_checkpoint` returns the newest checkpoint that verifies (size and SHA-256
of its manifest), that ``torch.load(weights_only=True)`` reads as a dict and, when the SDK knows
its trial id, whose manifest names this trial (or none). Each newer checkpoint that fails is
skipped: one warning line on stderr names its file, the reason and the step resumed from instead,
a ``checkpoint_rejected`` event records it, and its files are renamed ``*.corrupt``
(``*.foreign`` for another trial's) — never deleted, and no longer in the way of the next save
of that step. When none is usable, :class:`~spotwise.errors.CheckpointError` is raised.

Only the file's own failures are set aside. When this machine or the store fails instead (out of
memory — ``map_location='cuda'`` on a busy GPU —, a missing or failing device, a read that the
store refused, timed out or throttled), :func:`load_checkpoint` raises a one-line
:class:`~spotwise.errors.ConfigError` or :class:`~spotwise.errors.CheckpointError` and renames
nothing: the attempt fails, and the next one loads the same newest checkpoint.

A script that saves checkpoints but never calls :func:`load_checkpoint` retrains from scratch
on each relaunch, and its saves go back in steps: step 5 while the folder holds step 10 of the
earlier attempt. Such a save is written like any other (``LATEST`` names it), retention keeps
it, and the earlier attempt's newer checkpoints stay until the script's saves pass them; the
first such save of a process warns once on stderr and records a ``checkpoint_behind`` event.
Meanwhile :func:`load_checkpoint` (in a later attempt, or a script that does call it) resumes
from the *highest step* that verifies — the earlier attempt's step 10, not the step 5 saved last
— and retention never deletes that one.

When the orchestrator expected a checkpoint (``SPOTWISE_RESUME_STEP``) and the newest usable one
is older, or there is none (the folder was deleted, or is not mounted), the trial still
*continues* from what there is, or from scratch, after a warning on stderr and a
``resume_behind`` event. Refusing to start would be cheaper only if someone could repair the
folder: the orchestrator relaunches the same expectation every time (it never lowers it), so a
refusal would fail the trial after its retries and lose all of it, where continuing costs at
most the steps redone — and the warning and the event say so, so it is never silent.

Run by hand (no ``SPOTWISE_*`` variables) the SDK works standalone: empty params, no events,
checkpoints in ``./spotwise-checkpoints`` — so ``python train.py`` just trains (and resumes from
that folder; delete it to start over).

Checkpoints are serialised with ``torch.save`` and read back with ``torch.load(...,
weights_only=True)``: tensors, numbers, strings, bytes, None and lists/tuples/sets/dicts of
these (state dicts, RNG states) — never arbitrary pickled objects. torch is imported only inside
the checkpoint functions, so ``import spotwise.sdk`` stays cheap.
"""

from __future__ import annotations

import io
import json
import math
import os
import threading
import time
from typing import Any

from spotwise.checkpoint.base import (
    CheckpointStore,
    ForeignCheckpointError,
    Manifest,
    checkpoint_name,
)
from spotwise.checkpoint.registry import open_checkpoint_store
from spotwise.checkpoint.resumelog import (
    set_aside,
    warn_behind,
    warn_put_problems,
    warn_saving_behind,
)
from spotwise.checkpoint.torchstate import check_loadable, torch_load
from spotwise.errors import CheckpointError, ConfigError
from spotwise.sdk_io import (  # the contract's names: spotwise.sdk.ENV_* and so on
    CONTROL_MAX_BYTES,  # noqa: F401 (re-exported)
    DEFAULT_CHECKPOINT_EVERY,
    ENV_ATTEMPT,
    ENV_CHECKPOINT_EVERY,
    ENV_CHECKPOINT_URI,
    ENV_CONTROL_FILE,
    ENV_EVENTS_FILE,  # noqa: F401 (re-exported)
    ENV_JOB_ID,
    ENV_PARAMS,
    ENV_RESUME_STEP,
    ENV_STEPS,
    ENV_STOP_FILE,
    ENV_TRIAL_ID,
    STANDALONE_CHECKPOINT_DIR,
)
from spotwise.sdk_io import check_metric as _check_metric
from spotwise.sdk_io import check_step as _check_step
from spotwise.sdk_io import control_value as _control_value
from spotwise.sdk_io import emit as _emit
from spotwise.sdk_io import env_int as _env_int
from spotwise.sdk_io import say_storage_failed as _say_storage_failed
from spotwise.sdk_signal import hold_sigterm, say_reset


class _Runtime:
    """Process-wide SDK state. Configuration is re-read from the environment on every call."""

    def __init__(self) -> None:
        self.stop_requested = False  # set by the SIGTERM handler
        self.handler: object = None  # the SIGTERM handler the SDK installed last (sdk_signal)
        self.handler_warned = False  # a SIGTERM handler reset after the SDK's was said
        self.stopping_emitted = False
        self.last_step = 0  # the newest step the script reported, saved or resumed from
        self.saved_max: int | None = None  # the highest step this process saved
        self.resumed: int | None = None  # the step load_checkpoint returned, if it ran
        self.behind_warned = False  # a save older than the store's newest was warned about
        self.cleanup_warned: set[str] = set()  # kinds of failures after a save, warned about
        # the control file as last parsed: (path, inode, size, mtime_ns), and its last good value
        self.control_seen: tuple[str, int, int, int] | None = None
        self.control_every: int | None = None


_runtime = _Runtime()
_clock = time.monotonic  # times a save (tests inject a fake one)


# -- configuration -------------------------------------------------------------------------
def params() -> dict[str, Any]:
    """The trial's hyper-parameters (``SPOTWISE_PARAMS``); ``{}`` when run by hand."""
    _ensure_handler()
    raw = os.environ.get(ENV_PARAMS, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{ENV_PARAMS} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{ENV_PARAMS} must be a JSON object, got {type(value).__name__}")
    return value


def steps(default: int = 10) -> int:
    """Total steps of the trial (``SPOTWISE_STEPS``); ``default`` when run by hand."""
    _ensure_handler()
    return _env_int(ENV_STEPS, default, minimum=1)


def attempt() -> int:
    """0 on the trial's first launch, +1 on each relaunch (``SPOTWISE_ATTEMPT``)."""
    _ensure_handler()
    return _env_int(ENV_ATTEMPT, 0, minimum=0)


def job_id() -> str:
    """The job's id, or ``""`` when run by hand."""
    return os.environ.get(ENV_JOB_ID, "")


def trial_id() -> str:
    """The trial's id, or ``""`` when run by hand."""
    return os.environ.get(ENV_TRIAL_ID, "")


def checkpoint_every() -> int:
    """Steps between periodic checkpoints: the control file's value when it exists and is
    valid, else ``SPOTWISE_CHECKPOINT_EVERY`` (default 5)."""
    live = _control_every()
    if live is not None:
        return live
    return _env_int(ENV_CHECKPOINT_EVERY, DEFAULT_CHECKPOINT_EVERY, minimum=1)


def _control_every() -> int | None:
    """The control file's ``checkpoint_every`` (cached by the file's identity, size and mtime);
    None when there is no control file, or it never held a valid value."""
    path = os.environ.get(ENV_CONTROL_FILE, "").strip()
    if not path:
        return None
    rt = _runtime
    rt.control_seen, rt.control_every = _control_value(path, rt.control_seen, rt.control_every)
    return rt.control_every


def checkpoint_store() -> CheckpointStore:
    """This trial's checkpoint store (``SPOTWISE_CHECKPOINT_URI`` or ``./spotwise-checkpoints``)."""
    uri = os.environ.get(ENV_CHECKPOINT_URI, "").strip() or STANDALONE_CHECKPOINT_DIR
    return open_checkpoint_store(uri)


# -- stopping ------------------------------------------------------------------------------
def _on_sigterm(signum: int, frame: object) -> None:
    _runtime.stop_requested = True  # only a flag: no I/O, no exception inside the loop


def _ensure_handler() -> None:
    """Hold SIGTERM, from the main thread (elsewhere signals cannot be set): the SDK's handler,
    chained to the script's, installed on the first call and taken back from a handler
    installed after it (:mod:`spotwise.sdk_signal`)."""
    if threading.current_thread() is not threading.main_thread():
        return
    _runtime.handler, overridden = hold_sigterm(_on_sigterm, _runtime.handler)
    if overridden is not None and not _runtime.handler_warned:  # said once per process
        _runtime.handler_warned = True
        say_reset(overridden, _runtime.last_step, _emit)


def should_stop() -> bool:
    """True once SIGTERM arrived or the stop file exists: save a checkpoint and exit 0."""
    _ensure_handler()
    reason = ""
    if _runtime.stop_requested:
        reason = "signal"
    else:
        stop_file = os.environ.get(ENV_STOP_FILE, "").strip()
        if stop_file and os.path.exists(stop_file):
            reason = "stop_file"
    if not reason:
        return False
    if not _runtime.stopping_emitted:
        _runtime.stopping_emitted = True
        _emit({"type": "stopping", "reason": reason, "step": _runtime.last_step})
    return True


def checkpoint_due(step: int) -> bool:
    """True when ``step`` is a multiple of the checkpoint interval, or a stop was requested."""
    step = _check_step(step)
    return step % checkpoint_every() == 0 or should_stop()


# -- events --------------------------------------------------------------------------------
def report(step: int, metric: float) -> None:
    """Record the trial's metric after ``step``: a number (not a bool or a string). NaN or inf
    is recorded as invalid, not raised."""
    _ensure_handler()
    step = _check_step(step)
    value = _check_metric(metric)
    event: dict[str, Any] = {"type": "report", "step": step, "metric": value}
    if not math.isfinite(value):
        event.update(metric=None, invalid=True)
    _runtime.last_step = step
    _emit(event)


def done(step: int) -> None:
    """Record that the trial finished after ``step``."""
    _ensure_handler()
    step = _check_step(step)
    _runtime.last_step = step
    _emit({"type": "done", "step": step})


# -- checkpoints ---------------------------------------------------------------------------
def save_checkpoint(state: dict[str, Any], step: int) -> str:
    """Serialise ``state`` with ``torch.save``, store it atomically, and return its URI.

    A step older than the newest checkpoint in the store (a script that retrains instead of
    resuming) is saved too, with one warning per process (see *Resuming* in the module docs).
    A step saved again with other bytes never overwrites the bytes of its earlier checkpoint:
    they stay until the new manifest replaces the old one (the data goes under a name with
    the start of its SHA-256, ``ckpt-00000005-0123456789ab.pt``). Once the manifest is
    written the checkpoint is saved: a failure to update ``LATEST`` or to remove older
    checkpoints after that is a warning (once per kind and process) and a
    ``checkpoint_cleanup_failed`` event, not an exception."""
    _ensure_handler()
    step = _check_step(step)
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    import torch

    started = _clock()  # the wait a notice's save must fit in: serialising to the put's end
    check_loadable(state, "state", torch)
    buf = io.BytesIO()
    torch.save(state, buf)
    meta = {"step": step, "attempt": attempt(), "job_id": job_id(), "trial_id": trial_id()}
    store = checkpoint_store()
    try:
        uri = store.put(checkpoint_name(step), buf.getvalue(), meta)
    except (CheckpointError, OSError) as e:  # this machine's storage: said before raised
        _say_storage_failed(e, store.uri, step)
        raise
    seconds = round(max(_clock() - started, 0.0), 3)
    _runtime.last_step = step
    _emit({"type": "checkpoint", "step": step, "uri": uri, "seconds": seconds})
    problems = getattr(store, "put_problems", None)  # failed after the save: said, not raised
    if problems:
        warn_put_problems(store, step, problems, _runtime.cleanup_warned, _emit)
    newer = getattr(store, "newer_at_put", None)  # what the put's own listing saw
    if isinstance(newer, int) and not _runtime.behind_warned:
        _runtime.behind_warned = True
        warn_saving_behind(store, step, newer, _runtime.saved_max, _runtime.resumed, _emit)
    _runtime.saved_max = max(step, _runtime.saved_max or 0)
    return uri


def load_checkpoint(map_location: Any = "cpu") -> dict[str, Any] | None:
    """The usable checkpoint of the highest step, or None. Never unpickles arbitrary objects.

    A newer checkpoint that is corrupt, is not a ``torch.save`` dict that safe loading reads,
    or belongs to another trial is skipped with a warning and set aside (see *Resuming* in the
    module docs); when none is usable, :class:`~spotwise.errors.CheckpointError`. When the
    checkpoint cannot be read or loaded *here* (a storage error, out of memory, no such
    device) that error propagates and nothing is set aside. A checkpoint older than
    ``SPOTWISE_RESUME_STEP`` (or none when one was expected) is warned about and used."""
    _ensure_handler()
    store = checkpoint_store()
    mine = trial_id()

    def decode(data: bytes, manifest: Manifest, where: str) -> dict[str, Any]:
        owner = manifest.get("trial_id")
        if mine and isinstance(owner, str) and owner and owner != mine:
            job = manifest.get("job_id")
            of_job = f" of job {job}" if isinstance(job, str) and job else ""
            raise ForeignCheckpointError(
                f"checkpoint {where} belongs to trial {owner}{of_job}, not to this trial {mine}"
            )
        return torch_load(data, where, map_location)

    expected = _env_int(ENV_RESUME_STEP, 0, minimum=0)
    found = store.load_latest(decode)
    if found is None:
        warn_behind(store, 0, expected, _emit)
        return None
    state, manifest = found
    step = int(manifest.get("step", 0))
    skipped = manifest.get("fallback_skipped") or []
    for bad in skipped:
        set_aside(store, bad, step, _emit)
    if not any(int(bad["step"]) >= expected for bad in skipped):  # else the line above says it
        warn_behind(store, step, expected, _emit)
    _runtime.last_step = max(_runtime.last_step, step)
    _runtime.resumed = step
    return state
