"""A trial that never reports its metric at its last step is no completed trial (review-w F1).

A trial reporting at 0-indexed steps (``report(step - 1, v)``), only every k steps with the last
skipped, or never, exited 0 "with steps left": a crash, so it was relaunched on a second paid
instance, which resumed from a checkpoint at the last step, reported nothing and was marked
``completed`` with no final metric (its step came from the checkpoint). The job "succeeded",
exit 0, with no best. Now a trial whose work is done but whose result was never reported fails
at once, saying what it reported; and a job in which no trial has a final metric fails.
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from spotwise.planner.policy import Phase
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trialbook import TrialBook
from spotwise.providers.base import InstanceState, Market, Offer
from spotwise.store import Store

# reports at steps 0..steps-1, checkpoints every 2 steps (so at the last one), resumes from it
ZERO_INDEXED = """
from spotwise import sdk
total = sdk.steps()
state = sdk.load_checkpoint()
start = 0 if state is None else int(state["step"])
for step in range(start + 1, total + 1):
    sdk.report(step - 1, step / 100)
    if sdk.checkpoint_due(step):
        sdk.save_checkpoint({"step": step}, step)
sdk.done(total)
"""
# reports at steps 1..steps-1, skipping the last (as a report every k steps may)
SHORT_BY_ONE = ZERO_INDEXED.replace(
    "sdk.report(step - 1, step / 100)",
    """if step < total:
        sdk.report(step, step / 100)""",
)
# no checkpoint, no report: exits 0 at once
SILENT = "from spotwise import sdk\nsdk.done(sdk.steps())\n"


def _trace(path: Path) -> None:
    t0 = datetime(2023, 3, 1, tzinfo=UTC)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["timestamp", "availability_zone", "instance_type", "spot_available",
             "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"]
        )  # fmt: skip
        for i in range(900):
            stamp = (t0 + timedelta(seconds=30 * i)).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([stamp, "us-east-1b", "p3.2xlarge", 1, "2.0", "5.0"])


def _spec(tmp_path: Path, script: str, steps: int, trials: int = 1) -> Path:
    _trace(tmp_path / "trace.csv")
    (tmp_path / "trial.py").write_text(script)
    spec = {
        "name": "unreported",
        "command": ["python", str(tmp_path / "trial.py")],
        "metric": {"name": "val_acc", "direction": "maximize"},
        "steps": steps,
        "trials": trials,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": [
            {"name": "local", "replay": {"trace": str(tmp_path / "trace.csv"), "speedup": 30.0}}
        ],
        "checkpoint": {"every": 2, "location": str(tmp_path / "ckpt")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _tune(tmp_path: Path, spec: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Any]:
    """`spotwise tune SPEC --json` in process: its exit code and its summary."""
    from spotwise.cli.app import app

    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPOTWISE_DB", f"sqlite:///{tmp_path / 'spotwise.db'}")
    res = CliRunner().invoke(app, ["tune", str(spec), "--json"])
    return res.exit_code, json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(180)
def test_two_trials_that_never_report_their_last_step_stop_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the script's reporting is wrong for every trial: after two such failures with nothing
    # completed, no third or fourth trial is paid for
    code, summary = _tune(tmp_path, _spec(tmp_path, SHORT_BY_ONE, 4, trials=4), monkeypatch)

    assert (code, summary["state"], summary["best"], summary["completed"]) == (1, "failed", None, 0)
    with Store.open_existing(f"sqlite:///{tmp_path / 'spotwise.db'}") as store:
        trials = store.list_trials(summary["job_id"])
        lives = store.list_instances(summary["job_id"])
    assert [t.state.value for t in trials] == ["failed", "failed"]
    assert len(lives) == 2


@pytest.mark.timeout(180)
def test_one_zero_indexed_trial_stops_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps counted from 0 (a report at step 0, the last one step short): no trial of that
    script can report its last step, so the second trial is not paid for."""
    code, summary = _tune(tmp_path, _spec(tmp_path, ZERO_INDEXED, 4, trials=4), monkeypatch)

    assert (code, summary["state"], summary["completed"]) == (1, "failed", 0)
    with Store.open_existing(f"sqlite:///{tmp_path / 'spotwise.db'}") as store:
        trials = store.list_trials(summary["job_id"])
        lives = store.list_instances(summary["job_id"])
    assert [t.state.value for t in trials] == ["failed"] and len(lives) == 1


