"""A relaunch that resumed at its trial's last step from a checkpoint another copy wrote.

A launch whose answer was lost may still have made its instance, and that instance runs a copy
of the trial (its own attempt number) on the trial's one checkpoint folder: after the relaunch
hold ran out (``RELAUNCH_HOLD_MAX_WALL_S``, :mod:`spotwise.planner.launch_cleanup`) the trial is
relaunched beside it. When the copy saves the last step before the relaunch loads its
checkpoint, the relaunch has no step left: it reports nothing, writes ``done <steps>`` and exits
0. Read as a crash ("exited with code 0 at step 0 ... without being asked to stop"), that paid
for one more instance, which did the same, and the trial failed blaming the user's script,
its result lost although its work was done.

The copy's reports are in its own events file (``events-<attempt>.jsonl``, in the trial's
folder or on a cloud in its artifacts folder), which the orchestrator never followed.
:func:`settle` decides such an exit: a life that exited 0, said ``done`` at the last step, and
reported nothing, though it was launched to resume from an earlier step. It reads the events of
the trial's other attempts (:func:`~spotwise.planner.trial_output.attempts_events`) and takes
the reports of the attempt that reported the last step (the one that also saved a checkpoint
there first, the newest first): the trial completes with that result, a ``result_recovered``
event naming the attempt. When no attempt reported the last step but one saved a checkpoint
there, the relaunch did resume from it: the trial fails once, saying so, and is not launched
again (a relaunch would resume there too). With neither (nothing found: a script that only
writes ``done``), the exit is left to the usual rules.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Protocol

from spotwise.planner.report import best_of, last_reported, reported_final
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trial_output import Records, attempts_events
from spotwise.sdk_io import MAX_STEP
from spotwise.spec import JobSpec

log = logging.getLogger("spotwise.planner")


class Book(Protocol):
    """What :func:`settle` uses of the orchestrator (a
    :class:`~spotwise.planner.trialbook.TrialBook`)."""

    store: Any
    spec: JobSpec
    job_id: str
    run_dir: Path

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None: ...


def note_done(life: Life, step: int) -> None:
    """The step of a ``done`` record the trial wrote on ``life``."""
    life.said_done_step = max(step, life.said_done_step or 0)


def done_step(life: Life) -> int | None:
    """The furthest step ``life``'s own ``done`` records said (None: none read)."""
    return life.said_done_step


def settle(
    book: Book,
    t: TrialRun,
    life: Life,
    code: int | None,
    log_file: Path | None,
    output: str,
    now: float,
) -> bool | None:
    """Decide an exit of ``life`` that ended unasked and unreported (see the module docstring):
    True when another attempt's reports gave the trial its result (taken in, the event
    recorded: the caller completes it), False when its result is lost (the error recorded, a
    failure counted: the caller closes it failed), None when this is not such an exit."""
    total, said = t.steps_total, done_step(life)
    if code != 0 or said is None or said < total or life.first_report_at is not None:
        return None
    if life.start_step >= total:  # it was launched at the end (a checkpoint we saw): not a copy's
        return None
    found, unread = attempts_events(book, t, life)
    source = _source(found, total)
    if source is None:
        if unread:
            log.warning("%s: trial %s: %s", book.job_id, t.trial_id, unread)
        return None
    attempt, records = source
    taken = _take(book, t, records, now)
    saved = _checkpoint(records)
    if reported_final(t):
        book._event(
            "result_recovered",
            now,
            t,
            attempt=life.attempt,
            from_attempt=attempt,
            step=total,
            metric=t.final_metric,
            reports=taken,
            message=(
                f"attempt {life.attempt} resumed at step {said} of {total} from a checkpoint "
                f"another copy of the trial saved, with no step left to run; its result is "
                f"attempt {attempt}'s report at step {total}"
            ),
        )
        return True
    t.failures += 1
    t.crashed = False  # not its script's failure: its point is not a bad one
    t.last_error = (
        f"attempt {life.attempt} resumed at step {said} of {total} from a checkpoint another "
        f"copy of the trial saved (attempt {attempt}, at step {saved}), with no step left to "
        f"run, and no report of {book.spec.metric.name} at step {total} was found in the events "
        f"of {_attempts(sorted(found))}"
        + (f" (not read: {unread})" if unread else "")
        + "; the trial's result is lost, and it is not launched again (a relaunch would resume "
        "there too)"
    )
    detail: dict[str, Any] = {
        "exit_code": code,
        "log": str(log_file or book.run_dir / "logs"),
        "error": t.last_error,
        "last_reported_step": last_reported(t),
        "from_attempt": attempt,
        "resumed_step": said,
    }
    if output:
        detail["last_output"] = output
    book._event("error", now, t, **detail)
    return False


