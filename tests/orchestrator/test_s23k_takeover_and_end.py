"""A running tune taken over by another process, a signal as its end is written, and a cancel
heard only at its end.

* review-az AZ5: the orchestrator heard only a terminal state in its row, not another process
  taking the job over (a `spotwise resume` in the window of a cancel's request, or of a frozen
  orchestrator force-cancelled): both ran the job, and this one's end (``succeeded``) was
  written over the other's running row, its totals every 2 s before that. Now it compares the
  row's pid, host and process start with its own: another's stops it as a cancel does (its
  lives billed once, exit 130), and it writes nothing more to the job's row.
* review-ba BA4 (F4): the signal handlers were put back before the job's end was written: a
  second Ctrl-C or a SIGTERM just after the drain killed tune and left a billed job
  ``running``. They are put back once the end and the records' totals are written.
* review-az AZ8 (a guard): a cancel written while the run drains, every trial completed, is the
  row's state, and tune's summary and exit code say so (``cancelled``, 130).

Real tunes on the replayed local market (tiny trials: no torch), through the CLI for the exit
code; a few wall seconds each."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_orchestrator import TINY, spec_dict, write_spec, write_trace
from typer.testing import CliRunner

from spotwise.cli.app import app
from spotwise.planner.orchestrator import Orchestrator
from spotwise.store import Store
from spotwise.store.models import TERMINAL_INSTANCE_STATES


def _tune(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: int, trials: int
) -> tuple[str, Any]:
    write_trace(tmp_path / "trace.csv")
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    spec = spec_dict(
        tmp_path,
        command=["python", str(TINY)],
        steps=steps,
        trials=trials,
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


OTHER = {"pid": 99999, "host": "build-box-3", "pid_start": "pid:[9]|boot:9"}


def test_a_run_another_process_took_over_stops_and_leaves_the_row_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another orchestrator claims the job (as `spotwise resume` does, then its own
    `running`) while two trials run here, its totals $7. This run ran every trial and wrote
    `succeeded`, its end and its totals over the other's row, exit 0."""
    db, run = _tune(tmp_path, monkeypatch, steps=40, trials=4)
    took: list[float] = []

    def other_process() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not took:
            time.sleep(0.05)
            try:
                with Store.open_existing(db) as s:
                    (job,) = s.list_jobs() or [None]
                    if job is None or not any(
                        i.state == "running" for i in s.list_instances(job.id)
                    ):
                        continue
                    s.update_job(job.id, state="running", ended_at=None, cost_usd=7.0, **OTHER)
                    took.append(time.time())
            except Exception:  # no database yet
                continue

    taker = threading.Thread(target=other_process)
    taker.start()
    res = run()
    taker.join()
    assert took, res.output
    assert res.exit_code == 130, res.output
    out = json.loads(res.stdout)
    assert out["state"] == "cancelled"
    assert out["error"].startswith(
        "another process (pid 99999 on build-box-3) took the job over while this run was "
        "running: this run stopped"
    )
    job, trials, lives = _row(db)
    # the row is the other's: its state, pid, totals; no end written over it
    assert (job.state.value, job.pid, job.host, job.pid_start) == ("running", *OTHER.values())
    assert (job.ended_at, job.error, job.cost_usd) == (None, None, 7.0)
    assert len(trials) == 2  # no trial made after it was taken over
    assert lives and all(i.state in TERMINAL_INSTANCE_STATES for i in lives)  # released
    assert all(i.extra_bills_json is None for i in lives)  # each billed once
    assert out["cost_usd"] == pytest.approx(sum(i.cost_usd or 0.0 for i in lives))
    assert out["cost_usd"] > 0


class _Terminated(Exception):
    pass


@pytest.mark.parametrize("when", ["_finish_job", "_cost_to_records"])
def test_a_sigterm_as_the_end_is_written_does_not_leave_the_job_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """BA4: the handler tune found (here the test's, raising) was back before the end was
    written: the SIGTERM killed it there, the billed job left `running`."""
    import os

    db, run = _tune(tmp_path, monkeypatch, steps=3, trials=2)
    real = getattr(Orchestrator, when)
    sent: list[str] = []

    def signalled(self: Orchestrator, *a: Any) -> Any:
        sent.append(when)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered here, before the write
        return real(self, *a)

    def raise_terminated(signum: int, frame: Any) -> None:
        raise _Terminated("SIGTERM reached the handler tune found")

    monkeypatch.setattr(Orchestrator, when, signalled)
    old = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        res = run()
    finally:
        back = signal.signal(signal.SIGTERM, old)
    assert sent == [when]
    assert back is raise_terminated  # tune put the handler it found back, after the end
    assert not isinstance(res.exception, _Terminated), res.output
    assert res.exit_code == 0, res.output
    job, _, lives = _row(db)
    assert (job.state.value, job.error) == ("succeeded", None)
    assert job.ended_at is not None
    assert lives and all(i.state in TERMINAL_INSTANCE_STATES for i in lives)
    assert job.cost_usd == pytest.approx(sum(i.cost_usd or 0.0 for i in lives))


def test_a_cancel_heard_only_at_the_end_is_what_tune_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AZ8 (a guard: it held before too): the request is written as the drain starts, every
    trial completed; the end keeps the row's `cancelled` and tune's summary reads the row."""
    db, run = _tune(tmp_path, monkeypatch, steps=3, trials=2)
    real = Orchestrator._drain

    def request_then_drain(self: Orchestrator, backend: Any) -> Any:
        with Store.open_existing(db) as s:
            s.update_job(self.job_id, state="cancelled", ended_at=None)
        return real(self, backend)

    monkeypatch.setattr(Orchestrator, "_drain", request_then_drain)
    res = run()
    assert res.exit_code == 130, res.output
    out = json.loads(res.stdout)
    job, trials, _ = _row(db)
    assert out["state"] == job.state.value == "cancelled"
    assert job.ended_at is not None and job.best_trial_id is not None
    assert [t.state.value for t in trials] == ["completed", "completed"]
