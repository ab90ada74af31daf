"""The live view's snapshot carries the metric's direction (s24 helper I): the live table of a
job with more trials than terminal rows shows the best finished trials after the unfinished
ones, and which are the best depends on it (without it, it showed the newest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_orchestrator import TINY, spec_dict, write_spec, write_trace

from spotwise import jobs


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_each_live_snapshot_names_the_metrics_direction(tmp_path: Path, direction: str) -> None:
    write_trace(tmp_path / "trace.csv")
    spec = spec_dict(
        tmp_path,
        command=["python", str(TINY)],
        metric={"name": "score", "direction": direction},
        steps=4,
        env={},
    )
    seen: list[dict[str, Any]] = []
    out = jobs.tune(
        write_spec(tmp_path, spec),
        db=f"sqlite:///{tmp_path / 'spotwise.db'}",
        run_root=tmp_path / "runs",
        on_update=seen.append,
    )
    assert out["state"] == "succeeded", out
    assert seen
    assert {s["direction"] for s in seen} == {direction}