def _attempts(numbers: list[int]) -> str:
    words = ", ".join(str(a) for a in numbers)
    return f"attempt {words}" if len(numbers) == 1 else f"attempts {words}"


def _source(found: dict[int, Records], total: int) -> tuple[int, Records] | None:
    """The attempt whose reports hold the trial's result: one that reported step ``total``,
    preferring one that also saved a checkpoint there (the copy the relaunch resumed from),
    the newest first; else the newest that saved a checkpoint there (the relaunch resumed from
    it, but its report is not to be found); None when no attempt did either."""

    def reported(records: Records) -> bool:
        return any(r.get("type") == "report" and r.get("step") == total for r in records)

    newest = sorted(found, reverse=True)
    ranked = sorted(
        (a for a in newest if reported(found[a])),
        key=lambda a: (_checkpoint(found[a]) < total, -a),
    ) + [a for a in newest if not reported(found[a]) and _checkpoint(found[a]) >= total]
    return (ranked[0], found[ranked[0]]) if ranked else None


def _checkpoint(records: Records) -> int:
    """The furthest step an attempt's events say it saved a checkpoint at (0: none)."""
    steps = [_step(r.get("step")) for r in records if r.get("type") == "checkpoint"]
    return max((s for s in steps if s is not None), default=0)


def _step(step: object) -> int | None:
    """A record's step, None when it is not an int the store can keep."""
    if isinstance(step, bool) or not isinstance(step, int):
        return None
    return step if 0 <= step <= MAX_STEP else None


def _number(value: object) -> float | None:
    """A record's number as a float (a metric, a time), None when it is not a finite one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _take(book: Book, t: TrialRun, records: Records, now: float) -> int:
    """Take in another attempt's reports of the steps after the trial's own (the latest report
    of each step) and its furthest checkpoint, as the trial's: observations, its curve, its
    record. Not timed (they were not seen as they came). Returns how many steps were taken."""
    latest: dict[int, tuple[float | None, float]] = {}
    for rec in records:
        step = _step(rec.get("step"))
        if rec.get("type") != "report" or step is None or step <= t.step:
            continue
        latest[step] = (_number(rec.get("metric")), _number(rec.get("time")) or time.time())
    for step in sorted(latest):
        value, wall = latest[step]
        t.step = max(t.step, step)
        t.furthest = max(t.furthest, step)
        t.metric_invalid = value is None  # NaN/inf (the SDK sends null): no usable value
        if value is not None:
            t.curve[step] = value
            book.store.add_observation(t.trial_id, step, value, wall, market_time=now)
        elif not t.invalid_metric:  # said once, as an event (as for its own reports)
            t.invalid_metric = True
            book._event("invalid_metric", now, t, step=step, metric=repr(None))
    t.checkpoint_step = max(t.checkpoint_step, _checkpoint(records))
    book.store.update_trial(
        t.trial_id,
        step=t.step,
        metric=None if t.metric_invalid else t.last_metric,
        best_metric=best_of(t, book.spec.metric.direction),
        checkpoint_step=t.checkpoint_step,
        checkpoint_uri=t.checkpoint_uri,
    )
    return len(latest)
