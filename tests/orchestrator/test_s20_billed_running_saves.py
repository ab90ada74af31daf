"""`status`'s ``billed_usd`` and ``running_usd`` of a job the real loop is running: at every
save of its totals (every pass here), the lives billed by then and the running life's estimate,
adding up to the saved ``cost_usd`` exactly; at its end, all billed.

The scripted market of tests/orchestrator/test_running_totals.py: one trial of 6 steps, its
first life revoked 360 s after its launch (billed $0.10 at $1/h), the second completing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_running_totals import SPOT, TICK_S, ScriptedMarket, run_scripted, usd

from spotwise import jobs


@pytest.mark.timeout(120)
def test_each_save_splits_into_the_bills_written_and_the_running_life(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    market = ScriptedMarket(steps=6, revoke_after={0: 360.0})
    saved: dict[float, dict[str, float]] = {}
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"

    def read_status(m: ScriptedMarket) -> None:
        if m.job_id is not None:  # saved at the end of the previous pass, one tick ago
            s = jobs.status(m.job_id, db=db)
            saved[m.t - TICK_S] = {k: s[k] for k in ("cost_usd", "billed_usd", "running_usd")}

    market.on_pass = read_status
    summary, _ = run_scripted(tmp_path, monkeypatch, market)
    assert summary["state"] == "succeeded", summary

    first, second = market.launched
    assert second == first + 360.0
    for at, s in saved.items():
        assert s["billed_usd"] + s["running_usd"] == s["cost_usd"], at  # exactly
        assert s["running_usd"] >= 0.0, at
    bill1 = usd(360, SPOT)
    expected = {  # (billed, running)
        first + 60: (0.0, usd(60, SPOT)),
        first + 300: (0.0, usd(300, SPOT)),
        second + 60: (bill1, usd(60, SPOT)),  # the revoked life's bill, and the relaunch
        second + 300: (bill1, usd(300, SPOT)),
    }
    for at, (billed, running) in expected.items():
        assert (saved[at]["billed_usd"], saved[at]["running_usd"]) == (
            pytest.approx(billed, abs=1e-9),
            pytest.approx(running, abs=1e-9),
        ), at
    after = jobs.status(summary["job_id"], db=db)
    assert (after["billed_usd"], after["running_usd"]) == (after["cost_usd"], 0.0)
