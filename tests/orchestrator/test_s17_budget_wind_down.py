"""The budget cap holds when each life is billed past its trial's last step (review-ac F4).

A life is billed after its trial's last step: the trial's exit after ``done``, the
orchestrator seeing it, the terminate (on the replay each wall second of it is ``speedup``
market seconds). The admission projected a life as start-up + remaining steps only, and the
budget guard never stops a trial that has made its last step, so every admitted trial could
add its wind-down on top of ``max_cost_usd``: a $0.80 job cost $0.8168, rc 0, nothing said.
Now each life that ends after its last step is measured (from that step seen to the end it
was billed to; the slowest of the job's newest 5), a default stands until one is, and every
projected life counts it. If the cost ends above the cap anyway, the summary says so.

The real loop runs on the scripted market of ``test_running_totals`` (start-up 120 s, a step
every 60 s, a pass every 60 market s, $1/h, no billing minimum), whose trials here exit
``WIND_S`` after their last step: the orchestrator then terminates the instance and bills it to
that pass.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from test_running_totals import SPOT, STARTUP_S, STEP_S, ScriptedMarket, run_scripted, usd

from spotwise.planner.backend import Backend
from spotwise.providers.base import Instance, LaunchRequest

WIND_S = 300.0  # market seconds each trial takes to exit after its last step
STEPS = 6
LIFE_S = STARTUP_S + STEPS * STEP_S + WIND_S  # 780 s: a whole life, billed


class WindingMarket(ScriptedMarket):
    """Its trials exit ``wind_s`` after their last step (not in the pass that sees it);
    ``speedup``: the backend's market seconds per wall second (the default wind-down's scale)."""

    def __init__(self, wind_s: float = WIND_S, speedup: float = 1.0) -> None:
        super().__init__(steps=STEPS)
        self.wind_s, self.speedup = wind_s, speedup

    def launch(self, request: LaunchRequest) -> Instance:
        self.checkpoint = 0  # every life here is a new trial's (none is revoked or fails)
        return super().launch(request)

    def describe(self, tags: Any = None) -> list[Instance]:
        out = super().describe(tags)
        for inst in out:
            life = self.lives[inst.instance_id]
            if inst.exit_code == 0 and self.t < self._step_at(life, self.steps) + self.wind_s:
                inst.exit_code = None  # still winding down: its process has not exited yet
        return out

    def backend(self) -> Backend:
        return dataclasses.replace(super().backend(), speedup=self.speedup)


def _cap(seconds: float) -> float:
    return usd(seconds, SPOT)


@pytest.mark.timeout(60)
def test_a_measured_wind_down_keeps_a_later_admission_within_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three trials one at a time, each life 780 s (480 s to its last step + 300 s winding
    down), a cap of 2109.6 s at $1/h. Before, the third trial was admitted on 1560 s spent +
    480 s (start-up and steps) = 2040 s; the guard never stopped it (its last step came 60 s
    before it would have) and its wind-down took the job to 2340 s: over the cap. Now the
    first life's 300 s wind-down is measured: the third is projected at 1560 + 780 s, does not
    fit, and is stopped before it starts; the job stays within the cap."""
    cap = _cap(2109.6)
    market = WindingMarket()
    summary, _ = run_scripted(tmp_path, monkeypatch, market, trials=3, budget={"max_cost_usd": cap})
    assert summary["cost_usd"] <= cap, summary
    assert summary["cost_usd"] == pytest.approx(usd(2 * LIFE_S, SPOT), abs=1e-6)
    assert (summary["trials"], summary["completed"]) == (3, 2)
    assert summary["limits"] == {"budget": {"stopped": 1, "never_started": 1}}
    assert summary["state"] == "succeeded"
    first, second = market.launched  # the second after the first life ended and was billed
    assert second == first + LIFE_S + 60.0
    assert [life["terminated_at"] - life["at"] for life in market.lives.values()] == [LIFE_S] * 2


