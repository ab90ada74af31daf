"""Option messages (review-ao M1, M5, M6).

M1: `report --by jobs` said "'jobs' is not a grouping; use one of ..." with no did-you-mean.
M5: `tune --policy greedy` without a deadline warned without the "warning:" prefix every other
warning has. M6: `tune --policy spotwize` said "policy: unknown policy", naming no option.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import write_local_spec as write

from spotwise import costs, jobs
from spotwise.errors import SpecError


@pytest.mark.parametrize(
    ("by", "meant"),
    [("jobs", "job"), ("instance_type", "instance-type"), ("Provider", "provider")],
)
def test_report_by_names_the_grouping_meant(tmp_path: Path, by: str, meant: str) -> None:
    with pytest.raises(SpecError) as info:  # refused before the store is opened
        costs.report(since="all", by=by, db=f"sqlite:///{tmp_path / 'none.db'}")
    assert info.value.exit_code == 2 and not (tmp_path / "none.db").exists()
    assert info.value.message == (
        f"--by: {by!r} is not a grouping (did you mean {meant!r}?); use one of provider, job, "
        "instance-type, zone, market, day"
    )


def test_tune_names_the_option_of_an_unknown_policy(tmp_path: Path) -> None:
    path = write(tmp_path)
    with pytest.raises(SpecError) as info:
        jobs.tune(path, db=f"sqlite:///{tmp_path / 's.db'}", policy="spotwize")
    assert info.value.exit_code == 2
    assert info.value.message.startswith(
        "--policy: unknown policy 'spotwize' (did you mean 'spotwise'?); valid: asha, greedy,"
    )
    assert not (tmp_path / "s.db").exists()  # refused before anything is written


def test_tune_deadline_note_is_a_warning_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from spotwise.planner import orchestrator

    ran: list[Any] = []
    monkeypatch.setattr(orchestrator, "run_job", lambda *a, **k: ran.append(a) or {})
    with caplog.at_level(logging.WARNING):
        jobs.tune(write(tmp_path), db=f"sqlite:///{tmp_path / 's.db'}", policy="greedy")
    assert ran
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert said == [
        "warning: policy greedy plans for a deadline (budget.deadline_hours) and the spec sets "
        "none: it places each trial on the spot offer cheapest per step, as spot-greedy does, but "
        "waits for spot where spot-greedy would take on-demand"
    ]


def test_an_empty_policy_option_is_refused(tmp_path: Path) -> None:
    """`tune --policy ''` quietly ran the spec's own policy (helper J's note)."""

    with pytest.raises(SpecError) as info:
        jobs.tune(tmp_path / "job.yaml", db=f"sqlite:///{tmp_path / 'x.db'}", policy=" ")
    assert info.value.message.startswith("--policy: empty; name one of asha, ")
    assert not (tmp_path / "x.db").exists()
