"""`status` says when a running job's orchestrator has not been heard from (review-ax AX4).

Before: a frozen orchestrator (SIGSTOP, a laptop asleep, a write waiting on a lock) left its
job ``running`` with a frozen ``~$`` estimate and nothing saying it was quiet. Now a running
job whose ``heartbeat_at`` is older than a minute gets a line "last heard N s ago", in the
listing and in `status JOB`.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from spotwise.cli import render
from spotwise.job_rows import QUIET_AFTER_S, quiet_note


def _job(state: str = "running", ago: float | None = 95.0, **kw: Any) -> dict[str, Any]:
    beat = None if ago is None else time.time() - ago
    return {"job_id": "j-quiet", "state": state, "heartbeat_at": beat, **kw}


def test_a_quiet_running_job_says_when_it_was_last_heard() -> None:
    assert QUIET_AFTER_S == 60.0
    said = quiet_note(_job(), now=None)
    assert said is not None
    assert said.startswith("j-quiet: its orchestrator was last heard 95 s ago")
    assert quiet_note({**_job(), "heartbeat_at": 1000.0}, now=1061.0) is not None
    assert quiet_note({**_job(), "heartbeat_at": 1000.0}, now=1060.0) is None  # a minute: fine
    assert quiet_note(_job(ago=5.0)) is None
    assert quiet_note(_job(ago=None)) is None  # never wrote one: nothing to say
    assert quiet_note(_job(state="succeeded")) is None  # finished: not expected to beat
    assert quiet_note(_job(orchestrator="gone")) is None  # said on its own (cancel)


def test_the_listing_prints_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines: list[str] = []
    monkeypatch.setattr(render.console, "print", lambda *a, **kw: lines.append(str(a[0])))
    job = _job(orchestrator="here", name="n", policy="p", instances=[], trials=[])
    job.update(cost_usd=0.0, on_demand_cost_usd=0.0, created_at=time.time(), completed=0)
    job.update(best_metric=None, best_trial=None, error=None, budget=None, simulated=False)
    render.print_jobs([job])
    assert sum("its orchestrator was last heard 95 s ago" in x for x in lines) == 1
