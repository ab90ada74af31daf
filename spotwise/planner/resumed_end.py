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
there, the relaunch did resume from it, and a relaunch would resume there too:

* a copy that has not said ``done`` may still be running (a script that saves before it
  reports; a cloud agent syncs its events every ``sync_s``): the trial waits, not launched
  (:func:`held`); its events are read again every agent sync period (:func:`recheck`, at
  each pass) for up to :func:`hold_s` wall seconds, a ``result_awaited`` event saying so.
  Its report there completes it; a ``done`` without it, or the end of the wait, fails it
  once, not launched again. A cancel or a limit closes it meanwhile as any waiting trial.
* a copy that said ``done`` fails the trial once at once, not launched again.
* the trial's own attempt (one it launched and followed: a ``launch`` event; its records at
  the end were not read before its life ended) is over: the trial failed for never reporting
  its metric at its last step, as when its checkpoint there was read
  (:func:`~spotwise.planner.report.unreported_final`).

With neither (nothing found: a script that only writes ``done``), the exit is left to the usual
rules.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from spotwise.planner.policy import Phase
from spotwise.planner.report import best_of, last_reported, reported_final, unreported_final
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trial_output import Records, attempts_events, record_metric, record_step
from spotwise.providers.trial_config import TrialConfig
from spotwise.spec import JobSpec

log = logging.getLogger("spotwise.planner")
#: A copy's report at the last step is awaited at least this long (wall seconds from the
#: relaunch's end) while its events show the checkpoint there but neither the report nor
#: ``done``: a script that saves before it evaluates and reports (:func:`hold_s`).
COPY_REPORT_HOLD_WALL_S = 120.0
Outcome = Literal["recovered", "lost", "held"]


class Book(Protocol):
    """What :func:`settle` uses of the orchestrator (a
    :class:`~spotwise.planner.trialbook.TrialBook`)."""

    store: Any
    spec: JobSpec
    job_id: str
    run_dir: Path

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None: ...

    def _close_trial(self, t: TrialRun, state: str, now: float) -> None: ...

    def _trial_write(self, t: TrialRun, **fields: Any) -> bool: ...


@dataclass
class Hold:
    """A trial waiting, not launched, for a copy's report at its last step (:func:`recheck`)."""

    trial: TrialRun
    life: Life  # the relaunch's life, ended: resumed at the last step, nothing to run
    attempt: int  # the copy's
    records: Records  # the copy's events as last read
    code: int | None
    log_file: Path | None
    output: str
    read: list[int]  # the attempts whose events were read at the relaunch's end
    unread: str
    since: float  # wall: the relaunch's end
    until: float  # wall: the wait ends (then one last read)
    period: float  # wall seconds between reads (the agents' sync period)
    read_at: float = 0.0  # wall: the next read
    errors: int = 0  # reads in a row that could not read every place


def wall_now() -> float:
    """The wall clock of the waits (monotonic seconds)."""
    return time.monotonic()


def sync_s(spec: JobSpec) -> float:
    """The longest period at which a cloud trial's agent uploads its events (its ``sync_s``,
    at least its poll period ``agent_poll_s``)."""
    period = float(TrialConfig.sync_s)
    for p in spec.providers:
        try:
            period = max(period, float(p.options.get("agent_poll_s") or 0.0))
        except (TypeError, ValueError):
            continue
    return period


def hold_s(spec: JobSpec) -> float:
    """How long a copy's report at the last step is awaited (wall seconds): two of its agent's
    sync periods (its ``checkpoint`` line may be uploaded one sync before its ``report``), and
    at least :data:`COPY_REPORT_HOLD_WALL_S` (its last evaluation)."""
    return max(COPY_REPORT_HOLD_WALL_S, 2 * sync_s(spec))


def note_done(life: Life, step: int) -> None:
    """The step of a ``done`` record the trial wrote on ``life``."""
    life.said_done_step = max(step, life.said_done_step or 0)


def done_step(life: Life) -> int | None:
    """The furthest step ``life``'s own ``done`` records said (None: none read)."""
    return life.said_done_step


def _holds(book: Book) -> dict[str, Hold]:
    holds: dict[str, Hold] = vars(book).setdefault("result_holds", {})  # trial id → its wait
    return holds


def holding(book: Book) -> bool:
    """Whether a trial waits for a copy's report (:func:`recheck` has work)."""
    return bool(_holds(book))


def held(book: Book, t: TrialRun) -> bool:
    """Whether ``t`` waits for a copy's report (:func:`recheck`): it is not launched again."""
    h = _holds(book).get(t.trial_id)
    return h is not None and h.trial is t and t.phase is Phase.WAITING


