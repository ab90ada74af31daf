"""Fixes from review-u: ``predictor eval --model`` refuses a model trained on its test ticks
(the model file records what it was trained on), ``builtin:lcbench-subset`` for ``--curves``, a
folder of several CSVs refused with their names, ``curve eval``'s MAE with fixed decimals."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import torch
from pred_helpers import LCBENCH_SUBSET, REPO, synthetic_traces
from typer.testing import CliRunner

from spotwise.cli import curve, predictor
from spotwise.errors import SpecError
from spotwise.predictors import revocation, service
from spotwise.predictors._revfeatures import chrono_split
from spotwise.predictors.curves import load_curves, resolve_metric
from spotwise.traces import TraceSet

runner = CliRunner()
N = 600  # ticks of the test trace (195 s apart: 32.5 h); eval tests on ticks 420..599


def _write(ts: TraceSet, path: Path) -> Path:
    lines = [
        "timestamp,availability_zone,instance_type,spot_available,spot_price_usd_per_hour,"
        "on_demand_price_usd_per_hour"
    ]
    for t in range(ts.n_ticks):
        stamp = datetime.fromtimestamp(ts.times[t], UTC).strftime("%Y-%m-%d %H:%M:%S")
        for z, zone in enumerate(ts.zones):
            lines.append(f"{stamp},{zone},p3.2xlarge,{int(ts.available[z, t])},0.9,3.06")
    path.write_text("\n".join(lines) + "\n")
    return path


def _trace(tmp_path: Path, n: int = N, seed: int = 0, name: str = "t.csv", days: int = 0) -> Path:
    ts = synthetic_traces(n=n, gap=195.0, seed=seed)
    return _write(replace(ts, times=ts.times + days * 86400.0), tmp_path / name)


def _train(trace: Path, out: Path, until: float = 1.0) -> Path:
    service.train_model(str(trace), 3600.0, out, "base-rate", until)
    return out


def _eval(trace: Path, model: Path, *more: str) -> Any:
    return runner.invoke(
        predictor.app,
        [
            "eval",
            "--traces",
            str(trace),
            "--model",
            str(model),
            "--models",
            "persistence",
            *more,
            "--json",
        ],
    )


# ---- finding 1: a model is never scored on the ticks it was trained on, silently -------------
def test_eval_refuses_a_model_trained_on_its_test_ticks(tmp_path: Path) -> None:
    """The default --until 1.0 trains on every tick: the model scored AUC 0.87 where the same
    model trained on the first 70 % scored 0.53, and nothing said so."""
    trace = _trace(tmp_path)
    model = _train(trace, tmp_path / "all.pt")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    done = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "predictor", "eval", "--traces", str(trace),
         "--model", str(model), "--models", "persistence"],
        env=base, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"error: --model {model} was trained on ticks 0..599 of this trace, which overlap its "
        "test ticks 420..599: its scores would be in-sample; train it with --until 0.7 or less "
        "(the eval's training part, --test-fraction 0.3)\n"
    )


def test_a_model_trained_before_the_test_ticks_is_scored_and_says_so(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    model = _train(trace, tmp_path / "m.pt", until=0.7)
    res = _eval(trace, model)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert "warnings" not in doc and res.stderr == ""
    row = doc["rows"][-1]
    assert row["name"] == "base-rate" and row["note"] == "given model file"
    assert row["trained_on"] == "ticks 0..419 of this trace" and row["overlap_checked"] is True
    assert doc["split"]["test_ticks"] == [420, N]
    # a larger test part reaches back into those ticks: the fix names the fraction that fits
    res = _eval(trace, model, "--test-fraction", "0.4")
    assert isinstance(res.exception, SpecError)
    assert str(res.exception).endswith(
        "which overlap its test ticks 360..599: its scores would be in-sample; train it with "
        "--until 0.6 or less (the eval's training part, --test-fraction 0.4)"
    )


def test_an_older_file_without_a_record_is_scored_with_a_warning(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    model = _train(trace, tmp_path / "old.pt")  # trained on all of it, like the review's file
    doc = torch.load(str(model), weights_only=True)
    del doc["trained_on"]  # as files written before the record
    torch.save(doc, str(model))
    res = _eval(trace, model)
    assert res.exit_code == 0, res.output
    line = (
        f"--model {model} does not record what it was trained on (an older file): whether it "
        "saw the test ticks cannot be checked; retrain it with --until 0.7 to know"
    )
    assert res.stderr == f"warning: {line}\n"
    out = json.loads(res.stdout)
    assert out["warnings"] == [line]
    row = out["rows"][-1]
    assert row["overlap_checked"] is False and row["trained_on"] is None
    assert row["note"] == "given model file; overlap not checked"


def test_a_model_of_another_trace_is_transfer(tmp_path: Path) -> None:
    """A trace of another month (its zones' names may be the same)."""
    other = _train(_trace(tmp_path, seed=1, name="other.csv", days=-40), tmp_path / "other.pt")
    res = _eval(_trace(tmp_path), other)
    assert res.exit_code == 0, res.output
    row = json.loads(res.stdout)["rows"][-1]
    assert row["trained_on"] == "another trace" and row["overlap_checked"] is True
    assert res.stderr == ""


def test_ticks_are_found_in_a_longer_copy_of_the_trace() -> None:
    """A model fitted on the first 500 ticks (say, a shorter export of the same trace) is found
    in the whole trace: ticks 0..499 reach into the test ticks 420..599."""
    from spotwise.predictors._provenance import check_model_ticks, locate

    ts = synthetic_traces(n=N, gap=195.0)
    m = revocation.get_revocation_model("base-rate")
    m.fit(ts.slice(0, 500), 3600.0)
    assert locate(m.trained_on or {}, ts) == (0, 500)
    with pytest.raises(SpecError, match=r"trained on ticks 0\.\.499 of this trace"):
        check_model_ticks(m.trained_on, ts, (420, N), 0.3, "m.pt")
    # the other way round: a model of all 600 ticks scored on a 300-tick export of them
    m.fit(ts, 3600.0)
    info, warnings = check_model_ticks(m.trained_on, ts.slice(0, 300), (210, 300), 0.3, "m.pt")
    assert info == {"trained_on": "another trace", "overlap_checked": False}
    assert warnings == [
        "--model m.pt was trained on another trace of the same zones and instance type over "
        "the same times as the test ticks: if it holds the same data, the scores are in-sample"
    ]


def test_the_record_survives_save_and_load(tmp_path: Path) -> None:
    from spotwise.predictors._provenance import record

    ts = synthetic_traces(n=400)
    m = revocation.get_revocation_model("base-rate")
    m.fit(ts.slice(0, 280), 3600.0)
    assert m.trained_on == record(ts.slice(0, 280))
    m.save(tmp_path / "m.pt")
    assert revocation.load(tmp_path / "m.pt").trained_on == m.trained_on


def test_the_shipped_model_is_known_to_be_trained_on_the_first_70_percent() -> None:
    """Its file predates the record: the first 70 % of the shipped trace (docs/predictors.md),
    exactly the eval's training part, so scoring it on the last 30 % stays allowed."""
    from spotwise.predictors._provenance import check_model_ticks, locate, record

    ts = service._load(service.BUILTIN)
    rec = revocation.load_pretrained().trained_on
    assert rec == record(ts.slice(0, 14111))
    test = chrono_split(ts, 3600.0).test
    assert locate(rec, ts) == (0, test[0])
    info, warnings = check_model_ticks(rec, ts, test, 0.3, "shipped.pt")
    assert info == {"trained_on": "ticks 0..14110 of this trace", "overlap_checked": True}
    assert warnings == []


def test_train_help_does_not_teach_the_overlap() -> None:
    """The first example trained on every tick: exactly the model eval must refuse."""
    res = runner.invoke(predictor.app, ["train", "--help"], env={"COLUMNS": "80"})
    lines = res.output.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip() == "Examples:")
    first = " ".join(ln.strip().rstrip("\\") for ln in lines[at + 1 : at + 3])
    assert "--until 0.7" in first, res.output
    prose = " ".join(" ".join(lines[:at]).split())
    assert "--until 0.7 keeps the last 30 % of the trace unseen, so that predictor eval" in prose


