"""A run another process took over writes no more trial rows (s24 helper C, review-az AZ5).

Once another orchestrator holds the job (`spotwise resume` while this one was frozen or thought
lost: the job's row names its pid and host), this run stops as a cancel does, its own lives
terminated and billed once; but it also wrote the trials the other run now runs: each one
``cancelled`` with an end by its drain, and its progress (step, metric, observations) until it
heard the takeover, over the other run's rows (``spotwise status`` showed them wrong, and an end
the other run wrote first was lost). Now it writes none: once it has heard the takeover, and
also before (every trial write is a compare-and-set on the job's owner, so a takeover that
lands just after the run last read the row is found by the write itself).

Real tunes on the replayed local market (tiny trials: no torch), through the CLI; the takeover
is written at a chosen point of the run (deterministic), as the other run would have: the job's
row (its pid, host, ``running``) and the trials it runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_orchestrator import TINY, spec_dict, write_spec, write_trace
from typer.testing import CliRunner

from spotwise.cli.app import app
from spotwise.planner.orchestrator import Orchestrator
from spotwise.providers.local import LocalProvisioner
from spotwise.store import Store
from spotwise.store.models import TERMINAL_INSTANCE_STATES

STEPS = 100  # 5 wall s a trial: the takeover comes well before its end
OTHER = {"pid": 99999, "host": "build-box-3", "pid_start": "pid:[9]|boot:9"}
# the other run's rows: one trial it runs (from its checkpoint), one it has finished already
RUNNING = {"state": "running", "step": 2, "metric": 0.02, "best_metric": 0.02, "ended_at": None}
ENDED = {"state": "completed", "step": STEPS, "final_metric": 0.6, "ended_at": 1234.5}


def _tune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    write_trace(tmp_path / "trace.csv")
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    spec = spec_dict(
        tmp_path,
        command=["python", str(TINY)],
        steps=STEPS,
        trials=2,
        parallel=2,
        env={"TINY_TRIAL_STEP_S": "0.05"},
    )
    path = write_spec(tmp_path, spec)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    return db, lambda: CliRunner().invoke(app, ["tune", str(path), "--db", db, "--json"])


def _take_over(db: str) -> dict[str, Any]:
    """Write what the other run holds: the job's row (its pid, host, ``running``) and its two
    trials (one running at step 2, one completed); return the observations each trial had."""
    with Store.open_existing(db) as s:
        (job,) = s.list_jobs()
        s.update_job(job.id, state="running", ended_at=None, **OTHER)
        first, second = sorted(s.list_trials(job.id), key=lambda t: t.id)
        s.update_trial(first.id, **RUNNING)
        s.update_trial(second.id, **ENDED)
        return {t.id: len(s.observations(t.id)) for t in (first, second)}


def _check(db: str, res: Any, seen: dict[str, Any]) -> None:
    """The run stopped (exit 130, cancelled, the takeover its error); the trials are as the
    other run wrote them, with no observation or end event added; its lives billed once."""
    assert res.exit_code == 130, res.output
    out = json.loads(res.stdout)
    assert out["state"] == "cancelled"
    assert out["error"].startswith("another process (pid 99999 on build-box-3) took the job over")
    with Store.open_existing(db) as s:
        (job,) = s.list_jobs()
        first, second = sorted(s.list_trials(job.id), key=lambda t: t.id)
        got = {k: getattr(first, k) for k in RUNNING}
        assert {**got, "state": first.state.value} == RUNNING
        got = {k: getattr(second, k) for k in ENDED}
        assert {**got, "state": second.state.value} == ENDED
        assert {t.id: len(s.observations(t.id)) for t in (first, second)} == seen
        assert s.events(job.id, "cancelled") == []  # no trial end said by this run
        assert (job.state.value, job.pid, job.host) == ("running", 99999, "build-box-3")
        lives = s.list_instances(job.id)
    # this run's own lives: terminated, each billed once, and its cost their sum
    assert len(lives) == 2
    assert all(i.state in TERMINAL_INSTANCE_STATES and i.ended_at for i in lives)
    assert all(i.extra_bills_json is None and (i.cost_usd or 0.0) > 0 for i in lives)
    assert out["cost_usd"] == pytest.approx(sum(i.cost_usd or 0.0 for i in lives))


def test_a_takeover_heard_leaves_the_trials_to_the_other_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The takeover is written just before the run reads the job's row (its ~2 s hear), once
    both trials have reported: the run hears it there. Before, its drain closed both trials
    ``cancelled`` (the other's completed one too: its end, final metric and step overwritten)."""
    db, run = _tune(tmp_path, monkeypatch)
    real = Orchestrator._hear_cancel
    seen: dict[str, Any] = {}

    def hear(self: Orchestrator) -> None:
        if not seen and self.trials and all(t.life and t.step >= 3 for t in self.trials):
            seen.update(_take_over(db))
        real(self)

    monkeypatch.setattr(Orchestrator, "_hear_cancel", hear)
    res = run()
    assert seen, res.output
    _check(db, res, seen)


