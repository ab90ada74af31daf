"""The search fits a model only when an ask needs one (review-bd BD1): every tell refitted the GP
and re-optimised its acquisition, although with trials pending the next point came from the
liar (its own fit); a 150-trial parallel-12 job sat minutes inside these fits, inline in the
orchestrator's loop. Fits are counted on the GP estimator itself."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import pytest
import skopt  # noqa: F401  (loads the BLAS libraries before the limit below applies)
from threadpoolctl import threadpool_limits

from spotwise.planner.search import Search
from spotwise.spec import IntParam, RealParam, SearchSpec

AB = {
    "a": RealParam(type="real", low=0.0, high=1.0),
    "b": RealParam(type="real", low=0.0, high=1.0),
}
GRID = {  # 4 × 3 = 12 points: a model proposes used ones often
    "i": IntParam(type="int", low=0, high=3),
    "j": IntParam(type="int", low=0, high=2),
}


@pytest.fixture(autouse=True)
def one_blas_thread() -> Iterator[None]:
    with threadpool_limits(limits=1):
        yield


@pytest.fixture
def fits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from skopt.learning import GaussianProcessRegressor

    real = GaussianProcessRegressor.fit
    n = [0]

    def counting(self: Any, X: Any, y: Any) -> Any:
        n[0] += 1
        return real(self, X, y)

    monkeypatch.setattr(GaussianProcessRegressor, "fit", counting)
    return n


def bowl(p: dict[str, Any]) -> float:
    return -((p["a"] - 0.3) ** 2 + (p["b"] - 0.6) ** 2)


def started(parallel: int, told: int = 3) -> tuple[Search, list[dict[str, Any]]]:
    """A GP search past its 3 initial points, with ``parallel`` points pending."""
    s = Search(AB, SearchSpec(initial_points=3, seed=0))
    for _ in range(told):
        p = s.ask()
        s.tell(p, bowl(p))
    return s, [s.ask() for _ in range(parallel)]


def test_a_tell_with_trials_pending_fits_no_model(fits: list[int]) -> None:
    s, pending = started(4)
    fits[0] = 0
    s.tell(pending[0], bowl(pending[0]))  # 3 still pending: the next point is the liar's
    s.tell_stopped(pending[1], -0.5)
    s.tell_failure(pending[2])
    assert fits[0] == 0  # before: one GP fit (and an acquisition search) each
    assert s.told == 6


def test_n_tells_then_one_ask_fits_once(fits: list[int]) -> None:
    s, pending = started(5)
    fits[0] = 0
    for p in pending[:4]:
        s.tell(p, bowl(p))
    nxt = s.ask()  # one pending: the liar's model, fitted once on 7 results and 2 lies
    assert fits[0] == 1  # before: 4 (one a tell) + 1
    s.tell(pending[4], bowl(pending[4]))
    s.tell(nxt, bowl(nxt))
    fits[0] = 0
    last = s.ask()  # nothing pending: the main model, fitted once on its 9 results
    assert fits[0] == 1
    assert s.ask() != last and fits[0] == 2  # last is pending now: the liar's one fit


def test_an_unfitted_optimizer_never_answers_with_its_last_point(fits: list[int]) -> None:
    """skopt's ask after a tell without a fit returns the point of its last fit, the one just
    handed out (or raises before any fit): every ask past the initial points has a fresh fit
    behind it, sequential or in parallel."""
    s = Search(AB, SearchSpec(initial_points=2, seed=3))
    seen: list[tuple[float, float]] = []
    for _ in range(8):
        fits[0] = 0
        p = s.ask()
        assert fits[0] == (1 if len(seen) >= 2 else 0)
        assert (p["a"], p["b"]) not in seen
        seen.append((p["a"], p["b"]))
        s.tell(p, bowl(p))
    assert fits[0] == 1  # the asks above, none of the tells


def test_parallel_proposals_avoid_pending_and_evaluated_points() -> None:
    """12 points, 11 trials, 4 at a time, completions out of order: none handed out twice."""
    s = Search(GRID, SearchSpec(initial_points=3, seed=1))
    rng = random.Random(1)
    handed = [s.ask() for _ in range(4)]
    running = list(handed)
    while running:
        p = running.pop(rng.randrange(len(running)))
        s.tell(p, -float((p["i"] - 2) ** 2 + (p["j"] - 1) ** 2))
        if len(handed) < 11:
            handed.append(s.ask())
            running.append(handed[-1])
    keys = [(p["i"], p["j"]) for p in handed]
    assert len(set(keys)) == 11 == len(keys)


def test_parallel_points_stay_apart_after_tells_without_fits() -> None:
    s, pending = started(4)
    for p in pending[:2]:
        s.tell(p, bowl(p))
    batch = [*pending[2:], *(s.ask() for _ in range(2))]
    gaps = [
        abs(p["a"] - q["a"]) + abs(p["b"] - q["b"]) for p, q in itertools.combinations(batch, 2)
    ]
    assert min(gaps) > 1e-3, batch


def test_a_sequential_run_still_finds_a_2d_optimum() -> None:
    """One at a time, each ask fits the model its tell no longer fits: the same points as
    before (the random stream is drawn in the same order), hence the same best."""
    s = Search(AB, SearchSpec(initial_points=4, seed=0))
    best = -1.0
    for _ in range(12):
        p = s.ask()
        best = max(best, bowl(p))
        s.tell(p, bowl(p))
    assert best > -4e-3  # within ~0.06 of (0.3, 0.6): -0.00309, as before s24


def test_asks_stop_once_a_pass_spent_its_time() -> None:
    """The caller's loop asks for about ``within_s``, always once, the rest next pass."""
    s = Search(AB, SearchSpec(optimizer="random", seed=0))
    ticks = itertools.count(step=0.6)  # the clock is read before and after each ask: 0.6 s each
    assert len(list(s.asks(5, within_s=1.0, clock=lambda: next(ticks)))) == 2  # 0.6, 1.2: stop
    slow = itertools.count(step=5.0)
    assert len(list(s.asks(5, within_s=1.0, clock=lambda: next(slow)))) == 1  # one at least
    assert len(list(s.asks(3, within_s=10.0))) == 3
    assert list(s.asks(0)) == []
    assert len(s._pending) == 6  # each point handed out is pending