@pytest.mark.timeout(180)
def test_a_zero_indexed_trial_fails_at_once_and_the_job_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, summary = _tune(tmp_path, _spec(tmp_path, ZERO_INDEXED, 4), monkeypatch)

    why = (
        "the trial reached step 4 of 4 but reported val_acc only up to step 3 (steps count "
        "from 1: report(step, value) at step 4 is the result)"
    )
    assert (code, summary["state"], summary["best"], summary["completed"]) == (1, "failed", None, 0)
    assert summary["error"].startswith(f"every trial failed (1); the last error: {why}; ")
    with Store.open_existing(f"sqlite:///{tmp_path / 'spotwise.db'}") as store:
        (trial,) = store.list_trials(summary["job_id"])
        lives = store.list_instances(summary["job_id"])
        (error,) = store.events(summary["job_id"], kind="error")
    assert (trial.state.value, trial.final_metric, trial.checkpoint_step) == ("failed", None, 4)
    assert len(lives) == 1  # no relaunch: a second life could only resume at step 4 and stop
    assert (error.detail["exit_code"], error.detail["last_reported_step"]) == (0, 3)
    assert error.detail["error"] == why


@pytest.mark.timeout(180)
def test_a_trial_that_never_reports_says_so_in_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No checkpoint: it did not reach its last step, so it is retried as a crash, and the
    error of each exit says it never reported."""
    code, summary = _tune(tmp_path, _spec(tmp_path, SILENT, 3), monkeypatch)

    assert (code, summary["state"], summary["best"]) == (1, "failed", None)
    assert summary["error"].startswith(
        "every trial failed (1); the last error: the trial exited with code 0 at step 0 of 3 "
        "without being asked to stop; it never reported val_acc; see the trial logs in "
    )
    with Store.open_existing(f"sqlite:///{tmp_path / 'spotwise.db'}") as store:
        errors = store.events(summary["job_id"], kind="error")
    assert [(e.detail["exit_code"], e.detail["last_reported_step"]) for e in errors] == [
        (0, None),
        (0, None),
    ]


# ---- the decision on one exit, on a TrialBook alone ------------------------------------------
OFFER = Offer("local", "local", "local-a", "cpu", Market.SPOT, 0.05, 0.2)


class _Metric:
    name = "val_acc"


class _Spec:
    metric = _Metric()
    providers: tuple[Any, ...] = ()


class _Search:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def tell(self, params: Any, value: float) -> None:
        self.calls.append("tell")

    def tell_failure(self, params: Any) -> None:
        self.calls.append("tell_failure")

    def forget(self, params: Any) -> None:
        self.calls.append("forget")


class _Store:
    def __init__(self) -> None:
        self.trial: dict[str, Any] = {}

    def update_trial(self, trial_id: str, **fields: Any) -> None:
        self.trial.update(fields)


class Book(TrialBook):
    def __init__(self, tmp_path: Path) -> None:
        self.run_dir, self.job_id = tmp_path / "runs" / "j-1", "j-1"
        self.spec = _Spec()  # type: ignore[assignment]
        self.revocations = self.early_stopped = 0
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.store = _Store()
        self.search = _Search()  # type: ignore[assignment]

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.events.append((kind, detail))


def _trial(curve: dict[int, float], checkpoint: int, steps: int = 6) -> TrialRun:
    t = TrialRun("t-1", 0, {"x": 0.5}, steps_total=steps, checkpoint_every=2)
    t.life = Life("l1", "local-1", OFFER, 0.0, 0, 0)
    t.phase, t.state = Phase.RUNNING, "running"
    t.curve = dict(curve)
    t.step = max(curve, default=0)
    t.furthest = t.step
    t.checkpoint_step = checkpoint
    return t


@pytest.mark.parametrize(
    ("curve", "why"),
    [
        ({}, "the trial reached step 6 of 6 but never reported val_acc; report(step, value) at "
         "step 6 is the result"),
        ({4: 0.8}, "the trial reached step 6 of 6 but reported val_acc only up to step 4 "
         "(report(step, value) at step 6 is the result)"),
        ({0: 0.1, 5: 0.8}, "the trial reached step 6 of 6 but reported val_acc only up to step 5 "
         "(steps count from 1: report(step, value) at step 6 is the result)"),
        ({7: 0.8}, "the trial reached step 7 of 6 but reported val_acc at steps up to 7, not at "
         "step 6 (report(step, value) at step 6 is the result)"),
    ],
)  # fmt: skip
def test_a_trial_checkpointed_at_its_last_step_without_its_result_fails(
    tmp_path: Path, curve: dict[int, float], why: str
) -> None:
    book = Book(tmp_path)
    t = _trial(curve, checkpoint=6)
    ev = book._on_exit(t, 0, InstanceState.TERMINATED, 10.0)

    assert (t.state, t.phase, t.last_error, t.final_metric) == ("failed", Phase.DONE, why, None)
    assert book.store.trial["state"] == "failed" and book.store.trial["final_metric"] is None
    kinds = [k for k, _ in book.events]
    assert kinds == ["error", "failed"]
    assert book.events[0][1]["last_reported_step"] == (max(curve) if curve else None)
    assert not getattr(ev, "finished", True)


def test_a_relaunch_resumed_at_the_last_step_that_reports_nothing_fails(tmp_path: Path) -> None:
    """HEAD: the relaunch's step came from the checkpoint (6 of 6): "completed", no final."""
    book = Book(tmp_path)
    t = _trial({5: 0.9}, checkpoint=6)
    t.step = 6  # _to_waiting set it from the checkpoint after the first life
    t.failures, t.retrying = 1, True
    book._on_exit(t, 0, InstanceState.TERMINATED, 10.0)
    assert t.state == "failed"
    assert t.last_error is not None and "only up to step 5 (steps count from 1" in t.last_error


