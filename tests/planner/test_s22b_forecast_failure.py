"""A revocation forecast that fails (a NaN probability, a PredictorError since it stopped being
read as 0.5) inside `tune`'s replay or `simulate` came out as the model's own error, naming
neither the option that chose the model nor what to choose instead; `tune` recorded the job and
started it before the first forecast failed. Now: one line naming the field (or flag), the model
and the fix; a refusal before anything is recorded or written (exit 2) when it fails at once, and
a job that ends failed, its error saying so (exit 1), when it fails later in the replay."""

from __future__ import annotations

import csv
import gzip
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from spotwise.predictors.revocation import BaseRateModel
from spotwise.store import Store

FIX = "none (no forecast) or another model (base-rate, logistic)"


def _nan_after(monkeypatch: pytest.MonkeyPatch, first: list[int]) -> None:
    """base-rate gives NaN for every tick after the first it is asked about (``first``: that
    tick, recorded); with ``first`` given as ``[-1]`` NaN everywhere."""
    real = BaseRateModel._score

    def score(self: Any, traces: Any, lo: int, hi: int, zi: Any, ti: Any) -> Any:
        p = np.array(real(self, traces, lo, hi, zi, ti), dtype=float)
        if not first:
            first.append(lo + int(np.min(ti)))
        p[lo + ti > first[0]] = np.nan
        return p

    monkeypatch.setattr(BaseRateModel, "_score", score)


