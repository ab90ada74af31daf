"""A trial whose result is in but which runs on after its `done` is ended (review-ad F3).

A stuck thread after `done` (a data-loader worker, a background uploader that never returns)
kept its life billed until the process exited or the market took it: a $1.00 cap ran to $1.82,
and with no revocation in the trace a life would be billed for as long as it hung. The
orchestrator now terminates such an instance once it has run ``linger_limit_s`` past the `done`
it saw (3 wind-downs, at least a wind-down and 5 wall seconds of the market): the trial completes
with its result, the life is billed to the terminate, and a ``lingered`` event says so.

The scripted market of ``test_running_totals`` (start-up 120 s, a step every 60 s, a pass every
60 market s, $1/h, no billing minimum), its trials writing `done` with their last report.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_running_totals import SPOT, usd
from test_s17_budget_wind_down import STEPS, WindingMarket

from spotwise.store import Store


class DoneMarket(WindingMarket):
    """Its trials write `done` with their last step's report, then take ``wind_s`` to exit."""

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        out = super().progress(instance_id)
        if any(r["type"] == "report" and r["step"] == self.steps for r in out):
            out.append({"type": "done", "step": self.steps})
        return out


@pytest.mark.timeout(60)
def test_a_trial_hung_after_done_is_ended_and_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_running_totals import run_scripted

    market = DoneMarket(wind_s=3000.0)  # it would exit 50 minutes after its `done`
    summary, db = run_scripted(tmp_path, monkeypatch, market)
    assert (summary["state"], summary["completed"]) == ("succeeded", 1)
    (life,) = market.lives.values()
    last_step = life["at"] + 120.0 + STEPS * 60.0  # its `done`, seen in that pass
    # the limit is 180 s (3 x the 60 s default wind-down): ended in the first pass past it
    assert life["terminated_at"] == last_step + 240.0
    assert summary["cost_usd"] == pytest.approx(usd(120.0 + STEPS * 60.0 + 240.0, SPOT))
    with Store.open_existing(db) as s:
        (event,) = s.events(summary["job_id"], kind="lingered")
        (trial,) = s.list_trials(summary["job_id"])
    assert event.detail == {"seconds_after_done": 240.0, "limit_s": 180.0}
    assert (trial.state.value, trial.final_metric) == ("completed", STEPS / 10)


@pytest.mark.timeout(60)
def test_a_trial_that_exits_within_the_limit_is_left_to_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_running_totals import run_scripted

    market = DoneMarket(wind_s=120.0)
    summary, db = run_scripted(tmp_path, monkeypatch, market)
    (life,) = market.lives.values()
    assert life["terminated_at"] == life["at"] + 120.0 + STEPS * 60.0 + 120.0  # its own exit
    with Store.open_existing(db) as s:
        assert s.events(summary["job_id"], kind="lingered") == []
