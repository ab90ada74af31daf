"""A full checkpoint disk does not fail trials for good (review-bf BF1 (a), (b)).

* The SDK, before it raises a save's CheckpointError whose cause is this machine's storage
  (ENOSPC, EDQUOT, EROFS, EIO), writes a ``checkpoint_failed`` event naming the errno; another
  failure (a permission) writes none.
* The orchestrator does not count a trial's exit after that event as the trial's failure: the
  trial is closed ``cancelled`` (no relaunch onto the same disk, nothing told to the search),
  the job ends failed with one line naming the folder and the fix, and `spotwise resume` runs
  the trial again from its last good checkpoint. A plain crash, or one after the trial went on
  past a refused save, still counts as before.
"""

from __future__ import annotations

import csv
import errno
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from spotwise import jobs, sdk
from spotwise.checkpoint import local
from spotwise.errors import CheckpointError
from spotwise.planner import storage_full
from spotwise.planner.policy import Phase, TrialExited
from spotwise.planner.runstate import Life, TrialRun
from spotwise.planner.trialbook import MAX_FAILURES, TrialBook
from spotwise.providers.base import InstanceState, Market, Offer
from spotwise.store import Store

OFFER = Offer("local", "local", "local-a", "cpu", Market.SPOT, 0.05, 0.2)
SCRIPT = Path(__file__).parent / "scripts" / "full_disk_trial.py"
T0 = datetime(2023, 3, 1, tzinfo=UTC)
NOSPACE = os.strerror(errno.ENOSPC)


# ---- (a) the SDK says a save the storage refused ------------------------------------------
def _refuse(monkeypatch: pytest.MonkeyPatch, err: int) -> None:
    def refused(*_: Any, **__: Any) -> Any:
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(local, "create_temp", refused)


def _sdk_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("SPOTWISE_EVENTS_FILE", str(events))
    monkeypatch.setenv("SPOTWISE_CHECKPOINT_URI", str(tmp_path / "ckpt"))
    return events


def test_a_save_the_full_disk_refuses_writes_an_event_before_raising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _sdk_env(tmp_path, monkeypatch)
    _refuse(monkeypatch, errno.ENOSPC)

    with pytest.raises(CheckpointError, match="No space left on device"):
        sdk.save_checkpoint({"step": 5}, 5)

    (line,) = [json.loads(x) for x in events.read_text().splitlines()]
    assert {k: v for k, v in line.items() if k != "time"} == {
        "type": "checkpoint_failed",
        "step": 5,
        "errno": errno.ENOSPC,
        "reason": NOSPACE,
        "uri": str(tmp_path / "ckpt"),
    }


def test_a_save_refused_for_another_reason_writes_no_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _sdk_env(tmp_path, monkeypatch)
    _refuse(monkeypatch, errno.EACCES)  # a permission: not the storage being full

    with pytest.raises(CheckpointError, match="Permission denied"):
        sdk.save_checkpoint({"step": 5}, 5)

    assert not events.exists()


# ---- (b) the orchestrator: not the trial's failure ----------------------------------------
class _Search:
    def __init__(self) -> None:
        self.told: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: self.told.append(name)


class _Null:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: None


class Book(TrialBook):
    """A TrialBook with a recording store and search, the local provider's life."""

    def __init__(self, tmp_path: Path) -> None:
        self.run_dir = tmp_path / "runs" / "j-1"
        (self.run_dir / "logs").mkdir(parents=True)
        self.job_id = "j-1"
        metric = SimpleNamespace(name="score", direction="maximize")
        self.spec = SimpleNamespace(metric=metric)  # type: ignore[assignment]
        self.revocations = self.early_stopped = 0
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.store = _Null()
        self.search = _Search()  # type: ignore[assignment]

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.events.append((kind, detail))


def _running() -> TrialRun:
    t = TrialRun("t-1", 0, {}, steps_total=20, checkpoint_every=2)
    t.checkpoint_uri = "/ck/j-1/t-1"
    t.life = Life("l1", "vm-1", OFFER, 0.0, 0, 0)
    t.phase, t.state, t.step, t.furthest, t.checkpoint_step = Phase.RUNNING, "running", 4, 4, 2
    return t


def _refused(step: int = 4, err: int = errno.ENOSPC) -> dict[str, Any]:
    return {
        "type": "checkpoint_failed",
        "step": step,
        "errno": err,
        "reason": os.strerror(err),
        "uri": "/ck/j-1/t-1",
        "time": 1.0,
    }