def test_a_trial_that_reported_its_last_step_still_completes(tmp_path: Path) -> None:
    book = Book(tmp_path)
    t = _trial({2: 0.5, 4: 0.7, 6: 0.9}, checkpoint=6)
    ev = book._on_exit(t, 0, InstanceState.TERMINATED, 10.0)
    assert (t.state, book.store.trial["final_metric"]) == ("completed", 0.9)
    assert [k for k, _ in book.events] == ["completed"] and getattr(ev, "finished", False)


def test_a_revoked_life_checkpointed_at_the_end_is_relaunched(tmp_path: Path) -> None:
    """Taken by the cloud between its last checkpoint and its last report: the relaunch may
    still report (the next life's exit decides), as any revoked trial resumes."""
    book = Book(tmp_path)
    t = _trial({5: 0.9}, checkpoint=6)
    assert t.life is not None
    t.life.notice_deadline = 12.0
    book._on_exit(t, 0, InstanceState.TERMINATED, 10.0)
    assert (t.state, t.step, t.failures) == ("waiting", 6, 0)


def test_exit_0_with_steps_left_says_the_step_it_reported_last(tmp_path: Path) -> None:
    """A relaunch resumed at its checkpoint (step 4) that exits 0 reporting nothing: its step
    is the checkpoint's, so the error says where its reports stopped."""
    book = Book(tmp_path)
    t = _trial({3: 0.6}, checkpoint=4)
    t.step = 4
    book._on_exit(t, 0, InstanceState.TERMINATED, 10.0)
    assert t.state == "waiting" and t.failures == 1  # retried, as any crash
    assert t.last_error == (
        "the trial exited with code 0 at step 4 of 6 without being asked to stop; it reported "
        "val_acc last at step 3"
    )
    assert book.events[0][1]["last_reported_step"] == 3