@pytest.mark.timeout(60)
def test_the_default_wind_down_keeps_a_parallel_admission_within_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review-ac F4's shape: two trials in parallel, the second admitted once the first has
    timed its steps (240 s in), while the first still runs: no wind-down measured yet. On a
    market at 300x the default is a wall second, 300 market s (the trial's exit after `done`
    takes a fraction of one). Before, the second was admitted on 240 s spent + 240 s of the
    first's steps + 480 s of its own = 960 s within a 1300 s cap; both lives then wound down
    and the job cost 1560 s. Now the two wind-downs are projected: the second waits; once the
    first life has ended (its 300 s wind-down measured) it does not fit and is stopped."""
    cap = _cap(1300.0)
    market = WindingMarket(speedup=300.0)
    summary, _ = run_scripted(
        tmp_path, monkeypatch, market, trials=2, parallel=2, budget={"max_cost_usd": cap}
    )
    assert summary["cost_usd"] <= cap, summary
    assert summary["cost_usd"] == pytest.approx(usd(LIFE_S, SPOT), abs=1e-6)
    assert (summary["trials"], summary["completed"], len(market.launched)) == (2, 1, 1)
    assert summary["limits"] == {"budget": {"stopped": 1, "never_started": 1}}


@pytest.mark.timeout(60)
def test_an_overrun_past_the_measured_wind_down_is_said_in_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forced: one trial whose life winds down 600 s after its last step, when nothing has
    been measured and the default is 60 s (speedup 1): 1080 s billed for a 900 s cap. The
    summary says by how much (--json: limits.budget.exceeded_usd; the text: a line), and the
    job's outcome and exit code are those of any completed job."""
    cap = _cap(900.0)
    market = WindingMarket(wind_s=600.0)
    summary, _ = run_scripted(tmp_path, monkeypatch, market, budget={"max_cost_usd": cap})
    assert summary["cost_usd"] == pytest.approx(usd(1080.0, SPOT), abs=1e-6)
    assert (summary["state"], summary["completed"]) == ("succeeded", 1)
    over = usd(180.0, SPOT)  # $0.05
    assert summary["limits"] == {
        "budget": {"stopped": 0, "never_started": 0, "exceeded_usd": pytest.approx(over)}
    }
    assert _printed(summary) == [
        "budget exceeded by $0.0500: its lives cost more than projected when they were admitted "
        "(billed longer past a trial's last step than measured: README, Budget)"
    ]


def test_a_job_within_its_cap_says_nothing_of_an_overrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, _ = run_scripted(
        tmp_path, monkeypatch, WindingMarket(wind_s=60.0), budget={"max_cost_usd": 1.0}
    )
    assert (summary["limits"], summary["completed"]) == ({}, 1)
    assert _printed(summary) == []


def _printed(summary: dict[str, Any]) -> list[str]:
    """The summary's text lines about a limit (`spotwise tune` without --json)."""
    from rich.console import Console

    from spotwise.cli import render

    console = Console(width=300, record=True, color_system=None)
    render.console, saved = console, render.console
    try:
        render.print_summary(summary)
    finally:
        render.console = saved
    return [ln for ln in console.export_text().splitlines() if ln.startswith("budget")]


def test_status_shows_the_cap_and_an_overrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review-ad: only tune's summary said the cap was exceeded; `status JOB` (text and --json)
    now shows the cap, and the overrun when there is one."""
    from rich.console import Console

    from spotwise import jobs
    from spotwise.cli import render

    cap = _cap(900.0)
    summary, db = run_scripted(
        tmp_path, monkeypatch, WindingMarket(wind_s=600.0), budget={"max_cost_usd": cap}
    )
    status = jobs.status(summary["job_id"], db=db)
    over = summary["limits"]["budget"]["exceeded_usd"]
    assert status["budget"] == {"max_cost_usd": pytest.approx(cap), "exceeded_usd": over}
    console = Console(width=200, record=True, color_system=None)
    render.console, saved = console, render.console
    try:
        render.print_status(status)
    finally:
        render.console = saved
    assert f"budget exceeded by ${over:.4f} (max_cost_usd {cap:g})" in console.export_text()


def test_status_of_a_job_within_its_cap_shows_the_cap_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise import jobs

    summary, db = run_scripted(
        tmp_path, monkeypatch, WindingMarket(wind_s=60.0), budget={"max_cost_usd": 1.0}
    )
    assert jobs.status(summary["job_id"], db=db)["budget"] == {"max_cost_usd": 1.0}
    (tmp_path / "nocap").mkdir()
    summary, db = run_scripted(tmp_path / "nocap", monkeypatch, WindingMarket(wind_s=60.0))
    assert "budget" not in jobs.status(summary["job_id"], db=db)
