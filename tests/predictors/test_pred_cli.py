"""The predictor and curve sub-apps through typer's CliRunner (the lead mounts them at the root)."""

from __future__ import annotations

import json
import types
from datetime import UTC
from pathlib import Path

import numpy as np
import pytest
from pred_helpers import LCBENCH_SUBSET, synthetic_traces
from typer.testing import CliRunner

from spotwise.cli import curve, predictor
from spotwise.errors import NotFoundError, ProviderUnavailable, SpecError
from spotwise.providers.base import Market, Offer

runner = CliRunner()


def write_cbl_folder(folder: Path) -> Path:
    """The synthetic trace as Can't Be Late JSON files (``<zone>_<key>.json``)."""
    ts = synthetic_traces(n=2000, gap=600.0)
    folder.mkdir()
    for z, zone in enumerate(ts.zones):
        doc = {"metadata": {"gap_seconds": 600}, "data": ts.available[z].astype(int).tolist()}
        (folder / f"{zone}_v100_1.json").write_text(json.dumps(doc))
    return folder


def write_skynomad_csv(path: Path) -> Path:
    ts = synthetic_traces(n=1500, gap=195.0)
    from datetime import datetime

    lines = [
        "timestamp,availability_zone,instance_type,spot_available,spot_price_usd_per_hour,"
        "on_demand_price_usd_per_hour"
    ]
    for t in range(ts.n_ticks):
        stamp = datetime.fromtimestamp(ts.times[t], UTC).strftime("%Y-%m-%d %H:%M:%S")
        for z, zone in enumerate(ts.zones):
            lines.append(
                f"{stamp},{zone},p3.2xlarge,{int(ts.available[z, t])},{ts.price[z, t]:.4f},3.06"
            )
    path.write_text("\n".join(lines))
    return path


def test_eval_json_on_cbl_folder(tmp_path: Path) -> None:
    folder = write_cbl_folder(tmp_path / "cbl")
    res = runner.invoke(
        predictor.app,
        [
            "eval",
            "--traces",
            str(folder),
            "--horizon",
            "1h",
            "--models",
            "base-rate,persistence,logistic",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [r["name"] for r in doc["rows"]] == ["base-rate", "persistence", "logistic"]
    for r in doc["rows"]:
        assert {"name", "auc", "brier", "log_loss", "n_test", "positives"} <= set(r)


def test_train_then_eval_and_forecast_with_model(tmp_path: Path) -> None:
    csv = write_skynomad_csv(tmp_path / "t.csv")
    out = tmp_path / "m.pt"
    res = runner.invoke(
        predictor.app,
        [
            "train",
            "--traces",
            str(csv),
            "--model",
            "logistic",
            "--horizon",
            "30m",
            "--until",  # eval tests on the last 30 %: a model trained there is refused
            "0.7",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert out.is_file() and json.loads(res.output)["model"] == "logistic"
    res = runner.invoke(
        predictor.app,
        [
            "eval",
            "--traces",
            str(csv),
            "--horizon",
            "30m",
            "--model",
            str(out),
            "--models",
            "base-rate",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert [r["name"] for r in json.loads(res.output)["rows"]] == ["base-rate", "logistic"]
    res = runner.invoke(predictor.app, ["eval", "--traces", str(csv), "--model", str(out)])
    assert isinstance(res.exception, SpecError)  # 1 h asked, the model predicts 30 min


def test_forecast_local_with_shipped_model() -> None:
    res = runner.invoke(predictor.app, ["forecast", "--provider", "local", "--at", "500", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    ps = [o["p_revoke"] for o in doc["offers"]]
    assert len(ps) == 9 and ps == sorted(ps) and all(0 <= p <= 1 for p in ps)
    assert doc["at"].startswith("2023-03-08")  # 500 h after 2023-02-15 22:08 UTC
    res = runner.invoke(predictor.app, ["forecast", "--at", "2023-03-20T12:00:00"])
    assert res.exit_code == 0, res.output
    assert "us-west-2a" in res.output and "p_revoke" in res.output
    res = runner.invoke(predictor.app, ["forecast", "--at", "2030-01-01T00:00:00"])
    assert isinstance(res.exception, SpecError)


class _FakeCatalog:
    def offers(self, market: object = None) -> list[Offer]:
        return [Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 0.95, 3.06)]


def test_forecast_cloud_prints_prices_and_says_what_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spotwise.providers import registry

    fake = types.SimpleNamespace(open_catalog=lambda config: _FakeCatalog())
    monkeypatch.setattr(registry, "cloud_module", lambda name: fake)
    res = runner.invoke(predictor.app, ["forecast", "--provider", "aws", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["offers"][0]["p_revoke"] is None and doc["offers"][0]["price_per_hour"] == 0.95
    assert "availability history" in doc["note"]
    res = runner.invoke(predictor.app, ["forecast", "--provider", "aws"])
    assert res.exit_code == 0 and "n/a" in res.output


def test_forecast_cloud_without_access_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.providers import registry

    def missing(name: str) -> object:
        raise ProviderUnavailable(f"{name}: its SDK is not installed", hint="pip install x")

    monkeypatch.setattr(registry, "cloud_module", missing)
    res = runner.invoke(predictor.app, ["forecast", "--provider", "gcp"])
    assert isinstance(res.exception, ProviderUnavailable)
    assert "price and availability history" in str(res.exception)
    res = runner.invoke(predictor.app, ["forecast", "--provider", "awz"])
    assert isinstance(res.exception, SpecError) and "did you mean 'aws'" in str(res.exception)


def test_curve_fit_draws_and_reports(tmp_path: Path) -> None:
    res = runner.invoke(
        curve.app,
        [
            "fit",
            str(LCBENCH_SUBSET),
            "--curve-id",
            "20",
            "--metric",
            "val_accuracy",
            "--theta",
            "0.3",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "predicted final at step 50" in res.output and "●" in res.output and "○" in res.output
    k = np.arange(1, 31)
    p = tmp_path / "one.csv"
    p.write_text("curve_id,step,value\n" + "\n".join(f"x,{s},{1 / s + 0.2}" for s in k))
    res = runner.invoke(
        curve.app, ["fit", str(p), "--curve-id", "x", "--total-steps", "60", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["final"] == pytest.approx(1 / 60 + 0.2, abs=1e-3) and doc["direction"] == "min"
    res = runner.invoke(curve.app, ["fit", str(p), "--curve-id", "y"])
    assert isinstance(res.exception, NotFoundError) and "not in" in str(res.exception)


def test_curve_eval_json() -> None:
    res = runner.invoke(
        curve.app,
        [
            "eval",
            "--curves",
            str(LCBENCH_SUBSET),
            "--metric",
            "val_accuracy",
            "--theta",
            "0.3",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["direction"] == "max"
    assert {r["name"] for r in doc["rows"]} == {
        "earlycurve",
        "last-value",
        "mean-last-k",
        "power-law",
    }
    for r in doc["rows"]:
        assert {"mae", "spearman", "top10_recall_at_25", "fit_ms_per_curve"} <= set(r)
