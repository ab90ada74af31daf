"""Each `launch` event records the offer's on-demand price, so that a cancel can reference a
life whose instance is already gone (review-bb F5: its price was said unknown)."""

from __future__ import annotations

from pathlib import Path

from test_orchestrator import TINY, spec_dict, write_spec, write_trace

from spotwise import jobs
from spotwise.store import Store


def test_every_launch_event_carries_the_offers_on_demand_price(tmp_path: Path) -> None:
    write_trace(tmp_path / "trace.csv")
    spec = spec_dict(tmp_path, command=["python", str(TINY)], steps=4, env={})
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    out = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    assert out["state"] == "succeeded", out
    with Store.open_existing(db) as s:
        launches = s.events(out["job_id"], kind="launch")
    assert launches
    for e in launches:
        od = e.detail["on_demand"]
        assert isinstance(od, float) and od > e.detail["price"] > 0, e.detail
