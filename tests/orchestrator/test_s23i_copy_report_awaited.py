"""A relaunch resumed at its trial's last step from a copy's checkpoint: the copy's report.

review-ay F1: the copy's events showed ``checkpoint 6`` without ``report 6`` and the trial was
failed for good at once, though the copy had not said ``done`` (a script that saves before it
reports; a cloud agent syncs its events every ``sync_s``): its report, a moment later, was never
read. Now the trial waits, not launched, and the copy's events are read again for a bounded
time. F5: the attempt whose checkpoint the relaunch resumed from may be the trial's own (a
followed life whose last records were not read before it ended): said so, with the
unreported-final meaning. Nits: a float step and a bool metric are read as the trial's own
records are (``TrialBook._read_progress``).

A TrialBook alone (test_s23d's), with the Actions gate that keeps a trial from a launch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_s23d_resumed_at_end import (
    DONE,
    OFFER,
    STEPS,
    Book,
    _exit,
    _relaunch,
    _write,
    metric,
    reports,
)

from spotwise.planner import resumed_end
from spotwise.planner.actions import Actions
from spotwise.planner.policy import Launch, Phase
from spotwise.planner.runstate import TrialRun

SAVED_FIRST = [r for r in reports(1, STEPS) if not (r["type"] == "report" and r["step"] == 6)]
WAIT_S = 120.0  # COPY_REPORT_HOLD_WALL_S: no provider sets agent_poll_s here


class HoldBook(Book, Actions):
    """test_s23d's TrialBook with the orchestrator's launch gate (``Actions._execute``) and its
    pass hook (``_retry_unconfirmed``); launches are recorded, not made."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.unconfirmed: dict[str, Any] = {}
        self.same_requests: dict[str, Any] = {}
        self.cancelled = self.cancel_requested = False
        self.blocked: dict[str, float] = {}
        self.quota_full: dict[tuple[str, str], float] = {}
        self.throttled: dict[str, tuple[float, float]] = {}
        self.launched: list[str] = []
        self.backend.now = lambda: 20.0  # type: ignore[attr-defined]

    def _launch(self, t: TrialRun, offer: Any, now: float) -> None:
        self.launched.append(t.trial_id)

    def _refused_lately(self, offer: Any, now: float) -> bool:
        return False

    def try_launch(self, t: TrialRun) -> None:
        """The policy asks for a launch of the waiting trial, with an offer for it."""
        self.trials = [t]
        self._execute(Launch(t.trial_id, OFFER.key), [OFFER], 15.0)


@pytest.fixture
def wall(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [1000.0]
    monkeypatch.setattr(resumed_end, "wall_now", lambda: clock[0], raising=False)
    return clock


def _append(book: Book, t: TrialRun, *records: dict[str, Any]) -> None:
    with (book.run_dir / t.trial_id / "events-0.jsonl").open("a") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in records))


def test_a_copy_not_done_is_awaited_unlaunched_and_its_late_report_completes_it(
    tmp_path: Path, wall: list[float]
) -> None:
    book = HoldBook(tmp_path)
    t = _relaunch(book)
    _write(book.run_dir / t.trial_id, 0, SAVED_FIRST)  # saved 6, its report still to come

    ev = _exit(book, t)

    assert (t.phase, t.state, t.failures, t.last_error) == (Phase.WAITING, "waiting", 0, None)
    assert not getattr(ev, "finished", True)
    assert book.store.get_trial(t.trial_id).state.value == "waiting"
    (said,) = book.store.events(book.job_id, kind="result_awaited")
    assert said.detail == {
        "attempt": 1,
        "from_attempt": 0,
        "step": 6,
        "wait_s": WAIT_S,
        "message": (
            "attempt 1 resumed at step 6 of 6 from a checkpoint another copy of the trial saved "
            "(attempt 0, at step 6), with no step left to run; that copy has not reported "
            "val_acc at step 6 nor said it was done: its report is awaited up to 120 s, the "
            "trial not launched meanwhile"
        ),
    }
    book.try_launch(t)  # the policy wants it relaunched: no VM while the copy may report
    assert book.launched == []

    _append(book, t, {"type": "report", "step": 6, "metric": metric(6)}, DONE)
    wall[0] += 4.0  # before the agent's sync period (5 s): not read yet
    book._retry_unconfirmed()
    assert t.phase is Phase.WAITING
    wall[0] += 1.0
    book._retry_unconfirmed()  # the loop's pass hook reads it again

    assert (t.state, t.phase, t.failures, t.final_metric) == ("completed", Phase.DONE, 0, metric(6))
    row = book.store.get_trial(t.trial_id)
    assert (row.state.value, row.final_metric, row.checkpoint_step) == ("completed", metric(6), 6)
    assert [o.step for o in book.store.observations(t.trial_id)] == [1, 2, 3, 4, 5, 6]
    assert book.kinds() == ["result_awaited", "result_recovered", "completed"]
    assert book.search.calls == ["tell"]
    book.try_launch(t)
    assert book.launched == []  # done: nothing to launch, and nothing held any more
    assert not resumed_end.holding(book)


