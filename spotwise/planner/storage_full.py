"""A trial whose checkpoint save the machine's storage refused (the folder's disk full, over its
quota, read-only, failing: review-bf BF1) is not the trial's failure. It was counted as one:
the trial was relaunched onto the same full disk, closed ``failed`` after two tries, its steps
and checkpoints lost to `spotwise resume`, and its point told to the search as a bad one.

The SDK writes a ``checkpoint_failed`` event (its errno one of
:data:`~spotwise.sdk_io.STORAGE_ERRNOS`) before it raises the save's CheckpointError; the
trial then exits non-zero. :func:`note` keeps that event per trial (a job event too);
:func:`cause` finds it when the attempt ends that way; :func:`end` closes the trial
``cancelled`` (what `spotwise resume` queues again, from its last good checkpoint), with no
failure counted and nothing told to the search, and :func:`raise_if_full` ends the job once
the pass has settled and billed every exit it found: the storage is the job's, every trial
would hit it. Used by :class:`~spotwise.planner.trialbook.TrialBook` and
:class:`~spotwise.planner.ledger.Ledger`.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spotwise.errors import CheckpointError
from spotwise.planner.policy import Event, TrialExited
from spotwise.planner.runstate import Life, TrialRun
from spotwise.sdk_io import STORAGE_ERRNOS

EVENT = "checkpoint_failed"  # the SDK's (spotwise.sdk), kept as a job event of that kind
#: what each storage errno says of the folder, and what to do before resuming
SAID: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("is full", "free space"),
    errno.EROFS: ("is on a read-only file system", "make it writable"),
    errno.EIO: ("could not be written (an I/O error)", "check its disk"),
}
if hasattr(errno, "EDQUOT"):
    SAID[errno.EDQUOT] = ("is over its disk quota", "free space or raise the quota")


@dataclass(frozen=True)
class Refused:
    """A save the storage refused: in which life, at which step, why, where."""

    launch_id: str
    step: int
    errno: int
    reason: str
    uri: str


def _held(book: Any) -> dict[str, Refused]:
    found: dict[str, Refused] = book.__dict__.setdefault("storage_refused", {})
    return found


def note(book: Any, t: TrialRun, life: Life, rec: dict[str, Any], now: float) -> bool:
    """Take one progress record of ``t``'s ``life`` (its step an int in range): True when it
    is a ``checkpoint_failed`` one (a job event; kept when its errno is the storage's). A later
    record that shows the trial went on past it (a report past its step, a checkpoint saved at
    or past it, ``done``) forgets it: an exit after that is the trial's own."""
    held = _held(book)
    kind, step = rec.get("type"), int(rec["step"])
    if kind != EVENT:
        old = held.get(t.trial_id)
        if old is None:
            return False
        went_on = (kind == "report" and step > old.step) or kind in ("checkpoint", "done")
        if old.launch_id != life.launch_id or went_on:
            del held[t.trial_id]
        return False
    code, said_reason, said_uri = rec.get("errno"), rec.get("reason"), rec.get("uri")
    ok = isinstance(code, int) and not isinstance(code, bool)
    reason = said_reason if isinstance(said_reason, str) and said_reason else ""
    reason = reason or (os.strerror(code) if isinstance(code, int) else "")
    uri = said_uri if isinstance(said_uri, str) and said_uri else str(t.checkpoint_uri or "")
    said = {"step": step, "errno": code, "reason": reason, "uri": uri}
    book._event(EVENT, now, t, sdk_time=rec.get("time"), **said)
    if ok and isinstance(code, int) and code in STORAGE_ERRNOS:
        held[t.trial_id] = Refused(life.launch_id, step, code, reason, uri)
    return True


def cause(book: Any, t: TrialRun, life: Life) -> Refused | None:
    """The storage's refusal that ended ``t``'s ``life`` (it exited non-zero), or None."""
    found = _held(book).get(t.trial_id)
    return found if found is not None and found.launch_id == life.launch_id else None


def message(refused: Refused, trial_id: str, job_id: str) -> str:
    """The job's one-line error: what the folder's storage did and what to do."""
    what, fix = SAID.get(refused.errno, ("could not be written", "fix it"))
    return (
        f"trial {trial_id} could not save its checkpoint of step {refused.step}: the checkpoint"
        f" folder {refused.uri} {what} ({refused.reason}): {fix}, then `spotwise resume {job_id}`"
    )


def end(
    book: Any,
    t: TrialRun,
    life: Life,
    refused: Refused,
    code: int,
    log_file: Path | None,
    now: float,
) -> Event:
    """``t``'s attempt ended on ``refused``: no failure counted, the trial closed ``cancelled``
    (`spotwise resume` runs it again from its last good checkpoint), and the job's end set for
    the end of this pass (:func:`raise_if_full`: every exit the pass found is settled and
    billed first, a trial that finished in it completed; the run's drain then stops the other
    trials: their saves go to the same storage). Returns the policy's event for the exit."""
    said = message(refused, t.trial_id, book.job_id)
    log = str(log_file or book.run_dir / "logs")
    book._event("error", now, t, exit_code=code, log=log, error=said, storage=True)
    t.crashed, t.last_error = False, said
    _held(book).pop(t.trial_id, None)
    book._close_trial(t, "cancelled", now)
    book.storage_full = (said, SAID.get(refused.errno, ("", "fix it"))[1])
    return TrialExited(t.trial_id, life.instance_id, False)


def raise_if_full(book: Any) -> None:
    """End the job (a :class:`~spotwise.errors.CheckpointError`, one line) once a pass found a
    trial whose checkpoint storage refused its save (:func:`end`)."""
    said = getattr(book, "storage_full", None)
    if said is not None:
        raise CheckpointError(said[0], hint=said[1])
