"""review-be BE1: `spotwise cancel` of a dead job took a revoked attempt's lost progress as
the trial's step/metric, and re-added every already-recorded report as a new observation
(it read every attempt's events, not only what the dead orchestrator had not read).

Trial a: attempt 0 (l-a0, revoked) reported steps 1..30 (checkpoint 20); the orchestrator
reset the trial to its checkpoint (step 20, as TrialBook does on a revocation) and relaunched
it: attempt 1 (l-a1) reported 21..23 (its own values) and the orchestrator read them. Then the
orchestrator died. Nothing new happened after its last read.
Now: the latest attempt only, and only its reports past the row's step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import local_replay_spec, record_launch

from spotwise import jobs
from spotwise.store import Store


def _write(folder: Path, attempt: int, steps: range, value: Any, ckpt: int | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.time() - 300.0
    lines = [{"type": "report", "step": s, "metric": value(s), "time": t0 + s} for s in steps]
    if ckpt:
        lines.append({"type": "checkpoint", "step": ckpt, "seconds": 0.1})
    (folder / f"events-{attempt}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def old(s: int) -> float:
    return round(0.5 + s / 100, 4)  # attempt 0's values


def new(s: int) -> float:
    return round(0.3 + s / 100, 4)  # attempt 1's values (a different run from the checkpoint)


def _revoked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Path, str, str, float]:
    """A running local replay job whose orchestrator is gone, its one trial's attempt 0
    (``l-a0``) revoked after reporting steps 1..30 (checkpoint 20), all read by the
    orchestrator, its events file written: (db, the run folder of the trial, job, trial, now)."""
    from spotwise import release_reference

    home = tmp_path / "home"
    monkeypatch.setenv("SPOTWISE_HOME", str(home))
    monkeypatch.setattr(release_reference, "_replay_on_demand", lambda spec, job: 3.06)
    db = f"sqlite:///{tmp_path / 'state.db'}"
    now = time.time()
    with Store.open(db) as s:
        j = s.create_job("j", local_replay_spec(300.0), "job.yaml", "spot-greedy", "maximize")
        s.update_job(j.id, state="running", pid=0, heartbeat_at=now - 30.0)
        t = s.add_trial(j.id, 0, {"lr": 0.01})
        record_launch(
            s, j.id, t.id, price_per_hour=0.9, provider="local", id="l-a0", state="revoked",
            requested_at=now - 400, launched_at=now - 400, ended_at=now - 200,
            provider_instance_id="x-a0", end_reason="revoked",
        )  # fmt: skip
        for st in range(1, 31):  # what the orchestrator read of attempt 0
            s.add_observation(t.id, st, old(st), now - 300 + st)
    folder = home / "runs" / j.id / t.id
    _write(folder, 0, range(1, 31), old, 20)
    return db, folder, j.id, t.id, now


def _after_cancel(db: str, job_id: str, trial_id: str) -> tuple[Any, Any, int]:
    out = jobs.cancel(job_id, db=db)
    with Store.open_existing(db) as s:
        return out, s.get_trial(trial_id), len(s.observations(trial_id))


def test_cancel_keeps_the_trials_own_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db, folder, job_id, trial_id, now = _revoked_once(tmp_path, monkeypatch)
    with Store.open_existing(db) as s:
        record_launch(
            s, job_id, trial_id, price_per_hour=0.9, provider="local", id="l-a1",
            state="running", requested_at=now - 150, launched_at=now - 150,
            provider_instance_id="x-a1",
        )  # fmt: skip
        for st in range(21, 24):  # what the orchestrator read of attempt 1
            s.add_observation(trial_id, st, new(st), now - 100 + st)
        s.update_trial(
            trial_id, state="running", step=23, metric=new(23), checkpoint_step=20,
            best_metric=old(30), revocations=1,
        )  # fmt: skip
        n_obs_before = len(s.observations(trial_id))
    _write(folder, 1, range(21, 24), new, None)

    out, row, n_obs_after = _after_cancel(db, job_id, trial_id)
    assert out["state"] == "cancelled" and row.state.value == "cancelled"
    assert row.checkpoint_step == 20
    assert (row.step, row.metric) == (23, new(23)), "the trial's own progress"
    assert n_obs_after == n_obs_before, "nothing new was reported after the last read"


def test_a_revoked_latest_attempt_not_yet_relaunched_is_not_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review-bg BG3: the orchestrator handled attempt 0's revocation (the trial back at its
    checkpoint, step 20, `waiting`) and died before the relaunch; the cancel read that attempt,
    the latest, and added its lost steps 21..30 again, setting the trial's step to 30. A life
    whose record its orchestrator closed had its exit read: nothing of it is read back."""
    db, _, job_id, trial_id, _ = _revoked_once(tmp_path, monkeypatch)
    with Store.open_existing(db) as s:
        s.update_trial(
            trial_id, state="waiting", step=20, metric=old(20), checkpoint_step=20,
            best_metric=old(30), revocations=1,
        )  # fmt: skip
        n_before = len(s.observations(trial_id))

    _, row, n_after = _after_cancel(db, job_id, trial_id)
    assert n_after == n_before
    assert (row.state.value, row.step, row.checkpoint_step) == ("cancelled", 20, 20)