def test_the_wait_is_bounded_then_the_trial_fails_once_unlaunched(
    tmp_path: Path, wall: list[float]
) -> None:
    book = HoldBook(tmp_path)
    t = _relaunch(book)
    _write(book.run_dir / t.trial_id, 0, SAVED_FIRST)
    _exit(book, t)
    reads: list[list[int] | None] = []
    real = resumed_end.attempts_events

    def counted(owner: Any, t_: TrialRun, life: Any, only: Any = None) -> Any:
        reads.append(only)
        return real(owner, t_, life, only)

    resumed_end.attempts_events = counted  # type: ignore[assignment]
    try:
        for _ in range(30):  # a pass every 5 s of wall time: read at most every 5 s
            wall[0] += 5.0
            book._retry_unconfirmed()
            book.try_launch(t)
    finally:
        resumed_end.attempts_events = real
    assert book.launched == []
    assert len(reads) == 24 and set(map(tuple, reads)) == {(0,)}  # type: ignore[arg-type]
    why = (
        "attempt 1 resumed at step 6 of 6 from a checkpoint another copy of the trial saved "
        "(attempt 0, at step 6), with no step left to run, and no report of val_acc at step 6 "
        "was found in the events of attempt 0 within 120 s of the relaunch's end (that copy "
        "never said it was done); the trial's result is lost, and it is not launched again (a "
        "relaunch would resume there too)"
    )
    assert (t.state, t.phase, t.failures, t.crashed, t.last_error) == (
        "failed",
        Phase.DONE,
        1,
        False,
        why,
    )
    assert book.kinds() == ["result_awaited", "error", "failed"]
    (error,) = book.store.events(book.job_id, kind="error")
    assert (error.detail["error"], error.detail["last_reported_step"]) == (why, 5)
    assert book.store.get_trial(t.trial_id).state.value == "failed"
    assert book.search.calls == ["forget"]


def test_a_copy_that_says_done_without_the_report_fails_it_at_the_next_read(
    tmp_path: Path, wall: list[float]
) -> None:
    book = HoldBook(tmp_path)
    t = _relaunch(book)
    _write(book.run_dir / t.trial_id, 0, SAVED_FIRST)
    _exit(book, t)
    assert (t.phase, t.failures) == (Phase.WAITING, 0)  # awaited: it may still report
    _append(book, t, DONE)
    wall[0] += 5.0
    book._retry_unconfirmed()

    assert (t.state, t.failures) == ("failed", 1)
    assert t.last_error is not None and "within" not in t.last_error
    assert t.last_error.endswith(
        "was found in the events of attempt 0; the trial's result is lost, and it is not "
        "launched again (a relaunch would resume there too)"
    )


@pytest.mark.parametrize("how", ["cancel", "deadline"])
def test_a_cancel_or_a_limit_during_the_wait_ends_it_cleanly(
    tmp_path: Path, wall: list[float], how: str
) -> None:
    book = HoldBook(tmp_path)
    t = _relaunch(book)
    _write(book.run_dir / t.trial_id, 0, SAVED_FIRST)
    _exit(book, t)
    if how == "cancel":  # Orchestrator.cancel closes a trial with no life as cancelled
        t.phase, t.state = Phase.DONE, "cancelled"
    else:  # a limit's StopEarly closes a waiting trial stopped early
        t.stop_reason = how
        book._close_trial(t, "stopped_early", 12.0)
    _append(book, t, {"type": "report", "step": 6, "metric": metric(6)}, DONE)
    wall[0] += 500.0
    book._retry_unconfirmed()

    assert (t.state, t.failures, t.final_metric) == (
        "cancelled" if how == "cancel" else "stopped_early",
        0,
        None,
    )
    assert "result_recovered" not in book.kinds() and "error" not in book.kinds()
    assert not resumed_end.holding(book)
    book.try_launch(t)
    assert book.launched == []


