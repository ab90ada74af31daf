"""review-ao F9: ``predictor forecast --horizon 60`` (a bare number is seconds: 1m) was told to
train a 1m model, which ``predictor train`` refuses (shorter than one tick of the trace). The
refusal now says how a bare number was read, and offers training only for a horizon that
``predictor train`` takes on the shipped trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from pred_helpers import synthetic_traces
from typer.testing import CliRunner

from spotwise.cli import predictor
from spotwise.errors import SpecError
from spotwise.predictors import service
from spotwise.predictors._argchecks import check_horizon
from spotwise.predictors.revocation import get_revocation_model
from spotwise.providers.replay import load_market_traces

BUILTIN = "builtin:skynomad-v100-2023"
TRAIN = f"spotwise predictor train --traces {BUILTIN} --horizon 2h --out model.pt, then pass "


@pytest.fixture(scope="module")
def hour_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 1h base-rate model (quick to load, unlike the shipped LSTM)."""
    m = get_revocation_model("base-rate")
    m.fit(synthetic_traces(n=400), 3600.0)
    path = tmp_path_factory.mktemp("m") / "h1.pt"
    m.save(path)
    return path


@pytest.mark.parametrize(
    ("asked", "line", "hint"),
    [
        (  # the finding: 60 minutes meant
            "60",
            "--horizon 60 is 1m (a bare number is seconds): the model predicts a 1h horizon",
            "for 60 minutes write --horizon 60m (1h, the model's)",
        ),
        (
            "1m",
            "--horizon 1m: the model predicts a 1h horizon",
            "pass --horizon 1h (the model's); no model can be trained for 1m: it is shorter "
            "than one tick of the trace (3m15s)",
        ),
        (  # seconds from the API: no "bare number" said, and no 1m model offered
            60.0,
            "--horizon 1m: the model predicts a 1h horizon",
            "pass --horizon 1h (the model's); no model can be trained for 1m: it is shorter "
            "than one tick of the trace (3m15s)",
        ),
        (
            "30",
            "--horizon 30 is 30s (a bare number is seconds): the model predicts a 1h horizon",
            "pass --horizon 1h (the model's); no model can be trained for 30s: it is shorter "
            "than one tick of the trace (3m15s)",
        ),
        (
            "100000d",
            "--horizon 100000d: the model predicts a 1h horizon",
            "pass --horizon 1h (the model's); no model can be trained for 100000d: it is longer "
            "than the trace (45d13h46m35s)",
        ),
        (  # trainable: the train command, as before
            "7200",
            "--horizon 7200 is 2h (a bare number is seconds): the model predicts a 1h horizon",
            TRAIN + "--model model.pt",
        ),
        ("2h", "--horizon 2h: the model predicts a 1h horizon", TRAIN + "--model model.pt"),
        (7200.0, "--horizon 2h: the model predicts a 1h horizon", TRAIN + "--model model.pt"),
    ],
)
def test_a_horizon_other_than_the_models(
    hour_model: Path, asked: str | float, line: str, hint: str
) -> None:
    with pytest.raises(SpecError) as info:
        service.forecast(model_path=hour_model, horizon_s=asked)
    assert (str(info.value), info.value.hint) == (line, hint)


@pytest.mark.parametrize("asked", ["3600", "60m", "1h", "3600s", 3600.0])
def test_the_models_horizon_however_written_forecasts(hour_model: Path, asked: str) -> None:
    res = service.forecast(model_path=hour_model, horizon_s=asked, at="36")
    assert res["horizon_s"] == 3600.0 and res["tick"] == 664 and len(res["offers"]) > 0


@pytest.mark.parametrize("seconds", [60.0, 194.0, 195.0, 196.0, 7200.0, 4e6, 1e9])
def test_training_is_offered_exactly_where_train_takes_the_horizon(
    hour_model: Path, seconds: float
) -> None:
    """The hint and ``predictor train``'s own check (on the shipped trace) agree."""
    ts = load_market_traces(BUILTIN)
    try:
        check_horizon(ts, seconds)
        trainable = True
    except SpecError:
        trainable = False
    with pytest.raises(SpecError) as info:
        service.forecast(model_path=hour_model, horizon_s=f"{seconds:g}s")
    assert (info.value.hint or "").startswith("spotwise predictor train") == trainable
    assert trainable == (195.0 <= seconds <= 3_937_595.0)


def _cli_error(*args: str) -> SpecError:
    """The SpecError the command raises (``spotwise.cli.app.main`` prints it, exit 2)."""
    res = CliRunner().invoke(predictor.app, ["forecast", *args])
    assert isinstance(res.exception, SpecError) and res.exception.exit_code == 2, res.output
    return res.exception


def test_forecast_horizon_60_on_the_command_line(hour_model: Path) -> None:
    e = _cli_error("--model", str(hour_model), "--horizon", "60")
    assert (e.message, e.hint) == (
        "--horizon 60 is 1m (a bare number is seconds): the model predicts a 1h horizon",
        "for 60 minutes write --horizon 60m (1h, the model's)",
    )


def test_a_typo_in_horizon_is_refused_before_the_model_loads() -> None:
    e = _cli_error("--model", "/nonexistent.pt", "--horizon", "1hr")
    assert e.message == "--horizon: '1hr' is not a duration; use e.g. 90s, 30m, 1h, 2d or 1h30m"
