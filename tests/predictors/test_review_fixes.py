"""Fixes from review-h: atomic model writes, logistic files of other features, horizons under a
tick, cloud forecasts refusing replay options, fractional and repeated curve steps, all-NaN
curves, --theta checked first, the EarlyCurve band at the asymptote's bound, ``curve fit``'s
fitted-vs-forecast output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from pred_helpers import synthetic_traces
from typer.testing import CliRunner

from spotwise.cli import curve, predictor
from spotwise.errors import SpecError
from spotwise.predictors import revocation, service
from spotwise.predictors._argchecks import check_horizon
from spotwise.predictors.curves import evaluate_curves, load_curves
from spotwise.predictors.earlycurve import fit_curve

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
HINT = "hint: pass a file written by spotwise predictor train --traces builtin:skynomad-v100-2023 "


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    return subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", *args],
        env={**base, "COLUMNS": "80"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _fitted_logistic() -> revocation.RevocationModel:
    m = revocation.get_revocation_model("logistic")
    m.fit(synthetic_traces(n=400), 1800.0)
    return m


# ---- 1. the model file is written atomically, never into a missing folder -----------------
def test_failed_save_keeps_the_old_model_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = _fitted_logistic()
    path = tmp_path / "keep.pt"
    m.save(path)
    before = path.read_bytes()
    real = torch.save

    def half_then_fail(obj: object, f: object) -> None:
        real(obj, f)  # type: ignore[arg-type]
        f.truncate(100)  # type: ignore[attr-defined]
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", half_then_fail)
    with pytest.raises(RuntimeError, match="disk full"):
        m.save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.pt"]
    assert revocation.load(path).name == "logistic"


def test_train_out_failure_is_one_line_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csv = tmp_path / "t.csv"
    out = tmp_path / "m.pt"
    _fitted_logistic().save(out)
    before = out.read_bytes()
    from test_pred_cli import write_skynomad_csv

    write_skynomad_csv(csv)

    def fail(obj: object, f: object) -> None:  # writes a part, then the disk is full
        if isinstance(f, str | Path):
            Path(f).write_bytes(b"PK partial")
        else:
            f.write(b"PK partial")  # type: ignore[attr-defined]
        raise OSError(27, "File too large")

    monkeypatch.setattr(torch, "save", fail)
    with pytest.raises(SpecError, match=r"^--out .*m\.pt: could not write the model file there$"):
        service.train_model(csv, 1800.0, out, "base-rate")
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "m.pt",
        "t.csv",
    ]


def test_save_never_creates_folders_and_keeps_file_permissions(tmp_path: Path) -> None:
    m = _fitted_logistic()
    with pytest.raises(FileNotFoundError, match=r"folder .*nope does not exist"):
        m.save(tmp_path / "nope" / "m.pt")
    assert not (tmp_path / "nope").exists()
    path = tmp_path / "m.pt"
    path.write_bytes(b"")
    path.chmod(0o640)
    m.save(path)
    assert path.stat().st_mode & 0o777 == 0o640


# ---- 2. a logistic file of other features, a bad horizon: clean refusals -----------------
def _doctored(tmp_path: Path, **changes: object) -> Path:
    path = tmp_path / "lr.pt"
    _fitted_logistic().save(path)
    doc = torch.load(str(path), weights_only=True)
    for key, value in changes.items():
        if key == "horizon_s":
            doc["horizon_s"] = value
        else:
            doc["config"][key] = value
    torch.save(doc, str(path))
    return path


def test_logistic_file_of_other_features_is_refused_cleanly(tmp_path: Path) -> None:
    path = _doctored(tmp_path, coef=[0.1] * 64, mean=[0.0] * 64, std=[1.0] * 64)
    with pytest.raises(SpecError) as info:
        service.load_model_file(path)
    assert str(info.value) == (
        f"--model {path}: not a spotwise model file (logistic: 64 coefficients for the 69 "
        "features this spotwise computes: built for other features; retrain it)"
    )
    res = _cli("predictor", "forecast", "--model", str(path))
    assert res.returncode == 2 and "internal error" not in res.stderr
    assert res.stderr.splitlines()[0].startswith(f"error: --model {path}: not a spotwise model")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"coef": ["x"] * 69}, "a malformed logistic model"),
        ({"horizon_s": float("nan")}, "logistic: its horizon_s nan is not a positive duration"),
        ({"horizon_s": -5.0}, "logistic: its horizon_s -5 is not a positive duration"),
        ({"horizon_s": float("inf")}, "logistic: its horizon_s inf is not a positive duration"),
    ],
)
def test_malformed_logistic_files(tmp_path: Path, changes: dict[str, object], reason: str) -> None:
    path = _doctored(tmp_path, **changes)
    with pytest.raises(SpecError) as info:
        service.load_model_file(path)
    assert str(info.value) == f"--model {path}: not a spotwise model file ({reason})"


# ---- 3. a horizon under one tick ----------------------------------------------------------
def test_horizon_under_one_tick_is_refused() -> None:
    ts = synthetic_traces(n=200, gap=195.0)
    with pytest.raises(SpecError) as info:
        check_horizon(ts, 2.0)
    assert str(info.value) == (
        "--horizon 2s is shorter than one tick of the trace (3m15s): nothing can be revoked "
        "within it; pass at least --horizon 3m15s"
    )
    check_horizon(ts, 195.0)  # one tick is enough


def test_horizon_under_one_tick_on_the_command_line(tmp_path: Path) -> None:
    from test_pred_cli import write_skynomad_csv

    csv = write_skynomad_csv(tmp_path / "t.csv")
    for cmd in (
        ("train", "--traces", str(csv), "--horizon", "2", "--out", str(tmp_path / "m.pt")),
        ("eval", "--traces", str(csv), "--horizon", "2", "--models", "base-rate"),
    ):
        res = _cli("predictor", *cmd)
        assert res.returncode == 2 and res.stdout == "", res.stderr
        assert res.stderr == (
            "error: --horizon 2s is shorter than one tick of the trace (3m15s): nothing can be "
            "revoked within it; pass at least --horizon 3m15s\n"
        )
    assert not (tmp_path / "m.pt").exists()
    helps = runner.invoke(predictor.app, ["train", "--help"], env={"COLUMNS": "200"}).output
    assert "(a bare number is seconds, unlike forecast --at's hours)" in helps


def test_forecast_refuses_a_model_of_a_horizon_under_one_tick(tmp_path: Path) -> None:
    m = revocation.get_revocation_model("base-rate")
    m.fit(synthetic_traces(n=400), 1800.0)
    m.horizon_s = 2.0
    path = tmp_path / "h2.pt"
    m.save(path)
    with pytest.raises(SpecError, match=r"its 2s horizon is shorter than one tick of the replayed"):
        service.forecast(model_path=path)


# ---- 4. a cloud forecast refuses the replay options ---------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "line"),
    [
        (
            {"at": "36"},
            "--at applies only to --provider local (the replayed trace); --provider aws lists "
            "its current spot prices: drop it",
        ),
        (
            {"at": "36", "model_path": "m.pt", "horizon_s": 300.0},
            "--at, --model, --horizon apply only to --provider local (the replayed trace); "
            "--provider aws lists its current spot prices: drop them",
        ),
    ],
)
def test_cloud_forecast_refuses_replay_options(
    kwargs: dict[str, object], line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.providers import registry

    def never(name: str) -> object:
        raise AssertionError("the cloud must not be asked")

    monkeypatch.setattr(registry, "cloud_module", never)
    with pytest.raises(SpecError) as info:
        service.forecast("aws", **kwargs)  # type: ignore[arg-type]
    assert str(info.value) == line


# ---- 5, 7: curve steps kept as read; repeated steps, all-NaN curves, --theta first --------
def _write(path: Path, rows: list[str]) -> Path:
    path.write_text("curve_id,step,value\n" + "\n".join(rows) + "\n")
    return path


def _known(k: np.ndarray) -> np.ndarray:
    return 1.0 / (0.001 * k * k + 0.1 * k + 1.0) + 0.2


def test_fractional_steps_behave_like_integer_steps(tmp_path: Path) -> None:
    k = np.arange(1, 51)
    rows_i, rows_f = [], []
    for c in range(6):
        v = _known(k) + 0.05 * c
        rows_i += [f"c{c},{s},{float(x)!r}" for s, x in zip(k, v, strict=True)]
        rows_f += [f"c{c},{s / 100},{float(x)!r}" for s, x in zip(k, v, strict=True)]
    ints = load_curves(_write(tmp_path / "i.csv", rows_i))
    fracs = load_curves(_write(tmp_path / "f.csv", rows_f))
    for theta in (0.3, 0.8):
        a = evaluate_curves(ints, theta, ("earlycurve", "last-value"), direction="min")
        b = evaluate_curves(fracs, theta, ("earlycurve", "last-value"), direction="min")
        for ra, rb in zip(a, b, strict=True):
            assert rb["mae"] == pytest.approx(ra["mae"], abs=1e-9)
    at3 = evaluate_curves(fracs, 0.3, ("last-value",), direction="min")[0]["mae"]
    at8 = evaluate_curves(fracs, 0.8, ("last-value",), direction="min")[0]["mae"]
    assert at8 < at3  # θ now moves the observed part (it was always 2 points)
    res = runner.invoke(
        curve.app, ["fit", str(tmp_path / "f.csv"), "--curve-id", "c0", "--theta", "0.8", "--json"]
    )
    doc = json.loads(res.output)
    assert (doc["total_steps"], doc["observed_points"], doc["last_observed_step"]) == (
        0.5,
        40,
        0.4,
    )
    assert doc["true_final"] == pytest.approx(float(_known(np.array([50.0]))[0]))


def test_repeated_step_is_refused_naming_curve_and_step(tmp_path: Path) -> None:
    p = _write(tmp_path / "d.csv", [f"a,{s},{1 / s}" for s in (1, 2, 3, 3, 4)])
    with pytest.raises(SpecError) as info:
        load_curves(p)
    assert str(info.value) == (
        "--curves: d.csv: curve 'a' has step 3 more than once; each step of a curve must appear "
        "once"
    )


def test_all_nan_curve_is_skipped_and_named(tmp_path: Path) -> None:
    rows = [f"{c},{s},{1 / s + ord(c)}" for c in ("a", "b", "c") for s in range(1, 21)]
    rows += [f"gone,{s}," for s in range(1, 11)] + ["c,21,"]
    p = _write(tmp_path / "n.csv", rows)
    res = runner.invoke(curve.app, ["eval", "--curves", str(p), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["skipped"] == ["gone"] and doc["rows"][0]["n_curves"] == 3
    assert all(np.isfinite(r["mae"]) for r in doc["rows"])  # c's blank last step left out
    res = runner.invoke(curve.app, ["eval", "--curves", str(p)])
    assert "skipped 1 curve with fewer than 3 finite points: gone" in res.output
    with pytest.raises(SpecError, match=r"^--curve-id 'gone': no finite value value in "):
        from spotwise.predictors.curve_service import curve_fit

        curve_fit(p, "gone", "value")


def test_bad_theta_is_refused_before_the_file_is_read(tmp_path: Path) -> None:
    p = _write(tmp_path / "w.csv", [f"a,{s}," for s in range(1, 5)] + ["b,1,1", "b,2,2"])
    res = _cli("curve", "eval", "--curves", str(p), "--theta", "7")
    assert (res.returncode, res.stderr, res.stdout) == (
        2,
        "error: --theta must be in (0, 1), got 7\n",
        "",
    )
    res = _cli("curve", "fit", "/nope.csv", "--curve-id", "a", "--theta", "0")
    assert res.stderr == "error: --theta must be in (0, 1], got 0\n"


def test_one_point_curve_reports_one_observed_point(tmp_path: Path) -> None:
    p = _write(tmp_path / "o.csv", ["one,1,0.5", "b,1,1", "b,2,2"])
    res = runner.invoke(curve.app, ["fit", str(p), "--curve-id", "one", "--theta", "0.5", "--json"])
    assert json.loads(res.output)["observed_points"] == 1


# ---- 6. the band at the asymptote's bound ---------------------------------------------------
def test_band_covers_a_noiseless_curve_when_the_asymptote_is_on_its_bound() -> None:
    k = np.arange(1.0, 51.0)
    f = fit_curve(k[:25], _known(k[:25]), total_steps=50, direction="min")
    truth = float(_known(np.array([50.0]))[0])
    assert f.band[0] <= truth <= f.band[1]
    assert f.note.startswith("the asymptote sits on its bound (0.25 of the value range")
    assert f.final == pytest.approx(0.33976, abs=1e-4)  # the forecast itself did not move
    assert f.band[1] == pytest.approx(0.35272, abs=1e-4)  # only the improving side widened


def test_earlycurve_docstring_matches_the_fit() -> None:
    from spotwise.predictors import earlycurve

    doc = earlycurve.__doc__ or ""
    assert "soft_l1" not in doc and "one\nvalue range" not in doc and "one value range" not in doc
    assert "quarter of the" in doc and "Huber" in doc


# ---- 8, 9: curve fit prints through the shared JSON printer; fitted vs forecast -----------
def test_curve_fit_says_fitted_value_at_theta_1(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    k = np.arange(1, 31)
    v = _known(k) + rng.normal(0, 0.01, len(k))
    p = _write(tmp_path / "c.csv", [f"x,{s},{float(x)!r}" for s, x in zip(k, v, strict=True)])
    res = runner.invoke(curve.app, ["fit", str(p), "--curve-id", "x"])
    assert res.exit_code == 0, res.output
    assert "predicted final" not in res.output
    assert "fitted value at the last step 30:" in res.output
    assert f"observed there: {v[-1]:.4g} (to forecast" in res.output
    doc = json.loads(runner.invoke(curve.app, ["fit", str(p), "--curve-id", "x", "--json"]).output)
    assert doc["final_kind"] == "fitted" and doc["observed_last"] == pytest.approx(v[-1])
    res = runner.invoke(curve.app, ["fit", str(p), "--curve-id", "x", "--theta", "0.5"])
    assert "predicted final at step 30:" in res.output
    assert f"last observed: {v[14]:.4g} at step 15, true final: {v[-1]:.4g}" in res.output


def test_curve_fit_json_goes_through_the_shared_printer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.cli import output

    seen: list[object] = []
    real = output.emit

    def spy(result: object, as_json: bool, render: object) -> None:
        seen.append(result)
        real(result, as_json, render)  # type: ignore[arg-type]

    monkeypatch.setattr(curve, "emit", spy)
    p = _write(tmp_path / "c.csv", [f"x,{s},{1 / s}" for s in range(1, 11)])
    res = runner.invoke(curve.app, ["fit", str(p), "--curve-id", "x", "--json"])
    assert res.exit_code == 0 and len(seen) == 1 and json.loads(res.output)["curve_id"] == "x"


def test_predictor_help_mentions_local_only() -> None:
    res = runner.invoke(predictor.app, ["forecast", "--help"], env={"COLUMNS": "200"})
    assert res.output.count("--provider local only") == 3
