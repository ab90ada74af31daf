"""A step the store cannot keep does not take the orchestrator down (review-ak F1).

A trial that reported ``2**63 + step`` (a timestamp in ns, a hash: an SDK before ``check_step``
had an upper bound took any int >= 0) made the store raise ``OverflowError: Python int too
large to convert to SQLite INTEGER`` inside the orchestrator's loop (exit 70), and again in its
drain's ``_close_trial``: the other trials' closes, ``backend.close()`` and the job's end never
ran, and the job stayed "running (orchestrator gone)" until ``spotwise cancel``. Now such a
record is ignored with one ``invalid_step`` event per trial (as a record without an int step
is), and a drain that cannot close one trial closes the others and ends the job, failed, with
the error raised after (the exit code still says it).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_orchestrator import spec_dict, write_spec, write_trace

from spotwise import jobs
from spotwise.planner.ledger import Ledger
from spotwise.planner.policy import Phase
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trialbook import TrialBook
from spotwise.providers.base import Market, Offer
from spotwise.store import Store

HUGE = 2**63 + 1
SPOT = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 1.0, 3.0)
IGNORED = (
    f"a report record with step {HUGE} was ignored: a step must be an int from 0 to {2**63 - 1}"
)


class _Search:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: self.calls.append(name)


def _store(tmp_path: Path) -> tuple[Store, str]:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    job = store.create_job("huge", "{}", "", "spot-greedy", "maximize")
    return store, job.id


def _trial(store: Store, job_id: str, number: int) -> TrialRun:
    row = store.add_trial(job_id, number, {"lr": 0.01})
    t = TrialRun(row.id, number, {"lr": 0.01}, 6, 2)
    t.phase, t.state = Phase.RUNNING, "running"
    return t


class Book(Ledger):
    """The progress intake and the drain over a real store, without a market."""

    def __init__(self, store: Store, job_id: str, trials: list[TrialRun]) -> None:
        self.store, self.job_id, self.trials = store, job_id, trials
        self.lives, self.leftover_ids, self.unconfirmed, self.budget_stops = {}, [], {}, []
        self.revocations = self.early_stopped = self.migrations = 0
        self.search = _Search()  # type: ignore[assignment]
        self.spec = SimpleNamespace(metric=SimpleNamespace(direction="maximize"))  # type: ignore[assignment]
        self.records: list[dict[str, Any]] = []
        self.closed = 0
        provisioner = SimpleNamespace(progress=lambda iid: self.records)
        self.backend = SimpleNamespace(  # type: ignore[assignment]
            speedup=1.0, provisioner=provisioner, now=lambda: 50.0, close=self._close
        )

    def _close(self) -> None:
        self.closed += 1

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.store.add_event(self.job_id, kind, now, trial_id=t.trial_id if t else None, **detail)

    def _settle_unconfirmed(self, now: float) -> None:
        pass

    def _sweep_strays(self, now: float) -> None:
        pass


def test_a_record_with_a_step_the_store_cannot_keep_is_ignored_and_said_once(
    tmp_path: Path,
) -> None:
    store, job_id = _store(tmp_path)
    t = _trial(store, job_id, 0)
    t.life = Life("l0", "i0", SPOT, 0.0, 0, 0)
    book = Book(store, job_id, [t])
    book.records = [
        {"type": "report", "step": HUGE, "metric": 0.5},
        {"type": "report", "step": 1, "metric": 0.25},
        {"type": "checkpoint", "step": 2**64, "uri": "/ckpt/x", "seconds": 0.1},
        {"type": "report", "step": 2**63 + 2, "metric": 0.5},
        {"type": "report", "step": 2, "metric": 0.5},
        {"type": "done", "step": HUGE},
        {"type": "sigterm_handler_reset", "step": 2, "handler": "SIG_IGN"},  # the SDK's warning
    ]
    book._read_progress(t, t.life, 10.0)

    assert [(o.step, o.metric) for o in store.observations(t.trial_id)] == [(1, 0.25), (2, 0.5)]
    row = store.get_trial(t.trial_id)
    assert (row.step, row.checkpoint_step, row.metric) == (2, 0, 0.5)
    assert (t.step, t.checkpoint_step, t.life.finished_at) == (2, 0, None)
    (said,) = store.events(job_id, kind="invalid_step")
    assert said.detail == {"record": "report", "step": str(HUGE), "message": IGNORED}
    (reset,) = store.events(job_id, kind="sigterm_handler_reset")
    assert (reset.detail["step"], reset.detail["handler"]) == (2, "SIG_IGN")
    store.close()


def test_a_drain_that_cannot_close_one_trial_closes_the_others_and_says_so(
    tmp_path: Path,
) -> None:
    store, job_id = _store(tmp_path)
    bad, good, done = (_trial(store, job_id, n) for n in range(3))
    bad.step, good.step = HUGE, 3  # the state an unchecked report left
    done.phase, done.state = Phase.DONE, "completed"
    book = Book(store, job_id, [bad, good, done])

    failed = book._drain(book.backend)  # type: ignore[arg-type]

    assert isinstance(failed, OverflowError)
    assert book.closed == 1  # the backend is closed all the same
    rows = {r.id: r for r in store.list_trials(job_id)}
    assert rows[good.trial_id].state == "cancelled" and rows[good.trial_id].step == 3
    assert rows[bad.trial_id].state == "cancelled"  # its record ended with what it could keep
    assert rows[bad.trial_id].ended_at is not None and rows[bad.trial_id].step == 0
    assert rows[done.trial_id].state == "pending"  # not the drain's: it closes open trials
    (error,) = store.events(job_id, kind="error")
    assert error.trial_id == bad.trial_id
    assert error.detail["error"].startswith(
        f"closing trial {bad.trial_id} failed: OverflowError: Python int too large to convert "
    )
    store.close()


TRIAL = """
import json, os, time
from spotwise import sdk
with open(os.environ["SPOTWISE_EVENTS_FILE"], "a") as fh:  # what an older SDK wrote
    for rec in ({"type": "report", "step": 2**63 + 1, "metric": 0.9},
                {"type": "checkpoint", "step": 2**64, "uri": "/x", "seconds": 0.1}):
        fh.write(json.dumps({**rec, "time": time.time()}) + "\\n")
