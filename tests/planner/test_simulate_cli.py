"""``spotwise simulate`` and ``spotwise simulate deadline`` through typer's CliRunner."""

from __future__ import annotations

import csv
import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spotwise.cli.simulate import app
from spotwise.errors import SpecError

runner = CliRunner()


def write_skynomad(path: Path, days: int = 9, gap_min: int = 30) -> Path:
    rng = np.random.default_rng(2)
    n = days * 24 * 60 // gap_min
    t0 = datetime(2023, 3, 1, tzinfo=UTC).timestamp()
    with gzip.open(path, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "availability_zone", "instance_type", "spot_available",
                    "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"])  # fmt: skip
        for i in range(n):
            ts = datetime.fromtimestamp(t0 + i * gap_min * 60, UTC).strftime("%Y-%m-%d %H:%M:%S")
            for z, up, price in (("us-east-2a", 0.9, 0.92), ("us-east-1a", 0.4, 1.6)):
                w.writerow([ts, z, "p3.2xlarge", int(rng.uniform() < up), price, 3.06])
    return path


def write_curves(path: Path, n: int = 12, steps: int = 10) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["curve_id", "step", "value", "seconds"])
        for c in range(n):
            final = 0.5 + 0.04 * ((c * 7) % n)
            for s in range(1, steps + 1):
                w.writerow([f"cfg{c}", s, final * (1 - 0.5**s), s * (600 + 30 * c)])
    return path


def write_cbl(folder: Path, ticks: int = 400) -> Path:
    rng = np.random.default_rng(4)
    folder.mkdir()
    for z, up in (("us-west-2a", 0.8), ("us-west-2b", 0.5)):
        data = [int(rng.uniform() < up) for _ in range(ticks)]
        (folder / f"{z}_v100_1.json").write_text(
            json.dumps({"metadata": {"gap_seconds": 600}, "data": data})
        )
    return folder


def test_simulate_json(tmp_path: Path) -> None:
    traces = write_skynomad(tmp_path / "trace.csv.gz")
    curves = write_curves(tmp_path / "curves.csv")
    out = tmp_path / "out.json"
    res = runner.invoke(app, [
        "--traces", str(traces), "--curves", str(curves), "--policy", "on-demand,spot-greedy,asha",
        "--trials", "6", "--parallel", "2", "--seeds", "2", "--revocation-model", "none",
        "--start-from", "0", "--window-hours", "72", "--time-scale", "1", "--workers", "1",
        "--json", "--out", str(out),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc == json.loads(out.read_text())
    assert list(doc["policies"]) == ["on-demand", "spot-greedy", "asha"]
    for p in doc["policies"].values():
        for key in ("cost_usd", "cost_vs_on_demand", "makespan_hours", "regret", "revocations",
                    "lost_hours", "early_stopped", "budget_stopped", "deadline_stopped",
                    "no_result"):  # fmt: skip
            assert key in p
    assert doc["policies"]["on-demand"]["cost_vs_on_demand"] == pytest.approx(1.0)
    assert doc["policies"]["spot-greedy"]["cost_vs_on_demand"] < 1.0
    assert doc["step_time"].startswith("recorded")


def test_simulate_table(tmp_path: Path) -> None:
    traces = write_skynomad(tmp_path / "trace.csv.gz")
    curves = write_curves(tmp_path / "curves.csv")
    res = runner.invoke(app, [
        "--traces", str(traces), "--curves", str(curves), "--policy", "on-demand,spot-greedy",
        "--trials", "4", "--seeds", "1", "--revocation-model", "none", "--start-from", "0",
        "--window-hours", "72", "--workers", "1",
    ], env={"COLUMNS": "200"})  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "spot-greedy" in res.output and "vs OD" in res.output


def test_simulate_needs_traces_and_curves() -> None:
    res = runner.invoke(app, ["--policy", "asha"])
    assert isinstance(res.exception, SpecError)
    assert "--traces and --curves" in str(res.exception)


def test_unknown_policy_names_the_valid_ones(tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["--traces", str(tmp_path), "--curves", str(tmp_path), "--policy", "asah"]
    )
    assert isinstance(res.exception, SpecError)
    assert "did you mean 'asha'" in str(res.exception)


def test_deadline_json(tmp_path: Path) -> None:
    folder = write_cbl(tmp_path / "cbl")
    res = runner.invoke(app, [
        "deadline", "--traces", str(folder), "--job-hours", "8", "--deadline-hours", "10",
        "--restart-hours", "0.2", "--policy", "on-demand,greedy,uniform-progress,spotwise",
        "--starts", "4", "--start-from", "0", "--revocation-model", "none", "--workers", "1",
        "--json",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["zones"] == ["us-west-2a_v100_1", "us-west-2b_v100_1"]
    assert doc["policies"]["on-demand"]["mean_cost"] == pytest.approx((8 + 0.2) / 8)
    for p in doc["policies"].values():
        assert p["misses"] == 0 and p["runs"] == 8


def test_deadline_rejects_a_deadline_shorter_than_the_job(tmp_path: Path) -> None:
    folder = write_cbl(tmp_path / "cbl")
    res = runner.invoke(app, ["deadline", "--traces", str(folder), "--job-hours", "10",
                              "--deadline-hours", "8", "--revocation-model", "none"])  # fmt: skip
    assert isinstance(res.exception, SpecError)
    assert "deadline" in str(res.exception)


def test_plot_draws_cost_vs_regret(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    traces = write_skynomad(tmp_path / "trace.csv.gz")
    curves = write_curves(tmp_path / "curves.csv")
    png = tmp_path / "cost-regret.png"
    # at the default --time-scale no run completes a trial in the window: nothing has a regret
    res = runner.invoke(app, [
        "--traces", str(traces), "--curves", str(curves), "--policy", "on-demand,asha",
        "--trials", "4", "--seeds", "2", "--revocation-model", "none", "--start-from", "0",
        "--window-hours", "72", "--workers", "1", "--json", "--plot", str(png),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_forecast_is_computed_when_no_chosen_policy_reads_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review-ac F5: `--policy asha` fitted (or loaded) the default forecast, minutes for
    `--revocation-model lstm`, then said it had used it; only spottune and spotwise read it."""
    from spotwise.planner import sim_suite

    traces = write_skynomad(tmp_path / "trace.csv.gz")
    curves = write_curves(tmp_path / "curves.csv")
    fitted: list[str] = []
    real = sim_suite.revocation_risk

    def spy(ts: object, model: str = "pretrained", *a: object, **k: object) -> object:
        fitted.append(model)
        return real(ts, model, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(sim_suite, "revocation_risk", spy)
    docs = {}
    for policies in ("on-demand,spot-greedy,asha", "asha,spottune"):
        res = runner.invoke(app, [
            "--traces", str(traces), "--curves", str(curves), "--policy", policies,
            "--trials", "4", "--parallel", "2", "--seeds", "1", "--revocation-model",
            "base-rate", "--start-from", "0.3", "--window-hours", "72", "--time-scale", "1",
            "--workers", "1", "--json",
        ])  # fmt: skip
        assert res.exit_code == 0, res.output
        docs[policies] = json.loads(res.output)
    assert fitted == ["base-rate"]  # for the second list only: spottune reads it
    first = docs["on-demand,spot-greedy,asha"]
    assert first["revocation_model"] == "none (no policy chosen reads a forecast)"
    assert docs["asha,spottune"]["revocation_model"].startswith("base-rate fitted on")
    # what asha does does not depend on it
    assert first["policies"]["asha"] == docs["asha,spottune"]["policies"]["asha"]
