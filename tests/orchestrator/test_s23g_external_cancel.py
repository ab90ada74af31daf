"""A cancel written to a running job's row by another process reaches its orchestrator
(review-ax AX1, AX5; review-aw F2).

A tune heard of a cancel only through SIGTERM on its own machine: a cancel written to a shared
database (`cancel --force` from another machine, one that took it for gone in the moment it
was `pending` with no pid) was invisible, and it ran every trial and wrote `succeeded` over
`cancelled`. Now it reads its job's state with each totals' save (every ~2 wall s) and takes a
state another process closed for its own cancel (trials stopped, each life billed once by its
drain, exit 130); its `running` and its end are written only over the state it knew. A SIGTERM
just after the job's row is created ends it cancelled too (it died rc -15, the row `pending`).

Real tunes on the replayed local market (tiny trials: no torch), through the CLI for the exit
code; each a few wall seconds."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_orchestrator import TINY, spec_dict, write_spec, write_trace
from typer.testing import CliRunner

from spotwise import jobs
from spotwise.cli.app import app
from spotwise.store import Store
from spotwise.store.models import TERMINAL_INSTANCE_STATES


def _tune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    write_trace(tmp_path / "trace.csv")
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    spec = spec_dict(
        tmp_path,
        command=["python", str(TINY)],
        steps=40,
        trials=4,
        parallel=2,
        env={"TINY_TRIAL_STEP_S": "0.1"},
    )
    path = write_spec(tmp_path, spec)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    return db, lambda: CliRunner().invoke(app, ["tune", str(path), "--db", db, "--json"])


def _row(db: str) -> tuple[Any, list[Any], list[Any]]:
    with Store.open_existing(db) as s:
        (job,) = s.list_jobs()
        return job, s.list_trials(job.id), s.list_instances(job.id)


def test_a_cancel_written_to_the_row_stops_the_running_tune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `spotwise cancel` from another machine writes it (or a `--force` that took the job
    for lost): state `cancelled` while a trial runs. It ran all 4 trials and ended
    `succeeded`, exit 0."""
    db, run = _tune(tmp_path, monkeypatch)
    wrote: list[float] = []

    def other_machine() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not wrote:
            time.sleep(0.05)
            try:
                with Store.open_existing(db) as s:
                    (job,) = s.list_jobs() or [None]
                    if job is None or not any(
                        i.state == "running" for i in s.list_instances(job.id)
                    ):
                        continue
                    s.update_job(job.id, state="cancelled", ended_at=None)
                    wrote.append(time.time())
            except Exception:  # no database yet
                continue

    canceller = threading.Thread(target=other_machine)
    canceller.start()
    res = run()
    canceller.join()
    assert wrote, res.output
    assert res.exit_code == 130, res.output
    out = json.loads(res.stdout)
    assert out["state"] == "cancelled"
    job, trials, lives = _row(db)
    assert (job.state.value, job.error) == ("cancelled", None)
    assert job.ended_at is not None and job.ended_at >= wrote[0]  # its own end, written after
    assert len(trials) == 2  # the two running ones: no trial made after the cancel
    assert {t.state.value for t in trials} <= {"cancelled", "completed"}
    assert all(t.state.value != "completed" for t in trials)  # 40 steps x 0.1 s: still running
    assert lives and all(i.state in TERMINAL_INSTANCE_STATES for i in lives)
    assert all(i.extra_bills_json is None for i in lives)  # each billed once, by its drain
    assert job.cost_usd == pytest.approx(sum(i.cost_usd or 0.0 for i in lives))
    assert job.cost_usd > 0


def test_a_cancel_of_the_pending_job_is_heard_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AX5: between the job's row (`pending`, no pid) and its `running`, a cancel takes its
    orchestrator for gone and marks it cancelled; the orchestrator wrote `running` over that
    and ran the whole job. Now its `running` is written only over `pending`: it hears the
    cancel, launches nothing, and ends cancelled (exit 130)."""
    db, run = _tune(tmp_path, monkeypatch)
    create = Store.create_job
    answers: list[dict[str, Any]] = []

    def create_then_cancel(self: Store, *a: Any, **kw: Any) -> Any:
        job = create(self, *a, **kw)
        answers.append(jobs.cancel(job.id, db=db))  # another process, in the window
        return job

    monkeypatch.setattr(Store, "create_job", create_then_cancel)
    res = run()
    assert answers and answers[0]["state"] == "cancelled", answers
    assert res.exit_code == 130, res.output
    job, trials, lives = _row(db)
    assert job.state.value == "cancelled" and job.ended_at is not None
    assert job.error is None  # its orchestrator was alive: its own end says so
    assert (trials, lives, job.cost_usd) == ([], [], 0.0)  # nothing launched, nothing spent


class _Terminated(Exception):
    pass


def test_a_sigterm_just_after_the_job_is_created_ends_it_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review-aw F2: the signal handlers were installed after `create_job`: a SIGTERM there
    killed tune (rc -15, here the test's handler raising) and left the job `pending`."""
    db, run = _tune(tmp_path, monkeypatch)
    create = Store.create_job

    def create_then_term(self: Store, *a: Any, **kw: Any) -> Any:
        job = create(self, *a, **kw)
        os.kill(os.getpid(), signal.SIGTERM)
        return job

    def raise_terminated(signum: int, frame: Any) -> None:
        raise _Terminated("SIGTERM reached the default handling")

    monkeypatch.setattr(Store, "create_job", create_then_term)
    old = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        res = run()
    finally:
        back = signal.signal(signal.SIGTERM, old)
    assert back is raise_terminated  # tune put the handler it found back
    assert not isinstance(res.exception, _Terminated), res.output
    assert res.exit_code == 130, res.output
    job, trials, lives = _row(db)
    assert (job.state.value, job.error) == ("cancelled", None)
    assert (trials, lives) == ([], [])


def test_the_end_does_not_write_over_a_cancel_that_came_as_it_ended(tmp_path: Path) -> None:
    """AX1 (c): the end (`_finish_job`) wrote `succeeded` over the `cancelled` another process
    wrote after the run last read its row. The cancel stays; the end's totals are written."""
    from types import SimpleNamespace

    from spotwise.planner.orchestrator import Orchestrator

    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        job = s.create_job("j", "{}", "job.yaml", "spot-greedy", "maximize")
        s.update_job(job.id, state="running")
        orch = Orchestrator.__new__(Orchestrator)
        orch.store, orch.job_id, orch.trials, orch.row_state = s, job.id, [], "running"
        orch.spec = SimpleNamespace(metric=SimpleNamespace(direction="maximize"))  # type: ignore[assignment]
        orch.spent_usd, orch.on_demand_usd = 1.5, 4.0
        orch.revocations = orch.migrations = orch.early_stopped = 0
        s.update_job(job.id, state="cancelled", ended_at=None)  # another machine's cancel
        orch._finish_job("succeeded", None)
        row = s.get_job(job.id)
    assert (row.state.value, row.cost_usd, row.on_demand_cost_usd) == ("cancelled", 1.5, 4.0)
    assert row.ended_at is not None