for step in range(1, sdk.steps() + 1):
    sdk.report(step, step / 100)
sdk.done(sdk.steps())
"""


def _tiny_job(tmp_path: Path) -> Path:
    write_trace(tmp_path / "trace.csv")
    (tmp_path / "trial.py").write_text(TRIAL)
    spec = spec_dict(tmp_path, command=["python", str(tmp_path / "trial.py")], steps=3)
    return write_spec(tmp_path, spec)


@pytest.mark.timeout(120)
def test_a_trial_of_an_older_sdk_reporting_a_huge_step_does_not_end_the_job(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(_tiny_job(tmp_path), db=db, run_root=tmp_path / "runs")

    assert summary["state"] == "succeeded", summary
    assert summary["best"]["metric"] == pytest.approx(0.03)
    with Store.open_existing(db) as store:
        (trial,) = store.list_trials(summary["job_id"])
        steps = [o.step for o in store.observations(trial.id)]
        said = store.events(summary["job_id"], kind="invalid_step")
    assert steps == [1, 2, 3]
    assert [e.detail["message"] for e in said] == [IGNORED]


@pytest.mark.timeout(120)
def test_a_drain_that_failed_ends_the_job_failed_and_raises_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's record is complete (ended, failed, the error said) before the error is raised:
    the CLI's exit code says an error happened, and no `cancel` is needed to end the job."""
    drain = Ledger._drain

    def failing(self: Ledger, backend: Any) -> Exception | None:
        drain(self, backend)
        return OverflowError("Python int too large to convert to SQLite INTEGER")

    monkeypatch.setattr(Ledger, "_drain", failing)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with pytest.raises(OverflowError, match="too large"):
        jobs.tune(_tiny_job(tmp_path), db=db, run_root=tmp_path / "runs")
    with Store.open_existing(db) as store:
        (job,) = store.list_jobs()
    assert job.state == "failed" and job.ended_at is not None
    assert job.error == (
        "closing a trial failed: OverflowError: Python int too large to convert to SQLite INTEGER"
    )


@pytest.mark.timeout(120)
def test_a_crash_with_a_drain_that_fails_too_raises_the_crash_and_records_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(self: TrialBook, t: TrialRun, life: Life, now: float) -> list[Any]:
        raise RuntimeError("boom in the loop")

    close = TrialBook._close_trial

    def refuse(self: TrialBook, t: TrialRun, state: str, now: float) -> None:
        if state == "cancelled":
            t.step = HUGE  # the drain's close then fails in the store
        close(self, t, state, now)

    monkeypatch.setattr(TrialBook, "_read_progress", crash)
    monkeypatch.setattr(TrialBook, "_close_trial", refuse)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with pytest.raises(RuntimeError, match="boom in the loop"):
        jobs.tune(_tiny_job(tmp_path), db=db, run_root=tmp_path / "runs")
    with Store.open_existing(db) as store:
        (job,) = store.list_jobs()
        (trial,) = store.list_trials(job.id)
    assert job.state == "failed" and job.ended_at is not None
    assert job.error is not None and job.error.startswith(
        "RuntimeError: boom in the loop; closing a trial failed: OverflowError: "
    )
    assert trial.state == "cancelled" and trial.ended_at is not None
    assert trial.step == 0