def settle(
    book: Book,
    t: TrialRun,
    life: Life,
    code: int | None,
    log_file: Path | None,
    output: str,
    now: float,
) -> Outcome | None:
    """Decide an exit of ``life`` that ended unasked and unreported (see the module docstring):
    ``recovered`` when another attempt's reports gave the trial its result (taken in, the
    event recorded: the caller completes it), ``lost`` when its result is lost (the error
    recorded, a failure counted: the caller closes it failed), ``held`` when a copy that may
    still run has not reported it yet (the caller puts the trial to wait: :func:`held` keeps
    it from a launch, :func:`recheck` decides it), None when this is not such an exit."""
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
    own = attempt in _followed(book, t)
    wall, wait = wall_now(), hold_s(book.spec)
    h = Hold(t, life, attempt, records, code, log_file, output, sorted(found), unread, wall,
             wall + wait, sync_s(book.spec))  # fmt: skip
    if own or _reported(records, total) or _said_done(records):
        return _decide(book, h, own, now)
    h.read_at = min(wall + h.period, h.until)
    _holds(book)[t.trial_id] = h
    book._event(
        "result_awaited",
        now,
        t,
        attempt=life.attempt,
        from_attempt=attempt,
        step=total,
        wait_s=wait,
        message=(
            f"attempt {life.attempt} resumed at step {said} of {total} from a checkpoint another "
            f"copy of the trial saved (attempt {attempt}, at step {_checkpoint(records)}), with "
            f"no step left to run; that copy has not reported {book.spec.metric.name} at step "
            f"{total} nor said it was done: its report is awaited up to {wait:.0f} s, the trial "
            "not launched meanwhile"
        ),
    )
    return "held"


def recheck(book: Book, now: float) -> None:
    """Each pass: read again the events of each copy a trial waits for (:func:`settle`'s
    ``held``), once its agent's sync period has passed since the last read (doubling while a
    place cannot be read). Its report at the last step completes the trial; its ``done``
    without it, or the end of the wait (after one last read), fails it, not launched again. A
    trial no longer waiting (a cancel, a limit or the policy closed it) is let go."""
    holds = _holds(book)
    for trial_id, h in list(holds.items()):
        t = h.trial
        if t.phase is not Phase.WAITING:  # closed meanwhile: its end stands
            holds.pop(trial_id)
            continue
        wall = wall_now()
        if wall < h.read_at:
            continue
        found, unread = attempts_events(book, t, h.life, only=[h.attempt])
        h.records = found.get(h.attempt, h.records)
        h.unread = unread or h.unread
        over = wall >= h.until
        if not (over or _reported(h.records, t.steps_total) or _said_done(h.records)):
            h.errors = h.errors + 1 if unread else 0
            h.read_at = min(wall + h.period * 2**h.errors, h.until)
            continue
        holds.pop(trial_id)
        waited = wall - h.since if over and not _said_done(h.records) else None
        outcome = _decide(book, h, False, now, waited)
        book._close_trial(t, "completed" if outcome == "recovered" else "failed", now)


