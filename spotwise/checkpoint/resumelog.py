"""What the SDK says when a resume or a save does not go as the orchestrator expects: one
warning line on the trial's stderr (its log) and one event, for each of

* ``checkpoint_rejected``: a newer checkpoint was corrupt, unloadable or another trial's; it is
  renamed (never deleted) and the trial resumes from the one before;
* ``resume_behind``: the newest usable checkpoint is older than ``SPOTWISE_RESUME_STEP``;
* ``checkpoint_behind``: a save went back in steps (a script that retrains on a relaunch);
* ``checkpoint_cleanup_failed``: a save succeeded (its manifest is written) but what follows
  failed: updating ``LATEST`` (``"what": "latest"``) or removing older checkpoints
  (``"retention"``). The save does not raise; said once per kind by each process.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from spotwise.checkpoint.base import CORRUPT_SUFFIX, FOREIGN_SUFFIX, CheckpointStore
from spotwise.errors import CheckpointError

Emit = Callable[[dict[str, Any]], None]


def warn_saving_behind(
    store: CheckpointStore,
    step: int,
    latest: int,
    saved_max: int | None,
    resumed: int | None,
    emit: Emit,
) -> None:
    """Warn (and record an event) that a save went back in steps: readers resume from the
    highest step, so the steps saved since are not what a relaunch continues from.
    ``saved_max``: the highest step this process saved; ``resumed``: the step it loaded."""
    if saved_max is not None and latest <= saved_max:  # this process's own
        warn(
            f"saving step {step} after this script saved step {latest} in {store.uri}: a "
            f"relaunch resumes from the highest step (sdk.load_checkpoint() loads step {latest})"
        )
    elif resumed is not None:  # it loaded a checkpoint, then went back anyway
        warn(
            f"saving step {step} while {store.uri} holds step {latest}: a relaunch resumes "
            f"from the highest step (sdk.load_checkpoint() loads step {latest})"
        )
    else:
        warn(
            f"saving step {step} while {store.uri} holds step {latest} from an earlier attempt: "
            "this script does not resume from its checkpoints (call sdk.load_checkpoint() at "
            f"its start to continue from step {latest})"
        )
    emit({"type": "checkpoint_behind", "step": step, "latest": latest, "uri": store.uri})


def warn_put_problems(
    store: CheckpointStore,
    step: int,
    problems: dict[str, CheckpointError],
    warned: set[str],
    emit: Emit,
) -> None:
    """Warn (and record an event) about what failed after a save had succeeded (the store's
    ``put_problems``), once per kind: ``warned`` holds the kinds already said."""
    for what, error in problems.items():
        if what in warned:
            continue
        warned.add(what)
        if what == "latest":
            effect = (
                "its LATEST pointer was not updated; loads are unaffected (they go by the "
                "manifests)"
            )
        else:
            effect = (
                "older checkpoints were not all removed; they stay, using storage, until a "
                "later save removes them"
            )
        hint = f" ({error.hint})" if error.hint else ""
        warn(f"checkpoint of step {step} saved in {store.uri}, but {effect}: {error.message}{hint}")
        emit(
            {
                "type": "checkpoint_cleanup_failed",
                "step": step,
                "what": what,
                "reason": error.message,
                "uri": store.uri,
            }
        )


def warn(message: str) -> None:
    """One warning line on stderr, where the trial's log shows it."""
    with contextlib.suppress(OSError, ValueError):  # stderr closed: the event still says it
        print(f"spotwise: warning: {message}", file=sys.stderr, flush=True)


def set_aside(store: CheckpointStore, bad: dict[str, Any], resumed: int, emit: Emit) -> None:
    """Warn about a checkpoint the load skipped, record it as an event, and rename its files
    (never deleted; a failure to rename is warned about, the trial goes on)."""
    suffix = FOREIGN_SUFFIX if bad.get("foreign") else CORRUPT_SUFFIX
    try:
        kept = store.set_aside(int(bad["step"]), suffix)
    except CheckpointError as e:
        kept, why = None, f"; it could not be renamed: {e.message}"
    else:
        why = f"; kept as {kept}" if kept else ""
    warn(f"{bad['reason']}; resuming from step {resumed} instead{why}")
    emit(
        {
            "type": "checkpoint_rejected",
            "step": int(bad["step"]),
            "file": str(bad["file"]),
            "reason": str(bad["reason"]),
            "kept_as": kept,
            "resume_step": resumed,
        }
    )


def warn_behind(store: CheckpointStore, step: int, expected: int, emit: Emit) -> None:
    """Warn (and record an event) when the orchestrator expected a newer checkpoint than the
    one found: the steps in between are trained again."""
    if step >= expected:
        return
    found = f"the newest usable one is step {step}" if step else "there is none"
    warn(
        f"expected to resume from the checkpoint of step {expected} in {store.uri}, but "
        f"{found}; training steps {step + 1}-{expected} again"
    )
    emit({"type": "resume_behind", "step": step, "expected": expected, "uri": store.uri})