def _main(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    from spotwise.cli import app as cli

    monkeypatch.delenv("SPOTWISE_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["spotwise", *argv])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert isinstance(done.value.code, int)
    return done.value.code


# ---- simulate ----------------------------------------------------------------------------------
def _skynomad(path: Path, days: int = 9, gap_min: int = 30) -> Path:
    rng = np.random.default_rng(2)
    t0 = datetime(2023, 3, 1, tzinfo=UTC).timestamp()
    with gzip.open(path, "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "availability_zone", "instance_type", "spot_available",
                    "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"])  # fmt: skip
        for i in range(days * 24 * 60 // gap_min):
            ts = datetime.fromtimestamp(t0 + i * gap_min * 60, UTC).strftime("%Y-%m-%d %H:%M:%S")
            for z, up, price in (("us-east-2a", 0.9, 0.92), ("us-east-1a", 0.4, 1.6)):
                w.writerow([ts, z, "p3.2xlarge", int(rng.uniform() < up), price, 3.06])
    return path


def _curves(path: Path, n: int = 12, steps: int = 10) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["curve_id", "step", "value", "seconds"])
        for c in range(n):
            for s in range(1, steps + 1):
                w.writerow([f"cfg{c}", s, (0.5 + 0.04 * ((c * 7) % n)) * (1 - 0.5**s), s * 600])
    return path


@pytest.mark.parametrize("deadline", [False, True])
def test_simulate_refuses_a_nan_forecast_naming_the_flag_and_writes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    deadline: bool,
) -> None:
    _nan_after(monkeypatch, [-1])
    traces, out = _skynomad(tmp_path / "t.csv.gz"), tmp_path / "result.json"
    common = ["--revocation-model", "base-rate", "--seed", "0", "--workers", "1"]
    if deadline:
        args = ["simulate", "deadline", "--traces", str(traces), "--policy", "spotwise",
                "--job-hours", "4", "--deadline-hours", "8", "--starts", "1", "--start-from",
                "0.5", *common, "--out", str(out)]  # fmt: skip
    else:
        args = ["simulate", "--traces", str(traces), "--curves", str(_curves(tmp_path / "c.csv")),
                "--policy", "spotwise", "--trials", "4", "--seeds", "1", "--start-from", "0.3",
                "--window-hours", "72", *common, "--out", str(out)]  # fmt: skip
    assert _main(monkeypatch, *args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(
        "error: --revocation-model base-rate gave no usable forecast (the probability for zone "
    )
    assert err[0].endswith(f"; pass --revocation-model {FIX}")
    assert "is nan, not a number in [0, 1]" in err[0]
    assert not out.exists()


def test_simulate_names_the_flag_when_the_model_cannot_be_fitted() -> None:
    """Spot never available in the part the model trains on: no labelled tick to fit."""
    from spotwise.errors import SpecError
    from spotwise.planner.sim_suite import revocation_risk
    from spotwise.traces import TraceSet

    n = 200
    avail = np.ones((1, n), dtype=bool)
    avail[0, : n // 2] = False
    ts = TraceSet(
        zones=["us-test-1a"],
        times=1_700_000_000.0 + 300.0 * np.arange(n),
        available=avail,
        price=np.full((1, n), 1.0),
        instance_type="p3.2xlarge",
        on_demand_price=3.0,
        gap_seconds=300.0,
        source="hand-made",
    )
    with pytest.raises(SpecError) as info:
        revocation_risk(ts, "logistic", 0.4, from_tick=100)
    assert info.value.message == (
        "--revocation-model logistic cannot be fitted on the first 80 ticks of the trace (no "
        "labelled tick (spot never available, or the trace is shorter than the 3600 s "
        f"horizon)); pass --revocation-model {FIX}"
    )


# ---- tune on the replay -------------------------------------------------------------------------
TRIAL = """
import time
from spotwise import sdk
for step in range(1, sdk.steps() + 1):
    time.sleep(0.2)
    sdk.report(step, step / 10)
sdk.done(sdk.steps())
"""


def _job(tmp_path: Path) -> Path:
    t0 = datetime(2023, 3, 1, tzinfo=UTC)
    with (tmp_path / "trace.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "availability_zone", "instance_type", "spot_available",
                    "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"])  # fmt: skip
        for i in range(2000):
            stamp = (t0 + timedelta(seconds=30 * i)).strftime("%Y-%m-%d %H:%M:%S")
            for zone in ("us-east-1a", "us-east-1b"):
                up = int(zone == "us-east-1a" or i % 7 != 3)
                w.writerow([stamp, zone, "p3.2xlarge", up, "2.0", "5.0"])
    (tmp_path / "trial.py").write_text(TRIAL)
    spec = {
        "name": "nan-forecast",
        "command": [sys.executable, str(tmp_path / "trial.py")],
        "metric": {"name": "val_acc", "direction": "maximize"},
        "steps": 10,
        "trials": 1,
        "parallel": 1,
        "policy": "spotwise",
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": [
            {
                "name": "local",
                "replay": {
                    "trace": str(tmp_path / "trace.csv"),
                    "speedup": 300.0,
                    "start": 5.0,
                    "forecast": "base-rate",
                },
            }
        ],
        "checkpoint": {"location": str(tmp_path / "ckpt")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPOTWISE_DB", db)
    return db


@pytest.mark.timeout(60)
def test_tune_refuses_a_forecast_that_fails_at_the_start_before_recording_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _env(tmp_path, monkeypatch)
    _nan_after(monkeypatch, [-1])
    code = _main(monkeypatch, "tune", str(_job(tmp_path)), "--json")
    err = capsys.readouterr().err.splitlines()
    assert code == 2, err
    assert len(err) == 1, err
    assert err[0].startswith(
        "error: spec field 'providers.0.replay.forecast': base-rate gave no usable forecast "
        "(the probability for zone us-east-1a at tick 600 is nan, not a number in [0, 1] "
    )
    assert err[0].endswith(f"; set it to {FIX}")
    with Store.open_existing(db) as store:  # no job recorded, no run folder, nothing launched
        assert store.list_jobs() == [] and store.list_instances(None) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "job.yaml", "spotwise.db", "trace.csv", "trial.py"
    ]  # fmt: skip


@pytest.mark.timeout(60)
def test_tune_ends_the_job_failed_when_a_later_forecast_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _env(tmp_path, monkeypatch)
    first: list[int] = []
    _nan_after(monkeypatch, first)
    code = _main(monkeypatch, "tune", str(_job(tmp_path)), "--json")
    err = capsys.readouterr().err.splitlines()
    assert code == 1, err
    line = next(e for e in err if e.startswith("error: "))
    assert line.startswith(
        "error: spec field 'providers.0.replay.forecast': base-rate gave no usable forecast "
        "(the probability for zone us-east-1a at tick "
    )
    assert line.endswith(f"; set it to {FIX}")
    assert first == [600]  # the start (hour 5 of 30 s ticks) was forecast; a later tick failed
    with Store.open_existing(db) as store:
        (job,) = store.list_jobs()
        lives = store.list_instances(job.id)
        active = store.list_instances(job.id, active_only=True)
    assert (job.state.value, job.error) == ("failed", line.removeprefix("error: "))
    assert active == [] and all(life.ended_at is not None for life in lives)  # nothing held
