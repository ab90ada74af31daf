"""``spotwise predictor train | eval | forecast`` as a user meets them: every bad value is one
``error:`` line (plus at most a ``hint:``) naming the flag as typed, exit 2, no traceback;
``--traces`` takes ``builtin:skynomad-v100-2023`` like a job spec; ``--out`` never creates
folders; a foreign ``--model`` file is refused without torch's advice; tables stay whole at 80
columns."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pred_helpers import synthetic_traces
from typer.testing import CliRunner

from spotwise.cli import predictor
from spotwise.errors import PredictorError, SpecError
from spotwise.predictors import service
from spotwise.predictors.revocation import get_revocation_model
from spotwise.providers.replay import load_market_traces

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = "builtin:skynomad-v100-2023"
runner = CliRunner()

# the shipped trace: 2023-02-15T22:08:16 .. 2023-04-02T11:58:06 UTC (with its last tick's gap)
AT_RANGE = (
    "2023-02-15T22:08:16+00:00 .. 2023-04-02T11:58:06+00:00, or 0 to 1093.8 hours after its start"
)
AT_FORMS = (
    "use an ISO time such as 2023-03-10T17:03 (UTC if naive) or hours after the trace start "
    "such as 36, 36h or 1d12h (0 to 1093.8 hours after its start)"
)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    return subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", "predictor", *args],
        env={**base, "COLUMNS": "80"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _error(res: subprocess.CompletedProcess[str]) -> list[str]:
    """The ``error:`` line and its optional ``hint:`` line; nothing else, exit 2."""
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert 1 <= len(lines) <= 2 and lines[0].startswith("error: "), res.stderr
    assert len(lines) == 1 or lines[1].startswith("hint: "), res.stderr
    return lines


# ---- defect 1: numbers out of range -----------------------------------------------------------
@pytest.mark.parametrize("value", ["1.5", "0"])
def test_test_fraction_out_of_range_is_one_line(value: str) -> None:
    res = _cli("eval", "--traces", BUILTIN, "--models", "base-rate", "--test-fraction", value)
    assert _error(res) == [
        f"error: --test-fraction must be in (0, 1), got {value} (the later share of the ticks "
        "kept for testing; default 0.3)"
    ]


def test_test_fraction_nan_and_one_that_empties_a_part() -> None:
    with pytest.raises(SpecError, match=r"^--test-fraction must be in \(0, 1\), got nan "):
        service.evaluate_path(BUILTIN, 3600.0, names=("base-rate",), test_fraction=float("nan"))
    with pytest.raises(SpecError) as info:
        service.evaluate_path(BUILTIN, 3600.0, names=("base-rate",), test_fraction=0.00001)
    assert str(info.value) == (
        "--test-fraction 1e-05 keeps 0s of the trace for testing, less than the --horizon 1h; "
        "raise --test-fraction"
    )
    with pytest.raises(SpecError) as info:
        service.evaluate_path(BUILTIN, 3600.0, names=("base-rate",), test_fraction=0.99999)
    assert str(info.value) == (
        "--test-fraction 0.99999 leaves 0s of the trace to train on, less than the --horizon 1h; "
        "lower --test-fraction"
    )


def test_a_horizon_over_half_the_trace_says_to_shorten_it_not_to_move_the_split() -> None:
    """With --horizon 2d on a 3-day trace, 0.3 said "raise --test-fraction" and 0.6 "lower"
    it: no value works, and the advice sent the user back and forth."""
    from spotwise.predictors._argchecks import fmt, trace_span

    ts = load_market_traces(BUILTIN)
    span = trace_span(ts, 0, ts.n_ticks)
    for fraction in (0.3, 0.6):
        with pytest.raises(SpecError) as info:
            service.evaluate_path(BUILTIN, span * 0.6, names=("base-rate",), test_fraction=fraction)
        assert str(info.value) == (
            f"--horizon {fmt(span * 0.6)} is more than half the trace ({fmt(span)}): no "
            "--test-fraction leaves a training and a test part each longer than it; pass a "
            f"--horizon under {fmt(span / 2)}"
        )


def test_until_and_horizon_out_of_range(tmp_path: Path) -> None:
    out = tmp_path / "m.pt"
    for until in (0.0, 1.5, float("nan")):
        with pytest.raises(SpecError) as info:
            service.train_model(BUILTIN, 3600.0, out, "base-rate", until)
        assert str(info.value) == (
            f"--until must be in (0, 1], got {until:g} (the first share of the ticks to train "
            "on: 1 = all of them, 0.7 = the eval's training part)"
        )
    with pytest.raises(SpecError) as info:
        service.train_model(BUILTIN, 3600.0, out, "base-rate", 0.00001)
    assert str(info.value) == (
        "--until 1e-05 keeps 6m30s of the trace, less than the --horizon 1h: no tick to learn "
        "from; raise --until"
    )
    with pytest.raises(SpecError) as info:
        service.train_model(BUILTIN, 1000 * 86400.0, out, "base-rate")
    assert str(info.value) == (
        "--horizon 1000d is longer than the trace (45d13h46m35s); pass a shorter --horizon"
    )
    with pytest.raises(SpecError, match=r"^--horizon 1000d is longer than the trace"):
        service.evaluate_path(BUILTIN, 1000 * 86400.0, names=("base-rate",))
    assert not out.exists()


def test_an_lstm_that_cannot_split_its_part_is_a_predictor_error(tmp_path: Path) -> None:
    with pytest.raises(PredictorError) as info:
        service.train_model(BUILTIN, 10 * 86400.0, tmp_path / "m.pt", "lstm", 0.25)
    assert str(info.value) == "lstm: too few labelled ticks for a train/validation split"
    assert info.value.hint == "raise --until or pass a shorter --horizon"


def test_model_names_are_checked_before_anything_is_fitted(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        service.evaluate_path(BUILTIN, 3600.0, names=("lstm", "base-rat"))
    assert str(info.value) == (
        "--models: unknown model 'base-rat' (did you mean 'base-rate'?); "
        "valid: lstm, base-rate, persistence, logistic"
    )
    with pytest.raises(SpecError, match=r"^--models is empty; name one or more of base-rate"):
        service.evaluate_path(BUILTIN, 3600.0, names=())
    with pytest.raises(SpecError, match=r"^--model: unknown model 'lstn' \(did you mean 'lstm'"):
        service.train_model(BUILTIN, 3600.0, tmp_path / "m.pt", "lstn")
    with pytest.raises(SpecError, match=r"^--model and --train-on cannot be combined"):
        service.evaluate_path(BUILTIN, 3600.0, tmp_path / "m.pt", ("base-rate",), BUILTIN)


# ---- defect 2: a file that is not a model ------------------------------------------------------
def _saved_model(path: Path) -> Path:
    m = get_revocation_model("base-rate")
    m.fit(synthetic_traces(n=400), 3600.0)
    m.save(path)
    return path


def _foreign_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    import torch

    text = tmp_path / "hostname"
    text.write_text("my-host\n")
    truncated = tmp_path / "truncated.pt"
    whole = _saved_model(tmp_path / "whole.pt").read_bytes()
    truncated.write_bytes(whole[: len(whole) // 2])
    other_zip = tmp_path / "other.zip"
    with zipfile.ZipFile(other_zip, "w") as z:
        z.writestr("readme.txt", "not a model")
    pickled = tmp_path / "pickled.pt"
    torch.save({"when": datetime(2023, 1, 1, tzinfo=UTC)}, str(pickled))  # not weights-only
    headless = tmp_path / "headless.pt"
    torch.save({"name": "base-rate", "tensors": {}}, str(headless))
    broken = tmp_path / "broken.pt"
    torch.save(
        {"format": "spotwise-revocation/1", "name": "base-rate", "horizon_s": 3600.0}, str(broken)
    )
    archive = "not a PyTorch archive: truncated, or a file of another format"
    return {
        "text": (text, archive),
        "truncated": (truncated, archive),
        "other zip": (other_zip, "a damaged or foreign PyTorch archive"),
        "pickled": (pickled, "it holds pickled Python objects, not plain tensors"),
        "headless": (headless, "no 'spotwise-revocation/1' header"),
        "broken": (broken, "an incomplete base-rate model: no 'config' entry"),
    }


def test_foreign_model_files_are_one_line_without_torch_advice(tmp_path: Path) -> None:
    for kind, (path, reason) in _foreign_files(tmp_path).items():
        with pytest.raises(SpecError) as info:
            service.load_model_file(path)
        assert str(info.value) == f"--model {path}: not a spotwise model file ({reason})", kind
        assert info.value.hint == (
            "pass a file written by spotwise predictor train --traces "
            "builtin:skynomad-v100-2023 --out model.pt"
        )
    with pytest.raises(SpecError, match=r": does not exist$"):
        service.load_model_file(tmp_path / "missing.pt")
    with pytest.raises(SpecError, match=r": a folder, not a model file$"):
        service.load_model_file(tmp_path)


def test_forecast_with_a_text_file_as_model(tmp_path: Path) -> None:
    text = tmp_path / "hostname"
    text.write_text("my-host\n")
    res = _cli("forecast", "--model", str(text))
    lines = _error(res)
    assert lines[0] == (
        f"error: --model {text}: not a spotwise model file (not a PyTorch archive: truncated, "
        "or a file of another format)"
    )
    assert "weights_only" not in res.stderr and "pickle" not in res.stderr.lower()


def test_a_model_file_passed_to_eval_is_checked_the_same_way(tmp_path: Path) -> None:
    bad = tmp_path / "x.pt"
    bad.write_bytes(pickle.dumps({"format": "spotwise-revocation/1"}))
    with pytest.raises(SpecError, match=r"^--model .*x\.pt: not a spotwise model file \(not a"):
        service.evaluate_path(BUILTIN, 3600.0, bad, ("base-rate",))


# ---- defect 3: --at quotes what was typed and says what it takes -------------------------------
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yesterday", f"--at 'yesterday': not a time; {AT_FORMS}"),
        ("nan", f"--at 'nan': not a time; {AT_FORMS}"),
        ("5x", f"--at '5x': not a time; {AT_FORMS}"),
        ("-5", f"--at '-5' is outside the replayed trace: {AT_RANGE}"),
        ("1e9", f"--at '1e9' is outside the replayed trace: {AT_RANGE}"),
        ("2030-01-01", f"--at '2030-01-01' is outside the replayed trace: {AT_RANGE}"),
    ],
)
def test_bad_at_values(value: str, message: str) -> None:
    ts = load_market_traces(BUILTIN)
    with pytest.raises(SpecError) as info:
        service.parse_at(value, ts)
    assert str(info.value) == message


def test_at_offsets_in_hours_or_durations() -> None:
    ts = load_market_traces(BUILTIN)
    start = float(ts.times[0])
    assert service.parse_at("0", ts) == start  # the first tick (was refused as "not positive")
    assert service.parse_at("36", ts) == service.parse_at("36h", ts) == start + 36 * 3600
    assert service.parse_at("1d12h", ts) == start + 36 * 3600
    assert service.parse_at("90m", ts) == start + 5400
    assert service.parse_at(None, ts) == float(ts.times[-1])


def test_forecast_at_yesterday_from_the_command_line() -> None:
    assert _error(_cli("forecast", "--at", "yesterday")) == [
        f"error: --at 'yesterday': not a time; {AT_FORMS}"
    ]


def test_forecast_horizon_that_the_model_does_not_predict() -> None:
    with pytest.raises(SpecError) as info:
        service.forecast(horizon_s=7200.0)
    assert str(info.value) == "--horizon 2h: the model predicts a 1h horizon"
    assert info.value.hint == (
        "spotwise predictor train --traces builtin:skynomad-v100-2023 --horizon 2h "
        "--out model.pt, then pass --model model.pt"
    )


# ---- defects 4 and 5: --traces takes builtin:NAME; a missing path says so ----------------------
def test_train_and_eval_take_the_builtin_trace(tmp_path: Path) -> None:
    out = tmp_path / "m.pt"
    res = runner.invoke(
        predictor.app,
        ["train", "--traces", BUILTIN, "--model", "base-rate", "--out", str(out), "--json"],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["n_ticks"] == 20_158 and out.is_file()
    res = runner.invoke(
        predictor.app,
        ["eval", "--traces", BUILTIN, "--models", "base-rate", "--train-on", BUILTIN, "--json"],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["rows"][0]["n_test"] == 37_516


def test_builtin_trace_names_and_missing_paths() -> None:
    with pytest.raises(SpecError) as info:
        service.resolve_traces("builtin:skynomad-v100-2032")
    assert str(info.value) == (
        "--traces builtin:skynomad-v100-2032: no such shipped trace (did you mean "
        "'builtin:skynomad-v100-2023'?); valid: builtin:skynomad-v100-2023"
    )
    what = (
        "pass a SkyNomad CSV (file or folder), a folder of Can't Be Late JSON files, "
        "or builtin:skynomad-v100-2023 (the shipped trace)"
    )
    with pytest.raises(SpecError) as info:
        service.evaluate_path(BUILTIN, 3600.0, names=("base-rate",), train_on="/nope")
    assert str(info.value) == f"--train-on /nope: does not exist; {what}"
    with pytest.raises(SpecError) as info:
        service.resolve_traces("  ")
    assert str(info.value) == f"--traces is empty; {what}"


def test_train_with_a_missing_trace_path_says_it_does_not_exist(tmp_path: Path) -> None:
    lines = _error(_cli("train", "--traces", "/nope", "--out", str(tmp_path / "m.pt")))
    assert lines == [
        "error: --traces /nope: does not exist; pass a SkyNomad CSV (file or folder), a folder "
        "of Can't Be Late JSON files, or builtin:skynomad-v100-2023 (the shipped trace)"
    ]


def test_help_says_where_the_shipped_trace_is() -> None:
    for command in ("train", "eval"):
        res = runner.invoke(predictor.app, [command, "--help"], env={"COLUMNS": "200"})
        assert "builtin:skynomad-v100-2023" in res.output
        assert "spotwise/data/skynomad-v100-2023" in res.output


# ---- defect 6: --out never creates folders -----------------------------------------------------
def test_out_in_a_missing_folder_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    out = tmp_path / "nope" / "dir" / "m.pt"
    lines = _error(_cli("train", "--traces", BUILTIN, "--model", "base-rate", "--out", str(out)))
    assert lines == [
        f"error: --out {out}: folder {out.parent} does not exist",
        f"hint: create it first (mkdir -p {out.parent}), or check the path for a typo",
    ]
    assert not (tmp_path / "nope").exists()


def test_out_that_is_a_folder_or_under_a_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        service.train_model(BUILTIN, 3600.0, tmp_path, "base-rate")
    assert str(info.value) == (
        f"--out {tmp_path}: is a folder; name the file, e.g. --out {tmp_path / 'model.pt'}"
    )
    (tmp_path / "f").write_text("")
    with pytest.raises(SpecError) as info:
        service.train_model(BUILTIN, 3600.0, tmp_path / "f" / "m.pt", "base-rate")
    assert str(info.value) == (
        f"--out {tmp_path / 'f' / 'm.pt'}: {tmp_path / 'f'} is a file, not a folder; "
        "pick another path"
    )


# ---- defect 7: tables at 80 columns ------------------------------------------------------------
def _assert_whole(output: str, *values: str) -> None:
    assert "…" not in output
    for v in values:
        assert v in output
    assert all(len(line) <= 80 for line in output.splitlines() if "│" in line or "┃" in line)


def test_eval_table_keeps_model_names_whole_at_80_columns(tmp_path: Path) -> None:
    model = _saved_model(tmp_path / "m.pt")
    res = runner.invoke(
        predictor.app,
        ["eval", "--traces", BUILTIN, "--models", "persistence", "--model", str(model)],
        env={"COLUMNS": "80"},
    )
    assert res.exit_code == 0, res.output
    _assert_whole(res.output, "persistence", "base-rate", "given model file")
    assert "37516 test samples (zone × tick), 6007 revoked within 1h" in res.output


def test_forecast_table_at_80_columns() -> None:
    res = runner.invoke(predictor.app, ["forecast", "--at", "36"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    _assert_whole(res.output, "us-west-2b", "p3.2xlarge", "2023-02-17 10:07 UTC")
    assert "p_revoke: P(revoked within 1h)" in res.output
