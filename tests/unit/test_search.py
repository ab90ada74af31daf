"""The search: skopt ask/tell in the job's direction, with pending points never re-proposed.

skopt's GP fit runs L-BFGS on OpenBLAS; on a small, busy machine OpenBLAS threads fight each
other and one fit takes seconds, so every test here limits BLAS to one thread (threadpoolctl
only limits libraries already loaded, hence the early ``import skopt``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
import skopt  # noqa: F401  (loads scipy's and numpy's BLAS before the limit below applies)
from threadpoolctl import threadpool_limits

from spotwise.planner.search import Search
from spotwise.spec import CategoricalParam, IntParam, RealParam, SearchSpec

X = {"x": RealParam(type="real", low=0.0, high=1.0)}
ROUNDS = 15


def quadratic(x: float) -> float:
    return 1.0 - (x - 0.73) ** 2  # maximum 1.0 at x = 0.73


@pytest.fixture(autouse=True)
def one_blas_thread() -> Iterator[None]:
    with threadpool_limits(limits=1):
        yield


def run_rounds(search: Search, rounds: int = ROUNDS) -> tuple[float, list[float]]:
    best, xs = -np.inf, []
    for _ in range(rounds):
        params = search.ask()
        value = quadratic(params["x"])
        search.tell(params, value)
        best = max(best, value)
        xs.append(params["x"])
    return best, xs


def test_maximize_beats_random_on_a_quadratic_and_tells_the_negative() -> None:
    search = Search(X, SearchSpec(optimizer="gp", seed=0), direction="maximize")
    best, xs = run_rounds(search)
    random_best, _ = run_rounds(Search(X, SearchSpec(optimizer="random", seed=0), "maximize"))
    assert best >= random_best
    assert best > 1.0 - 1e-3  # within ~0.03 of the optimum in x
    assert search.told == ROUNDS
    # skopt minimises: it was told the negative of every value
    np.testing.assert_allclose(search._opt.yi, [-quadratic(x) for x in xs])


def test_seeded_search_is_deterministic() -> None:
    first = run_rounds(Search(X, SearchSpec(optimizer="gp", seed=7), "maximize"), rounds=5)[1]
    again = run_rounds(Search(X, SearchSpec(optimizer="gp", seed=7), "maximize"), rounds=5)[1]
    assert first == again
    other = run_rounds(Search(X, SearchSpec(optimizer="gp", seed=8), "maximize"), rounds=5)[1]
    assert other != first


def test_minimize_tells_the_value_as_is() -> None:
    search = Search(X, SearchSpec(optimizer="random", seed=3), direction="minimize")
    params = search.ask()
    search.tell(params, 0.25)
    assert search._opt.yi == [0.25]


def test_pending_points_are_not_proposed_again() -> None:
    space = {
        "lr": RealParam(type="real", low=1e-4, high=1e-1, log=True),
        "hidden": IntParam(type="int", low=8, high=256),
    }
    search = Search(space, SearchSpec(optimizer="gp", initial_points=2, seed=1), "maximize")
    for _ in range(2):  # past the initial random points, so the GP proposes
        p = search.ask()
        search.tell(p, -abs(np.log10(p["lr"]) + 2))
    pending = [search.ask() for _ in range(3)]
    keys = {(p["lr"], p["hidden"]) for p in pending}
    assert len(keys) == 3, pending
    assert search._pending == [[p["lr"], p["hidden"]] for p in pending]

    search.tell(pending[0], 0.5)
    search.forget(pending[1])
    assert search._pending == [[pending[2]["lr"], pending[2]["hidden"]]]


def test_a_nan_result_is_dropped_not_told() -> None:
    search = Search(X, SearchSpec(optimizer="random", seed=0), "maximize")
    p = search.ask()
    search.tell(p, float("nan"))
    assert search.told == 0 and search._pending == []


def test_params_are_plain_python_values_inside_their_bounds() -> None:
    space = {
        "lr": RealParam(type="real", low=1e-4, high=1e-1, log=True),
        "layers": IntParam(type="int", low=1, high=4),
        "act": CategoricalParam(type="categorical", choices=["relu", "tanh"]),
    }
    for optimizer in ("gp", "random"):
        search = Search(space, SearchSpec(optimizer=optimizer, seed=0), "maximize")
        for _ in range(5):
            p = search.ask()
            assert type(p["lr"]) is float and 1e-4 <= p["lr"] <= 1e-1
            assert type(p["layers"]) is int and 1 <= p["layers"] <= 4
            assert p["act"] in ("relu", "tanh")
            json.dumps(p)  # store- and env-friendly


def test_a_failed_point_is_not_proposed_again() -> None:
    """Forgotten, a failed point came straight back once the GP phase began (its next point only
    changes with a tell): a configuration that crashes would crash every later trial."""
    spec = SearchSpec(optimizer="gp", initial_points=3, seed=0)
    search = Search(X, spec, "maximize")
    for _ in range(3):
        p = search.ask()
        search.tell(p, quadratic(p["x"]))
    failing = search.ask()
    search.forget(failing)
    assert search.ask() == failing  # the old behaviour, for contrast
    search.forget(failing)
    search.tell_failure(failing)
    assert search.told == 4 and search._pending == []
    # told the worst value seen (skopt minimises, so its largest y)
    assert search._opt.yi[-1] == max(search._opt.yi[:3])
    assert search.ask() != failing


def test_a_failure_before_any_result_is_forgotten() -> None:
    search = Search(X, SearchSpec(optimizer="gp", initial_points=3, seed=0), "minimize")
    p = search.ask()
    search.tell_failure(p)
    assert search.told == 0 and search._pending == []


def test_a_repeated_proposal_is_not_a_warning_on_stderr() -> None:
    """In a small space the GP proposes points already evaluated; skopt then samples a random
    one and warns on stderr each time, over the live table of `tune`."""
    import warnings

    choices = CategoricalParam(type="categorical", choices=["a", "b"])
    s = Search({"c": choices}, SearchSpec(optimizer="gp", initial_points=1, seed=0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(5):
            params = s.ask()
            s.tell(params, float(i))
    assert [str(w.message) for w in caught] == []
    assert s.told == 5
