"""``budget.start_timeout_minutes``: the "no word" limit's spec option (helper H, s22).

Refused when it is not a number of minutes above 0, with a line naming the field and the fix;
left out of a stored spec when unset, so that a job's stored spec reads as before (and in an
older spotwise, which refuses a field it does not know)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import load_refused as refused
from shared_helpers import write_local_spec as write

from spotwise.spec import JobSpec, load_spec

FIX = (
    "set how long an instance may run without a word from its trial (e.g. 45), or leave it out "
    "for the default (30, or 3x the start-up the job measured)"
)


@pytest.mark.parametrize(
    ("value", "shown"), [(0, "0"), (-5, "-5"), (".inf", ".inf"), (".nan", ".nan")]
)
def test_a_limit_that_is_not_above_0_minutes_is_refused(
    tmp_path: Path, value: Any, shown: str
) -> None:
    path = write(tmp_path, budget={"start_timeout_minutes": 0})
    path.write_text(
        path.read_text().replace("start_timeout_minutes: 0", f"start_timeout_minutes: {value}")
    )
    assert refused(path) == (
        f"spec field 'budget.start_timeout_minutes': must be a number of minutes above 0, got "
        f"{shown}; {FIX}"
    )


def test_a_limit_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    assert refused(write(tmp_path, budget={"start_timeout_minutes": True})) == (
        "spec field 'budget.start_timeout_minutes': must be a number, got true; write minutes "
        "as a number, e.g. 45 (or leave it out for the default)"
    )
    assert refused(write(tmp_path, budget={"start_timeout_minutes": "half an hour"})) == (
        "spec field 'budget.start_timeout_minutes': 'half an hour' is not a number; write "
        "minutes as a number, e.g. 45"
    )


def test_a_limit_is_kept_with_the_job_and_left_out_when_unset(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, budget={"start_timeout_minutes": 45}))
    assert spec.budget.start_timeout_minutes == 45.0
    stored = json.loads(spec.model_dump_json())
    assert stored["budget"]["start_timeout_minutes"] == 45.0
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec
    unset = load_spec(write(tmp_path / "b"))
    assert json.loads(unset.model_dump_json())["budget"] == {
        "max_cost_usd": None,
        "deadline_hours": None,
    }
