"""The digits example as the orchestrator runs it: a child process driven by SPOTWISE_* vars.

An interrupted run (stop file or SIGTERM), relaunched from its checkpoint, must report exactly
the metrics of an uninterrupted run and end with bit-identical weights.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "digits" / "train.py"
STEPS = 12
EVERY = 4
STOP_AFTER = 5  # the test asks for a stop once this step is reported
TIMEOUT = 180


def _env(run: Path, attempt: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    env.update(
        SPOTWISE_JOB_ID="job-digits",
        SPOTWISE_TRIAL_ID="trial-0",
        SPOTWISE_ATTEMPT=str(attempt),
        SPOTWISE_PARAMS="{}",
        SPOTWISE_STEPS=str(STEPS),
        SPOTWISE_CHECKPOINT_URI=str(run / "ckpt"),
        SPOTWISE_CHECKPOINT_EVERY=str(EVERY),
        SPOTWISE_EVENTS_FILE=str(run / "events.jsonl"),
        SPOTWISE_STOP_FILE=str(run / "STOP"),
    )
    return env


def _launch(run: Path, attempt: int) -> subprocess.Popen[str]:
    run.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, str(TRAIN)],
        cwd=run,
        env=_env(run, attempt),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, out
    return out


def _events(run: Path) -> list[dict[str, Any]]:
    path = run / "events.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines(keepends=True)
    return [json.loads(line) for line in lines if line.endswith("\n")]  # skip a partial last line


def _metrics(events: list[dict[str, Any]]) -> dict[int, float]:
    """The newest report per step."""
    out: dict[int, float] = {}
    for e in events:
        if e["type"] == "report":
            out[e["step"]] = e["metric"]
    return out


def _final_state(run: Path) -> dict[str, Any]:
    import torch

    data = (run / "ckpt" / f"ckpt-{STEPS:08d}.pt").read_bytes()
    return torch.load(io.BytesIO(data), weights_only=True)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("uninterrupted")
    _finish(_launch(run, attempt=0))
    return run


def test_uninterrupted_run_learns(baseline: Path) -> None:
    events = _events(baseline)
    metrics = _metrics(events)
    assert sorted(metrics) == list(range(1, STEPS + 1))
    assert all(0.0 <= m <= 1.0 for m in metrics.values())
    assert metrics[STEPS] > 0.8, metrics
    checkpoints = [e["step"] for e in events if e["type"] == "checkpoint"]
    assert checkpoints == list(range(EVERY, STEPS + 1, EVERY))
    assert events[-1]["type"] == "done" and events[-1]["step"] == STEPS
    assert not any(e["type"] == "stopping" for e in events)


@pytest.mark.parametrize("how", ["stop_file", "signal"])
def test_interrupted_and_resumed_run_is_bit_identical(
    baseline: Path, tmp_path: Path, how: str
) -> None:
    run = tmp_path / "interrupted"
    proc = _launch(run, attempt=0)
    deadline = time.monotonic() + TIMEOUT
    while STOP_AFTER not in _metrics(_events(run)):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "no report for step 5"
        time.sleep(0.002)
    if how == "stop_file":
        (run / "STOP").write_text("")
    else:
        proc.send_signal(signal.SIGTERM)
    _finish(proc)

    first = _events(run)
    (stopping,) = [e for e in first if e["type"] == "stopping"]
    stop_step = stopping["step"]
    assert stopping["reason"] == how and STOP_AFTER <= stop_step < STEPS
    assert first[-1] == {**first[-1], "type": "checkpoint", "step": stop_step}
    assert not any(e["type"] == "done" for e in first)
    assert max(_metrics(first)) == stop_step

    (run / "STOP").unlink(missing_ok=True)
    out = _finish(_launch(run, attempt=1))
    assert f"resumed from step {stop_step} (attempt 1)" in out

    events = _events(run)
    resumed = _metrics(events[len(first) :])
    assert min(resumed) == stop_step + 1  # nothing retrained, nothing skipped
    assert _metrics(events) == _metrics(_events(baseline))  # exact, not approx
    assert events[-1]["type"] == "done" and events[-1]["step"] == STEPS

    import torch

    want, got = _final_state(baseline), _final_state(run)
    for part in ("model",):
        for k, v in want[part].items():
            assert torch.equal(got[part][k], v), f"{part}.{k} differs"
    for k, v in want["optimizer"]["state"].items():
        assert torch.equal(got["optimizer"]["state"][k]["momentum_buffer"], v["momentum_buffer"])
    assert torch.equal(got["torch_rng"], want["torch_rng"])
    assert torch.equal(got["order_rng"], want["order_rng"])
    assert got["scheduler"] == want["scheduler"]
