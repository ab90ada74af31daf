"""Small runs on the real traces and curves of ../shared/data (skipped when it is absent)."""

from __future__ import annotations

import json

import pytest
from plan_helpers import SHARED
from typer.testing import CliRunner

from spotwise.cli.simulate import app

pytestmark = [
    pytest.mark.shared_data,
    pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent"),
]
runner = CliRunner()


def test_tuning_on_skynomad_and_lcbench() -> None:
    res = runner.invoke(app, [
        "--traces", str(SHARED / "spot" / "skynomad-v100-2023"),
        "--curves", str(SHARED / "curves" / "lcbench"),
        "--policy", "on-demand,spot-greedy,asha,spottune,spotwise",
        "--trials", "16", "--parallel", "4", "--seeds", "1", "--revocation-model", "base-rate",
        "--workers", "1", "--json",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    p = doc["policies"]
    assert p["on-demand"]["cost_vs_on_demand"] == pytest.approx(1.0)
    assert p["spot-greedy"]["cost_usd"] < 0.5 * p["on-demand"]["cost_usd"]
    for name in ("asha", "spottune", "spotwise"):
        assert p[name]["cost_usd"] < p["spot-greedy"]["cost_usd"], name
    for name, s in p.items():
        assert s["budget_exceeded"] == s["deadline_missed"] == s["unfinished"] == 0, name
    assert doc["metric"] == "val_balanced_accuracy" and doc["direction"] == "maximize"


def test_deadline_replica_on_cant_be_late_traces() -> None:
    traces = SHARED / "spot" / "cant-be-late-availability" / "availability" / "1-node"
    res = runner.invoke(app, [
        "deadline", "--traces", str(traces / "aws-02-15-2023"),
        "--starts", "3", "--revocation-model", "base-rate", "--workers", "1", "--json",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert len(doc["zones"]) == 9  # the nine p3.2xlarge zones of 2023-02-15
    for name, s in doc["policies"].items():
        assert s["misses"] == 0, name
        assert s["runs"] == 27
    assert doc["policies"]["on-demand"]["mean_cost"] == pytest.approx(48.2 / 48)
