"""An early-stopped trial's value is told clamped to the completed finals' range (review-w F5,
F6): a prediction above the best completed final became the GP's incumbent, a rung value below
the worst one drew a cliff that is not there."""

from __future__ import annotations

import pytest

from spotwise.planner.search import Search
from spotwise.spec import RealParam, SearchSpec

X = {"x": RealParam(type="real", low=0.0, high=1.0)}


def told(s: Search) -> list[float]:
    return [round(y * s.sign, 6) for y in s._opt.yi]  # back in the metric's own sign


def test_a_stopped_value_is_clamped_to_the_completed_finals_when_maximizing() -> None:
    s = Search(X, SearchSpec(optimizer="random", seed=0), "maximize")
    s.tell({"x": 0.1}, 0.90)
    s.tell({"x": 0.3}, 0.93)
    s.tell_stopped({"x": 0.9}, 0.987)  # an over-prediction: told the best completed final
    s.tell_stopped({"x": 0.6}, 0.389)  # a rung-1 value: told the worst completed final
    s.tell_stopped({"x": 0.5}, 0.91)  # inside the range: as it is
    assert told(s) == [0.90, 0.93, 0.93, 0.90, 0.91]
    assert s.told == 5


def test_a_stopped_value_is_clamped_when_minimizing_too() -> None:
    s = Search(X, SearchSpec(optimizer="random", seed=0), "minimize")
    s.tell({"x": 0.1}, 0.20)
    s.tell({"x": 0.3}, 0.35)
    s.tell_stopped({"x": 0.9}, 0.05)  # predicted below (better than) the best loss
    s.tell_stopped({"x": 0.6}, 0.80)  # a partial loss, worse than any final
    assert s._opt.yi == [0.20, 0.35, 0.20, 0.35]


def test_only_completed_finals_set_the_range() -> None:
    """Before any completion a stopped value is told as it is, and neither it nor a failure
    widens the range later."""
    s = Search(X, SearchSpec(optimizer="random", seed=0), "maximize")
    s.tell_stopped({"x": 0.2}, 0.99)
    s.tell_failure({"x": 0.4})  # told the worst value seen: 0.99
    s.tell({"x": 0.7}, 0.80)
    s.tell_stopped({"x": 0.8}, 0.95)
    s.tell_stopped({"x": 0.9}, 0.10)
    assert told(s) == [0.99, 0.99, 0.80, 0.80, 0.80]
    s.tell_stopped({"x": 0.5}, float("nan"))  # nothing to tell
    assert s.told == 5


def test_a_resumed_jobs_results_are_the_range() -> None:
    s = Search(X, SearchSpec(optimizer="random", seed=0), "maximize")
    s.replay([({"x": 0.1}, 0.6), ({"x": 0.2}, None), ({"x": 0.3}, 0.7)], [{"x": 0.5}])
    s.tell_stopped({"x": 0.5}, 0.75)
    assert told(s) == [0.6, 0.6, 0.7, 0.7]
    assert s._pending == []


def test_a_resumed_jobs_stopped_trials_are_clamped_and_no_finals() -> None:
    """A resumed job replays its early-stopped trials apart from its finals: a stopped value
    above the best final is clamped to it, and it does not widen the range later tells see."""
    s = Search(X, SearchSpec(optimizer="random", seed=0), "maximize")
    s.replay([({"x": 0.1}, 0.6), ({"x": 0.3}, 0.7)], [], [({"x": 0.2}, 0.95), ({"x": 0.4}, 0.1)])
    assert told(s) == [0.6, 0.7, 0.7, 0.6]
    s.tell_stopped({"x": 0.5}, 0.9)
    assert told(s)[-1] == 0.7  # the range is the finals' (0.6-0.7), not the stopped 0.95


def test_a_resumed_job_with_only_stops_tells_them_as_they_are() -> None:
    s = Search(X, SearchSpec(optimizer="random", seed=0), "maximize")
    s.replay([({"x": 0.2}, None)], [], [({"x": 0.1}, 0.4)])
    assert told(s) == [0.4, 0.4]  # the failure is told the worst value seen: the stop's
    s.tell({"x": 0.3}, 0.5)
    s.tell_stopped({"x": 0.6}, 0.45)
    assert told(s)[-1] == 0.5  # clamped to the one final: the stop counted as none


@pytest.mark.parametrize("optimizer", ["gp", "random"])
def test_a_stopped_trial_is_no_longer_pending(optimizer: str) -> None:
    s = Search(X, SearchSpec(optimizer=optimizer, initial_points=2, seed=0))
    p, q = s.ask(), s.ask()
    s.tell(p, 0.5)
    s.tell_stopped(q, 0.7)
    assert s._pending == [] and told(s) == [0.5, 0.5]