def _take(book: Book, t: TrialRun, *records: dict[str, Any]) -> None:
    assert t.life is not None
    book.backend = _Null()  # type: ignore[assignment]
    book.backend.provisioner = type("P", (), {"progress": lambda self, iid: list(records)})()
    book._read_progress(t, t.life, 50.0)


def test_an_exit_after_a_refused_save_ends_the_job_not_the_trial(tmp_path: Path) -> None:
    book, t = Book(tmp_path), _running()
    assert t.life is not None
    t_life_id = t.life.instance_id
    _take(book, t, _refused())

    exited = book._on_exit(t, 1, InstanceState.RUNNING, 100.0)  # the pass goes on: its exits
    assert exited == TrialExited("t-1", t_life_id, False)  # are settled and billed first
    with pytest.raises(CheckpointError) as got:  # then the job ends (Ledger._settle_lives)
        storage_full.raise_if_full(book)

    said = str(got.value)
    assert said == (
        "trial t-1 could not save its checkpoint of step 4: the checkpoint folder /ck/j-1/t-1 "
        f"is full ({NOSPACE}): free space, then `spotwise resume j-1`"
    )
    assert t.failures == 0 and t.state == "cancelled" and t.phase is Phase.DONE
    assert not t.crashed and "tell_failure" not in book.search.told  # its point is no bad one
    kinds = [k for k, _ in book.events]
    assert kinds == ["checkpoint_failed", "error", "cancelled"]
    assert book.events[0][1]["errno"] == errno.ENOSPC
    assert book.events[1][1]["error"] == said and book.events[1][1]["exit_code"] == 1


@pytest.mark.parametrize(
    "records",
    [
        [],  # a plain crash
        [_refused(err=errno.EACCES)],  # a refusal that is not the storage's
        [_refused(), {"type": "report", "step": 5, "metric": 0.5, "time": 2.0}],  # went on
    ],
    ids=["plain", "not-storage", "went-on"],
)
def test_other_crashes_still_count_as_the_trials(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    book, t = Book(tmp_path), _running()
    for attempt in range(MAX_FAILURES):
        t.life = Life(f"l{attempt}", f"vm-{attempt}", OFFER, 0.0, 2, attempt)
        t.phase = Phase.RUNNING
        _take(book, t, *records)
        book._on_exit(t, 1, InstanceState.RUNNING, 100.0)
    assert t.failures == MAX_FAILURES and t.state == "failed" and t.crashed


# ---- end to end: the job ends failed, resumable; the resume runs the trial on --------------
def _tune(tmp_path: Path) -> Any:
    with (tmp_path / "trace.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["timestamp", "availability_zone", "instance_type", "spot_available",
             "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"]
        )  # fmt: skip
        for i in range(900):
            stamp = (T0 + timedelta(seconds=30 * i)).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([stamp, "us-east-1a", "p3.2xlarge", 1, "1.0", "5.0"])
    spec = {
        "name": "storage-full",
        "command": ["python", str(SCRIPT)],
        "metric": {"name": "score", "direction": "maximize"},
        "steps": 6,
        "trials": 1,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": [
            {"name": "local", "replay": {"trace": str(tmp_path / "trace.csv"), "speedup": 30.0}}
        ],
        "checkpoint": {"every": 2, "location": str(tmp_path / "ckpt")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return jobs.tune(path, db=f"sqlite:///{tmp_path / 'spotwise.db'}", run_root=tmp_path / "runs")


@pytest.mark.timeout(120)
def test_a_full_checkpoint_disk_ends_the_job_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag, starts = tmp_path / "full", tmp_path / "starts.txt"
    flag.touch()
    monkeypatch.setenv("FULL_DISK_FLAG", str(flag))
    monkeypatch.setenv("FULL_DISK_LOG", str(starts))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"

    with pytest.raises(CheckpointError) as got:
        _tune(tmp_path)

    said, job = str(got.value), got.value.job_id
    assert job is not None and "\n" not in said
    assert f"is full ({NOSPACE}): free space, then `spotwise resume {job}`" in said
    assert starts.read_text().splitlines() == ["0 0"]  # not relaunched onto the full disk
    with Store.open_existing(db) as store:
        stored = store.get_job(job)
        (trial,) = store.list_trials(job)
    assert stored.state == "failed" and stored.error == said
    assert trial.state == "cancelled" and trial.checkpoint_step == 2

    flag.unlink()  # space freed: the resume runs the trial on from its step-2 checkpoint
    again = jobs.resume(job, db=db, run_root=tmp_path / "runs")
    assert again["state"] == "succeeded" and again["completed"] == 1, again
    assert again["resumed"]["requeued_trials"] == [trial.id]
    assert starts.read_text().splitlines()[1].split()[1] == "2"