def test_the_trials_own_attempt_is_not_awaited_and_fails_as_unreported(tmp_path: Path) -> None:
    """F5: attempt 0 is the trial's own (launched and followed: its ``launch`` event); its
    ``checkpoint 6`` was not read before its life ended. It is over: the trial reached its last
    step without reporting it, as when its checkpoint there is read (unreported_final)."""
    book = Book(tmp_path)
    t = _relaunch(book)
    book.store.add_event(book.job_id, "launch", 1.0, trial_id=t.trial_id, attempt=0)
    _write(book.run_dir / t.trial_id, 0, SAVED_FIRST)

    _exit(book, t)

    why = (
        "the trial reached step 6 of 6 but reported val_acc only up to step 5 (steps count "
        "from 1: report(step, value) at step 6 is the result) (attempt 1 resumed at step 6 "
        "from the checkpoint its attempt 0 saved (not read before that life ended), with no "
        "step left to run: it is not launched again)"
    )
    assert (t.state, t.failures, t.unreported, t.crashed, t.last_error) == (
        "failed",
        1,
        True,
        True,
        why,
    )
    assert "another copy" not in (t.last_error or "")
    assert book.kinds() == ["launch", "error", "failed"]
    assert book.search.calls == ["tell_failure"]  # its own script's doing, as unreported_final


def test_the_trials_own_attempts_result_is_worded_as_its_own(tmp_path: Path) -> None:
    book = Book(tmp_path)
    t = _relaunch(book)
    book.store.add_event(book.job_id, "launch", 1.0, trial_id=t.trial_id, attempt=0)
    _write(book.run_dir / t.trial_id, 0, reports(1, STEPS))

    _exit(book, t)

    assert (t.state, t.final_metric) == ("completed", metric(6))
    (said,) = book.store.events(book.job_id, kind="result_recovered")
    assert said.detail["message"] == (
        "attempt 1 resumed at step 6 of 6 from a checkpoint its attempt 0 saved (not read "
        "before that life ended), with no step left to run; its result is attempt 0's report "
        "at step 6"
    )


def test_a_float_step_is_no_report_and_the_copy_that_saved_is_named(tmp_path: Path) -> None:
    """Nit: a report at step ``6.0`` is skipped, as the trial's own records are: attempt 2's
    is no report of step 6, so the copy named is attempt 0, which saved step 6 and said done."""
    book = Book(tmp_path)
    t = _relaunch(book)
    t.attempt = 3
    assert t.life is not None
    t.life.attempt = 3
    folder = book.run_dir / t.trial_id
    _write(folder, 0, [*SAVED_FIRST, DONE])
    _write(folder, 2, [{"type": "report", "step": 6.0, "metric": 0.9}])

    _exit(book, t)

    assert (t.state, t.failures, t.final_metric) == ("failed", 1, None)
    assert t.last_error is not None
    assert "(attempt 0, at step 6)" in t.last_error
    assert "in the events of attempts 0, 2;" in t.last_error


def test_a_bool_metric_is_read_as_the_trials_own_reports_are(tmp_path: Path) -> None:
    """Nit: ``_read_progress`` takes ``True`` as 1.0; so does a copy's report."""
    book = Book(tmp_path)
    t = _relaunch(book)
    copy = [*SAVED_FIRST, {"type": "report", "step": 6, "metric": True}, DONE]
    _write(book.run_dir / t.trial_id, 0, copy)

    _exit(book, t)

    assert (t.state, t.final_metric, t.metric_invalid) == ("completed", 1.0, False)
    assert book.search.calls == ["tell"]
    # and the trial's own report of True is 1.0 too (the one rule for both)
    (tmp_path / "own").mkdir()
    other = Book(tmp_path / "own")
    own = _relaunch(other)
    assert own.life is not None
    other.records = [{"type": "report", "step": 1, "metric": True}]
    other._read_progress(own, own.life, 3.0)
    assert own.curve == {1: 1.0}
