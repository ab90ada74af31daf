"""A trial stopped for the deadline gives its instance back at once, as a budget stop does
(review-aq AQ6): asked only to leave at its next step boundary, a trial still starting up (or in
a long step) ran on, billed, past the deadline, for a step that counted for nothing."""

from __future__ import annotations

from pathlib import Path

from test_limits_count import CURVE, Book


def test_a_deadline_stop_terminates_the_instance_at_the_end_of_the_pass(tmp_path: Path) -> None:
    book = Book(tmp_path)
    book.stop("deadline")
    t = book.trial
    assert (t.stop_reason, t.stopping) == ("deadline", "early")
    assert book.terminated == [["i-1"]]  # released in this pass, not at its next step
    assert t.life is not None and t.life.release_asked
    book.stop("deadline")  # the guard repeats itself each tick: one terminate only
    assert book.terminated == [["i-1"]]


def test_the_deadline_reaching_a_trial_stopping_for_its_curve_terminates_it(
    tmp_path: Path,
) -> None:
    book = Book(tmp_path)
    book.stop(CURVE)  # a policy's own stop: the trial leaves at its next step, as before
    assert book.terminated == []
    book.stop("deadline")
    assert book.trial.stop_reason == CURVE  # the first reason stays the trial's
    assert book.terminated == [["i-1"]]