def test_a_takeover_not_heard_yet_is_found_by_the_trial_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The takeover lands after the run last read the job's row and before it writes a
    trial's progress (a report read from the provider): that write finds the row another's
    and writes nothing (compare-and-set on the owner), and the run stops at once. Before, the
    report's observation and progress went over the other's row, then the drain's end."""
    db, run = _tune(tmp_path, monkeypatch)
    real = LocalProvisioner.progress
    seen: dict[str, Any] = {}
    reports: list[str] = []  # the instance of each progress read that brought a report

    def progress(self: LocalProvisioner, instance_id: str) -> list[dict[str, object]]:
        records = real(self, instance_id)
        if any(r.get("type") == "report" for r in records):
            reports.append(instance_id)
            if len(reports) >= 4 and len(set(reports)) == 2 and not seen:  # both reported
                seen.update(_take_over(db))
        return records

    monkeypatch.setattr(LocalProvisioner, "progress", progress)
    monkeypatch.setattr(Orchestrator, "_save_and_hear", _never_heard(Orchestrator._save_and_hear))
    res = run()
    assert seen, res.output
    _check(db, res, seen)


def _never_heard(real: Any) -> Any:
    """The run's save and hear, kept from hearing a takeover (as if it came just after the
    last read, every time): only the trial writes can find it."""

    def save(self: Orchestrator, now: float) -> None:
        if self.taken_over:  # found by a write: as the real one, after hearing it
            return
        row = self.store.get_job(self.job_id)
        if row.pid == OTHER["pid"]:  # landed since the last read: not heard here
            return
        real(self, now)

    return save


def test_the_owner_checked_writes(tmp_path: Path) -> None:
    """The store's compare-and-set: written while the job's row names the owner, else not."""

    with Store.open(f"sqlite:///{tmp_path / 'o.db'}") as s:
        job = s.create_job("j", "{}", "", "asha", "maximize")
        trial = s.add_trial(job.id, 0, {})
        s.update_job(job.id, **OTHER)
        me = {**OTHER, "pid": 1}
        assert not s.update_trial_if_owner(job.id, me, trial.id, {"state": "cancelled"})
        assert not s.add_observation_if_owner(job.id, me, trial.id, 1, 0.5, 1.0)
        assert (s.get_trial(trial.id).state.value, s.observations(trial.id)) == ("pending", [])
        assert s.update_trial_if_owner(job.id, OTHER, trial.id, {"state": "running", "step": 3})
        assert s.add_observation_if_owner(job.id, OTHER, trial.id, 3, 0.5, 1.0, 9.0, "l-1")
        row = s.get_trial(trial.id)
        assert (row.state.value, row.step) == ("running", 3)
        (obs,) = s.observations(trial.id)
        assert (obs.step, obs.metric, obs.market_time, obs.instance_id) == (3, 0.5, 9.0, "l-1")


def test_a_totals_save_racing_a_takeover_leaves_the_other_runs_row(tmp_path: Path) -> None:
    """The running totals' save (it carries the heartbeat) is owner-checked too: a takeover
    landing between the run's hear and its save got this run's totals over its row once
    (test_s23k's takeover saw the other run's $7 become $0 in CI)."""
    with Store.open(f"sqlite:///{tmp_path / 'o.db'}") as s:
        job = s.create_job("j", "{}", "", "asha", "maximize")
        s.update_job(job.id, cost_usd=7.0, **OTHER)
        me = {**OTHER, "pid": 1}
        assert not s.update_job_if_owner(job.id, me, {"cost_usd": 0.0, "heartbeat_at": 5.0})
        row = s.get_job(job.id)
        assert (row.cost_usd, row.heartbeat_at, row.pid) == (7.0, None, OTHER["pid"])
        assert s.update_job_if_owner(job.id, OTHER, {"cost_usd": 7.5})
        assert s.get_job(job.id).cost_usd == 7.5
