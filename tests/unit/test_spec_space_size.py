"""A spec asking for more trials than its finite search space has points is refused at load:
the extra trials could only run configurations already run, billed again for the same result
(review-w F3)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from spotwise.errors import SpecError
from spotwise.spec import load_stored_spec, parse_spec

BASE: dict[str, Any] = {
    "name": "small",
    "command": ["python", "train.py"],
    "metric": {"name": "acc"},
    "steps": 5,
    "providers": [{"name": "local"}],
}
ACT = {"type": "categorical", "choices": ["relu", "tanh"]}
LAYERS = {"type": "int", "low": 1, "high": 2}


def spec(trials: int, **space: Any) -> dict[str, Any]:
    return {**copy.deepcopy(BASE), "trials": trials, "search_space": space}


def test_more_trials_than_points_is_refused_in_one_line_naming_the_fix() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(spec(8, act=ACT, layers=LAYERS), "job.yaml")
    assert str(info.value) == (
        "job.yaml: spec field 'trials': 8 but the search space has only 4 distinct points "
        "(act: 2 choices × layers: 2 values); set trials <= 4, or widen the space"
    )


def test_a_single_choice_allows_one_trial() -> None:
    one = {"type": "categorical", "choices": ["relu"]}
    with pytest.raises(
        SpecError, match=r"has only 1 distinct point \(act: 1 choice\); set trials <= 1"
    ):
        parse_spec(spec(2, act=one))
    assert parse_spec(spec(1, act=one)).trials == 1


def test_as_many_trials_as_points_and_any_real_space_are_accepted() -> None:
    assert parse_spec(spec(4, act=ACT, layers=LAYERS)).trials == 4
    real = {"type": "real", "low": 0.0, "high": 1.0}
    assert parse_spec(spec(10_000, act=ACT, x=real)).trials == 10_000
    wide = {"type": "int", "low": -(2**63), "high": 2**63 - 1}  # counted, not listed
    assert parse_spec(spec(10_000, n=wide)).trials == 10_000


def test_space_points_counts_each_parameter() -> None:
    from spotwise.spec import space_points  # new: imported here so the file loads on old code

    s = parse_spec(spec(1, act=ACT, layers={"type": "int", "low": -2, "high": 5, "log": False}))
    assert space_points(s.search_space) == {"act": 2, "layers": 8}
    s = parse_spec(spec(1, act=ACT, x={"type": "real", "low": 0.0, "high": 1.0}))
    assert space_points(s.search_space) is None


def test_a_job_recorded_before_the_check_still_loads() -> None:
    """`cancel` and `resume` read a recorded spec back; it must not become unreadable."""
    ok = parse_spec(spec(4, act=ACT, layers=LAYERS))
    data = ok.model_dump()
    data["trials"] = 8
    old = load_stored_spec(ok.model_validate(data).model_dump_json())
    assert old.trials == 8
