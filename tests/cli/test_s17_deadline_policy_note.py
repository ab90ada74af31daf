"""A deadline policy run without a deadline says so (review-ac F6): `tune --policy greedy` or
`uniform-progress` on a spec with no budget.deadline_hours placed trials by price alone,
exactly as spot-greedy, with rc 0 and no word."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from spotwise import jobs

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "examples" / "digits" / "job.yaml"  # no deadline


@pytest.mark.parametrize("policy", ["greedy", "uniform-progress"])
def test_tune_warns_when_a_deadline_policy_has_no_deadline(
    policy: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    from spotwise.planner import orchestrator

    ran: list[Any] = []
    monkeypatch.setattr(orchestrator, "run_job", lambda *a, **k: ran.append(a) or {})
    with caplog.at_level(logging.WARNING):
        jobs.tune(SPEC, db=f"sqlite:///{tmp_path / 's.db'}", policy=policy)
    assert ran  # it still runs: a warning, not a refusal
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"warning: policy {policy} plans for a deadline (budget.deadline_hours) and the spec "
        "sets none: it places each trial on the spot offer cheapest per step, as spot-greedy "
        "does, but waits for spot where spot-greedy would take on-demand"
    ]


def test_no_warning_with_a_deadline_or_for_other_policies() -> None:
    assert jobs.deadline_note("greedy", 24.0) == ""
    assert jobs.deadline_note("spot-greedy", None) == ""
    assert jobs.deadline_note("spotwise", None) == ""
