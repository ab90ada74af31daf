"""`predictor eval --model M --horizon H` with H other than the model's said "pass --horizon
<the model's>, or train a model for this horizon" even for a horizon under one tick of the trace,
which `predictor train` refuses (nothing can be revoked within it), and for one the trace is too
short to score. The hint now says what can be done instead: the shortest horizon the trace
supports, or that it is too long to score there; training is offered only where it works."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pred_helpers import synthetic_traces

from spotwise.errors import SpecError
from spotwise.predictors import service
from spotwise.predictors.revocation import get_revocation_model


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A synthetic SkyNomad CSV of 1500 ticks of 195 s (the shipped trace's tick: 3m15s) and a
    1h base-rate model."""
    folder = tmp_path_factory.mktemp("eval")
    ts = synthetic_traces(n=1500, gap=195.0)
    lines = [
        "timestamp,availability_zone,instance_type,spot_available,spot_price_usd_per_hour,"
        "on_demand_price_usd_per_hour"
    ]
    for t in range(ts.n_ticks):
        stamp = datetime.fromtimestamp(ts.times[t], UTC).strftime("%Y-%m-%d %H:%M:%S")
        for z, zone in enumerate(ts.zones):
            lines.append(f"{stamp},{zone},p3.2xlarge,{int(ts.available[z, t])},1.0,3.06")
    csv = folder / "t.csv"
    csv.write_text("\n".join(lines))
    m = get_revocation_model("base-rate")
    m.fit(synthetic_traces(n=400), 3600.0)
    m.save(folder / "h1.pt")
    return csv, folder / "h1.pt"


def _refusal(files: tuple[Path, Path], horizon_s: float, test_fraction: float = 0.3) -> SpecError:
    csv, model = files
    with pytest.raises(SpecError) as info:
        service.evaluate_path(csv, horizon_s, model, (), test_fraction=test_fraction)
    return info.value


def test_a_horizon_under_a_tick_is_told_the_shortest_the_trace_supports(
    files: tuple[Path, Path],
) -> None:
    e = _refusal(files, 60.0)
    assert e.message == f"--model {files[1]} predicts a 1h horizon but --horizon is 1m"
    assert e.hint == (
        "pass --horizon 1h (the model's); no model can be trained for 1m: it is shorter than "
        "one tick of the trace, 3m15s, the shortest horizon it supports"
    )


def test_a_horizon_too_long_to_score_is_not_offered_training(files: tuple[Path, Path]) -> None:
    e = _refusal(files, 2 * 86400.0)  # the trace: 1499 × 195 s = 3d9h11m45s
    assert e.hint == (
        "pass --horizon 1h (the model's); no model can be scored for 2d on this trace: it is "
        "more than half of it (3d9h11m45s), which must hold a training and a test part each "
        "that long"
    )


def test_a_horizon_the_trace_supports_is_offered_the_training_command(
    files: tuple[Path, Path],
) -> None:
    e = _refusal(files, 7200.0, test_fraction=0.25)
    assert e.hint == (
        f"pass --horizon 1h (the model's), or train one for 2h: spotwise predictor train "
        f"--traces {files[0]} --horizon 2h --until 0.75 --out model.pt, then pass --model "
        "model.pt"
    )


def test_the_command_line_says_it_in_two_lines_and_exits_2(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from spotwise.cli import app as cli

    csv, model = files
    argv = ["spotwise", "predictor", "eval", "--traces", str(csv), "--model", str(model)]
    monkeypatch.setattr(sys, "argv", [*argv, "--horizon", "90s"])
    monkeypatch.delenv("SPOTWISE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --model {model} predicts a 1h horizon but --horizon is 1m30s",
        "hint: pass --horizon 1h (the model's); no model can be trained for 1m30s: it is "
        "shorter than one tick of the trace, 3m15s, the shortest horizon it supports",
    ]
