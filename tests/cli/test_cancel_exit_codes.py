"""Instances carrying a job's tags that it did not launch, left running (``not_ours``), are
seen by the exit code and by every answer (review-aa F5): `cancel` exits 4 when it did its work
and left such instances (1, an instance it could not confirm released, wins; 3 is no such
job), `tune`/`resume` exit 4 when nothing else set a code; the running-orchestrator path of
`cancel` and `tune`'s summary (text and --json) name the drain's ``not_ours`` events, which
only the store held."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from spotwise import jobs
from spotwise.cli import jobs as cli_jobs
from spotwise.cli import render
from spotwise.cli.app import app
from spotwise.planner.job_summary import JobSummary
from spotwise.store import Store

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from shared_helpers import running_local_job  # noqa: E402 (needs the path above)

LINE = "i-0c0c carries job {job}'s tags but was not launched by it: left alone (copied tags)"


def _job(db: str) -> str:
    return running_local_job(db)


def _cli_cancel(monkeypatch: pytest.MonkeyPatch, out: dict[str, Any]) -> Any:
    monkeypatch.setattr(jobs, "cancel", lambda job, **kw: {"job_id": job, **out})
    return CliRunner().invoke(app, ["cancel", "j-1"])


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ({"not_ours": ["i-2 carries ..."]}, 4),
        ({"not_ours": ["i-2 carries ..."], "open_instances": ["i-1"]}, 1),  # 1 wins
        ({"open_instances": ["i-1"]}, 1),
        ({"not_ours": []}, 0),
    ],
)
def test_cancel_exit_code(
    monkeypatch: pytest.MonkeyPatch, answer: dict[str, Any], code: int
) -> None:
    res = _cli_cancel(monkeypatch, {"state": "cancelled", "message": "m", **answer})
    assert res.exit_code == code, res.output


def test_cancels_help_lists_its_exit_codes() -> None:
    res = CliRunner().invoke(app, ["cancel", "--help"], env={"COLUMNS": "200"})
    text = " ".join(res.output.split())
    assert "Exit codes: 0 done. 1: an instance could not be confirmed released" in text
    assert "2: refused, nothing done" in text
    assert (
        "4: done, but instances carrying the job's tags that it did not launch were left "
        "running, each named in the answer (1 wins over 4)"
    ) in text
    assert "3: no such job (or a job-id prefix that matches several), or no database." in text


def test_cancel_of_a_running_orchestrator_names_what_its_drain_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain wrote ``not_ours`` events; cancel said only "checkpointed and stopped"."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    job = _job(db)
    line = LINE.format(job=job)
    with Store.open_existing(db) as s:  # named before the cancel: not this drain's
        s.add_event(job, "not_ours", 10.0, instance="i-0a0a", message="i-0a0a: an earlier one")
    signals: list[int] = []

    def orchestrator_drains(pid: int, sig: int) -> None:  # the orchestrator, on SIGTERM
        signals.append(sig)
        with Store.open_existing(db) as s:
            s.add_event(job, "not_ours", 20.0, instance="i-0c0c", message="first look")
            s.add_event(job, "not_ours", 20.0, instance="i-0c0c", message=line)  # its sweep
            s.update_job(job, state="cancelled")

    monkeypatch.setattr(jobs, "orchestrator_state", lambda job: "here")
    monkeypatch.setattr(jobs.os, "kill", orchestrator_drains)

    out = jobs.cancel(job, db=db, wait_s=5)

    assert len(signals) == 1 and out["cancelled"] is True
    assert out["not_ours"] == [line]
    assert out["message"] == f"the orchestrator checkpointed and stopped every trial; {line}"

    with Store.open_existing(db) as s:
        s.update_job(job, state="running")
    res = CliRunner().invoke(app, ["cancel", job, "--db", db, "--json"])
    assert res.exit_code == 4, res.output
    assert json.loads(res.output)["not_ours"] == [line]


class _Run(JobSummary):
    """What :meth:`JobSummary.summary` reads of an orchestrator that ran from market time 100."""

    def __init__(self, store: Any, job_id: str) -> None:
        self.store, self.job_id, self.started_at = store, job_id, 100.0
        self.spec: Any = SimpleNamespace(trials=1, metric=SimpleNamespace(direction="maximize"))
        self.policy: Any = SimpleNamespace(name="spot-greedy")
        self.trials, self.resume, self.leftover_ids = [], None, []
        self.spent_usd = self.on_demand_usd = 0.0
        self.revocations = self.migrations = self.early_stopped = 0


def test_tunes_summary_names_the_instances_its_drain_left_alone(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    job = _job(db)
    with Store.open_existing(db) as s:
        s.add_event(job, "not_ours", 50.0, instance="i-old", message="a run before this one")
        s.add_event(job, "not_ours", 120.0, instance="i-1", message="i-1: first look")
        s.add_event(job, "not_ours", 130.0, instance="i-2", message="i-2 carries ...")
        s.add_event(job, "not_ours", 130.0, instance="i-1", message="i-1 carries ...")
        s.add_event(job, "error", 130.0, error="not this")
        summary = _Run(s, job).summary(1.0)
    assert summary["not_ours"] == ["i-1 carries ...", "i-2 carries ..."]


def test_a_summary_with_nothing_left_alone_has_no_not_ours(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    job = _job(db)
    with Store.open_existing(db) as s:
        assert "not_ours" not in _Run(s, job).summary(1.0)


SUMMARY = {
    "job_id": "j-1234abcd",
    "state": "succeeded",
    "policy": "spot-greedy",
    "best": None,
    "trials": 1,
    "completed": 1,
    "revocations": 0,
    "migrations": 0,
    "early_stopped": 0,
    "cost_usd": 0.1,
    "on_demand_cost_usd": 0.3,
    "wall_seconds": 2.0,
    "limits": {},
    "not_ours": ["i-9 carries job j-1234abcd's tags but was not launched by it: left alone [x]"],
}


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({}, 4),
        ({"state": "cancelled"}, 130),  # what already set a code keeps it
        ({"state": "failed"}, 1),
        ({"leftover_instances": ["i-1"]}, 1),
        ({"not_ours": []}, None),
    ],
)
def test_tunes_exit_code_when_its_drain_left_instances_alone(
    extra: dict[str, Any], code: int | None, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = {**SUMMARY, **extra}
    if code is None:
        cli_jobs._run_live(lambda **kw: summary, json_out=True)
    else:
        with pytest.raises(typer.Exit) as e:
            cli_jobs._run_live(lambda **kw: summary, json_out=True)
        assert e.value.exit_code == code
    assert json.loads(capsys.readouterr().out)["not_ours"] == summary["not_ours"]


def test_tunes_text_summary_shows_each_line(monkeypatch: pytest.MonkeyPatch) -> None:
    console = Console(width=200, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    render.print_summary(SUMMARY)
    assert SUMMARY["not_ours"][0] in console.export_text()  # markup in it printed as is


def test_cancel_of_a_running_orchestrator_names_what_its_drain_could_not_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain could not terminate an instance (its record stays open, it may be billed):
    cancel said "checkpointed and stopped every trial" and exited 0."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    job = _job(db)
    with Store.open_existing(db) as s:
        trial = s.add_trial(job, 0, {"lr": 0.1})
        for launch, state in (("l-held", "running"), ("l-done", "terminated")):
            s.record_launch(
                job_id=job,
                trial_id=trial.id,
                provider="aws",
                region="us-east-1",
                zone="us-east-1a",
                instance_type="p3.2xlarge",
                market="spot",
                offer_key="k",
                price_per_hour=1.0,
                id=launch,
            )
            s.update_instance(launch, state=state, provider_instance_id=f"i-{launch}")

    def orchestrator_drains(pid: int, sig: int) -> None:
        with Store.open_existing(db) as s:
            s.update_job(job, state="cancelled")

    monkeypatch.setattr(jobs, "orchestrator_state", lambda job: "here")
    monkeypatch.setattr(jobs.os, "kill", orchestrator_drains)

    out = jobs.cancel(job, db=db, wait_s=5)
    assert out["cancelled"] is True and out["open_instances"] == ["i-l-held"]
    assert out["message"] == (
        "the orchestrator checkpointed and stopped every trial; 1 instance(s) its drain could "
        f"not confirm released, may still be billed: i-l-held (run `spotwise cancel {job}` again)"
    )
    with Store.open_existing(db) as s:
        s.update_job(job, state="running")
    assert CliRunner().invoke(app, ["cancel", job, "--db", db]).exit_code == 1


def test_cancel_that_gave_up_waiting_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestrator was still stopping when the wait ended: not done, yet it exited 0."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    job = _job(db)
    monkeypatch.setattr(jobs, "orchestrator_state", lambda job: "here")
    monkeypatch.setattr(jobs.os, "kill", lambda pid, sig: None)  # it never stops
    monkeypatch.setattr(jobs.time, "sleep", lambda s: None)
    clock = itertools.count(0.0, 60.0)  # a minute per read: the wait ends on its second
    monkeypatch.setattr(jobs.time, "monotonic", lambda: next(clock))
    res = CliRunner().invoke(app, ["cancel", job, "--db", db, "--json"])
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert (out["cancelled"], out["stopping"]) == (False, True)
    assert "is still stopping after" in out["message"]