def _decide(book: Book, h: Hold, own: bool, now: float, waited: float | None = None) -> Outcome:
    """Take in the reports of ``h``'s attempt and say the trial's end: ``recovered`` with its
    report at the last step, else ``lost`` (the error recorded, a failure counted). ``own``:
    an attempt the trial followed (its last records unread before its life ended);
    ``waited``: how long a copy that never said ``done`` was awaited."""
    t, life, attempt, records, code = h.trial, h.life, h.attempt, h.records, h.code
    read, unread, log_file, output = h.read, h.unread, h.log_file, h.output
    total, said = t.steps_total, done_step(life)
    taken = _take(book, t, records, now)
    saved = _checkpoint(records)
    whose = (
        f"its attempt {attempt} saved (not read before that life ended)"
        if own
        else "another copy of the trial saved"
    )
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
                f"{whose}, with no step left to run; its result is attempt {attempt}'s report "
                f"at step {total}"
            ),
        )
        return "recovered"
    t.failures += 1
    if own:  # its own work reached the last step unreported: the script's (unreported_final)
        t.crashed, t.unreported = code is not None, True
        t.last_error = (
            f"{unreported_final(t, book.spec.metric.name)} (attempt {life.attempt} resumed at "
            f"step {said} from the checkpoint {whose}, with no step left to run: it is not "
            "launched again)"
        )
    else:
        t.crashed = False  # not its script's failure: its point is not a bad one
        t.last_error = (
            f"attempt {life.attempt} resumed at step {said} of {total} from a checkpoint "
            f"another copy of the trial saved (attempt {attempt}, at step {saved}), with no "
            f"step left to run, and no report of {book.spec.metric.name} at step {total} was "
            f"found in the events of {_attempts(read)}"
            + (f" (not read: {unread})" if unread else "")
            + (
                f" within {waited:.0f} s of the relaunch's end (that copy never said it was done)"
                if waited is not None
                else ""
            )
            + "; the trial's result is lost, and it is not launched again (a relaunch would "
            "resume there too)"
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
    if own and output:  # as a trial that never reported its last step says it
        t.last_error += f"; its last output line: {output}"
    return "lost"


def _followed(book: Book, t: TrialRun) -> set[int]:
    """The attempts of ``t`` the job launched and followed (its ``launch`` events, every run):
    an attempt not among them is a lost launch's copy."""
    return {
        a
        for e in book.store.events(book.job_id, kind="launch")
        if e.trial_id == t.trial_id and isinstance(a := e.detail.get("attempt"), int)
    }


def _attempts(numbers: list[int]) -> str:
    words = ", ".join(str(a) for a in numbers)
    return f"attempt {words}" if len(numbers) == 1 else f"attempts {words}"


def _reported(records: Records, total: int) -> bool:
    """Whether an attempt's events hold a report at step ``total`` (a step as the orchestrator
    reads its own: an int)."""
    return any(r.get("type") == "report" and _step(r.get("step")) == total for r in records)


def _said_done(records: Records) -> bool:
    """Whether an attempt's events say it was done (its trial ended: nothing more to come)."""
    return any(r.get("type") == "done" for r in records)


def _source(found: dict[int, Records], total: int) -> tuple[int, Records] | None:
    """The attempt whose reports hold the trial's result: one that reported step ``total``,
    preferring one that also saved a checkpoint there (the copy the relaunch resumed from),
    the newest first; else the newest that saved a checkpoint there (the relaunch resumed from
    it, but its report is not to be found); None when no attempt did either."""
    newest = sorted(found, reverse=True)
    ranked = sorted(
        (a for a in newest if _reported(found[a], total)),
        key=lambda a: (_checkpoint(found[a]) < total, -a),
    ) + [a for a in newest if not _reported(found[a], total) and _checkpoint(found[a]) >= total]
    return (ranked[0], found[ranked[0]]) if ranked else None


def _checkpoint(records: Records) -> int:
    """The furthest step an attempt's events say it saved a checkpoint at (0: none)."""
    steps = [_step(r.get("step")) for r in records if r.get("type") == "checkpoint"]
    return max((s for s in steps if s is not None), default=0)


_step = record_step  # a record's step as the orchestrator reads its own (None: not one)


def _take(book: Book, t: TrialRun, records: Records, now: float) -> int:
    """Take in another attempt's reports of the steps after the trial's own (the latest report
    of each step) and its furthest checkpoint, as the trial's: observations, its curve, its
    record. Not timed (they were not seen as they came). Returns how many steps were taken.
    The record is written first, through :meth:`~spotwise.planner.trialbook.TrialBook.
    _trial_write`: a run another process took over writes neither it nor the observations."""
    latest: dict[int, tuple[float | None, float]] = {}
    seen: list[tuple[int, float, float]] = []  # observations, added once the record is written
    for rec in records:
        step = _step(rec.get("step"))
        if rec.get("type") != "report" or step is None or step <= t.step:
            continue
        wall = rec.get("time")
        when = record_metric(wall) if not isinstance(wall, bool) else None
        latest[step] = (record_metric(rec.get("metric")), when or time.time())
    for step in sorted(latest):
        value, wall_time = latest[step]
        t.step = max(t.step, step)
        t.furthest = max(t.furthest, step)
        t.metric_invalid = value is None  # NaN/inf (the SDK sends null): no usable value
        if value is not None:
            t.curve[step] = value
            seen.append((step, value, wall_time))
        elif not t.invalid_metric:  # said once, as an event (as for its own reports)
            t.invalid_metric = True
            book._event("invalid_metric", now, t, step=step, metric=repr(None))
    t.checkpoint_step = max(t.checkpoint_step, _checkpoint(records))
    if book._trial_write(
        t,
        step=t.step,
        metric=None if t.metric_invalid else t.last_metric,
        best_metric=best_of(t, book.spec.metric.direction),
        checkpoint_step=t.checkpoint_step,
        checkpoint_uri=t.checkpoint_uri,
    ):
        for step, value, wall_time in seen:
            book.store.add_observation(t.trial_id, step, value, wall_time, market_time=now)
    return len(latest)