# ---- finding 6: builtin:lcbench-subset works from any folder -------------------------------
def test_builtin_curves_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert len(load_curves("builtin:lcbench-subset")) == len(load_curves(LCBENCH_SUBSET)) == 100
    res = runner.invoke(
        curve.app,
        ["eval", "--curves", "builtin:lcbench-subset", "--methods", "last-value", "--json"],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["metric"] == "val_accuracy" and doc["rows"][0]["n_curves"] == 100
    assert doc["curves"].endswith(
        "lcbench-subset/blood-transfusion-service-center_curves_long.csv.gz"
    )
    res = runner.invoke(curve.app, ["fit", "builtin:lcbench-subset", "--curve-id", "20", "--json"])
    assert res.exit_code == 0, res.output
    with pytest.raises(SpecError) as e:
        load_curves("builtin:lcbench")
    assert str(e.value) == (
        "--curves: unknown shipped curves 'builtin:lcbench' (did you mean "
        "'builtin:lcbench-subset'?); valid: builtin:lcbench-subset"
    )


def test_curve_help_examples_use_the_builtin_form() -> None:
    for args in (["--help"], ["eval", "--help"], ["fit", "--help"]):
        out = runner.invoke(curve.app, args, env={"COLUMNS": "80"}).output
        assert "builtin:lcbench-subset" in out and "spotwise/data/lcbench-subset" not in out


# ---- finding 10: a folder of several CSVs is not read as its first one ----------------------
def test_a_folder_is_its_lcbench_file_or_its_only_csv(tmp_path: Path) -> None:
    lc = tmp_path / "lc"
    shutil.copytree(LCBENCH_SUBSET, lc)
    (lc / "configs.csv").write_text("id,lr\n1,0.1\n")  # LCBench's side files do not count
    assert len(load_curves(lc)) == 100
    one = tmp_path / "one"
    one.mkdir()
    (one / "loss.csv").write_text("curve_id,step,loss\na,1,0.9\na,2,0.5\nb,1,0.8\nb,2,0.4\n")
    assert resolve_metric(one) == "loss" and sorted(load_curves(one)) == ["a", "b"]
    (one / "datasets.csv").write_text("name,rows\niris,150\n")
    with pytest.raises(SpecError) as e:
        load_curves(one)
    assert str(e.value) == (
        f"--curves: {one} holds 2 CSV files (datasets.csv, loss.csv); pass the curves file "
        f"itself: --curves {one / 'FILE.csv'}"
    )
    done = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "curve", "eval", "--curves", str(one)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "SPOTWISE_DEBUG"},
    )  # fmt: skip
    assert done.returncode == 2 and done.stderr == f"error: {e.value}\n"


# ---- finding 11: MAE with a fixed number of decimals ---------------------------------------
def test_curve_eval_mae_has_fixed_decimals(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"name": name, "mae": mae, "spearman": 0.9, "top10_recall_at_25": 0.9,
         "band_coverage": 0.5, "fit_ms_per_curve": 1.0, "n_curves": 100}
        for name, mae in (("earlycurve", 1.929), ("power-law", 2.36), ("last-value", 0.5))
    ]  # fmt: skip
    curve._print_eval({"rows": rows, "direction": "max"}, "val_accuracy", 0.3)
    out = capsys.readouterr().out
    assert "1.9290" in out and "2.3600" in out and "0.5000" in out
