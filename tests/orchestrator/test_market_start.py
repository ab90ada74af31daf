"""A replayed market's clock starts when the job does: once the market is open and checked
and the search is built (scikit-optimize takes seconds to import, a resume's search a model
fit), not when the market was opened. Else those seconds, times the replay's speed-up, were
market time gone before the first launch (at 600x, a 1 s wait is 10 market minutes)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from test_orchestrator import T0, TRACE_TICKS, tiny_spec, write_spec, write_trace

from spotwise import jobs
from spotwise.planner import orchestrator
from spotwise.planner.search import Search
from spotwise.store import Store


@pytest.mark.timeout(120)
def test_the_first_launch_comes_at_the_market_start_however_slow_the_search_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class SlowSearch(Search):
        def __init__(self, *a: Any, **kw: Any) -> None:
            time.sleep(1.0)  # as a cold scikit-optimize import on a busy machine
            super().__init__(*a, **kw)

    monkeypatch.setattr(orchestrator, "Search", SlowSearch)
    # capacity never goes: at 600x the default trace takes us-east-1a 0.8 wall s in, and on a
    # busy machine the 1-step trial was still starting then (a second launch, nothing wrong)
    write_trace(tmp_path / "trace.csv", avail_ticks=TRACE_TICKS)
    spec = tiny_spec(tmp_path, steps=1)
    spec["providers"][0]["replay"]["speedup"] = 600.0
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    out = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")

    assert out["state"] == "succeeded", out
    with Store.open_existing(db) as store:
        (launch,) = store.events(out["job_id"], kind="launch")
    # the first pass launches at once: well under the 600 market s the wait would have cost
    assert launch.time - T0.timestamp() < 300.0
