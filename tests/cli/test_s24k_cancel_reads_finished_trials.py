"""`spotwise cancel` of a dead orchestrator's job reads the events its trials wrote after it
last read them (review-bb F3).

A cloud job's VMs run on after the orchestrator dies and finish their trials (reports, a
checkpoint and ``done`` in each trial's artifacts folder). The cancel closed every open trial
``cancelled`` at the step the dead orchestrator last read, so `status` said they got nowhere
and `spotwise resume` requeued each, launching one more VM per trial only to find its result
(one more VM life each: the provider's minimum plus boot). Now the cancel reads each open
trial's events first (the reader the orchestrator uses for another attempt's,
:func:`~spotwise.planner.trial_output.attempts_events`): a trial that reported its last step
is closed ``completed`` with that metric (the job's best), the others ``cancelled`` at the
furthest step and newest checkpoint the events name, and resume requeues only those. A folder
that cannot be read is said once in the answer; its trials are closed as before.

Two set-ups, each a real store with the job recorded as running under pid 0 (its orchestrator
gone): the local provider (the events in the trial's folder of the job's run folder, under
``$SPOTWISE_HOME/runs``), and GCP over a fake cloud (listed and terminated by a fake
provisioner; the events in the trial's artifacts folder, a ``file://`` checkpoint location as
the GCP provisioner allows).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import local_replay_spec, record_launch

from spotwise import jobs
from spotwise.errors import ProviderError
from spotwise.planner.resume import plan_resume
from spotwise.providers import registry
from spotwise.providers.base import TAG_JOB, Instance, InstanceState, Market, Offer, our_tags
from spotwise.spec import parse_spec
from spotwise.store import Store

STEPS_LOCAL = 40  # local_replay_spec's steps
STEPS = 6  # the GCP job's


def _acc(step: int) -> float:
    return round(0.5 + step / 100.0, 4)


def _events(folder: Path, attempt: int, upto: int, ckpt: int, done: bool) -> None:
    """The SDK's records of one attempt: a report per step up to ``upto`` (wall times a minute
    ago), a checkpoint at ``ckpt``, and ``done`` at ``upto`` when ``done``."""
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.time() - 60.0
    lines = [
        {"type": "report", "step": s, "metric": _acc(s), "time": t0 + s} for s in range(1, upto + 1)
    ]
    lines.insert(ckpt, {"type": "checkpoint", "step": ckpt, "seconds": 0.1})
    if done:
        lines.append({"type": "done", "step": upto})
    with open(folder / f"events-{attempt}.jsonl", "w") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in lines))


def _read_by_orchestrator(s: Store, trial: str, upto: int) -> None:
    """What the dead orchestrator had read of the trial: its reports up to ``upto``."""
    for step in range(1, upto + 1):
        s.add_observation(trial, step, _acc(step), time.time() - 120.0 + step)
    s.update_trial(trial, step=upto, metric=_acc(upto), best_metric=_acc(upto))


# ---- the local provider ---------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from spotwise import release_reference

    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(release_reference, "_replay_on_demand", lambda spec, job: 3.06)
    return tmp_path / "home"


def _dead_local_job(db: str) -> tuple[str, str, str]:
    """A local job recorded running under pid 0 with two running trials, each one life
    (``l-a``, ``l-b``), the orchestrator having read 10 steps of each (checkpoint at 10)."""
    now = time.time()
    with Store.open(db) as s:
        j = s.create_job("j", local_replay_spec(300.0), "job.yaml", "spot-greedy", "maximize")
        s.update_job(j.id, state="running", pid=0, heartbeat_at=now - 30.0)
        ids = []
        for n, lid in enumerate(("l-a", "l-b")):
            t = s.add_trial(j.id, n, {"lr": 0.01 * (n + 1)})
            s.update_trial(t.id, state="running", checkpoint_step=10)
            record_launch(
                s, j.id, t.id, price_per_hour=0.9, provider="local", id=lid, state="running",
                requested_at=now - 100.0, launched_at=now - 100.0, provider_instance_id=f"x-{lid}",
            )  # fmt: skip
            _read_by_orchestrator(s, t.id, 10)
            ids.append(t.id)
    return j.id, ids[0], ids[1]


def test_local_a_trial_that_finished_after_the_orchestrator_died_is_completed_not_requeued(
    tmp_path: Path, home: Path
) -> None:
    """Trial a wrote all 40 steps, a checkpoint at 40 and ``done`` after the orchestrator's
    last read (step 10); trial b reached step 25 (checkpoint 20). The cancel closes a
    completed at 0.9 (the job's best), b cancelled at step 25 with its checkpoint 20; resume
    requeues b alone, from step 20 (was: both cancelled at step 10, both requeued, from 10)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, a, b = _dead_local_job(db)
    _events(home / "runs" / job / a, 0, STEPS_LOCAL, STEPS_LOCAL, done=True)
    _events(home / "runs" / job / b, 0, 25, 20, done=False)

    out = jobs.cancel(job, db=db)

    with Store.open_existing(db) as s:
        ra, rb, row = s.get_trial(a), s.get_trial(b), s.get_job(job)
        curve = dict(s.curve(a))
        plan = plan_resume(s, row)
        said = s.events(job, kind="result_recovered")
    assert (ra.state.value, ra.step, ra.final_metric) == ("completed", 40, pytest.approx(0.9))
    assert ra.checkpoint_step == 40
    assert sorted(curve) == list(range(1, 41)) and curve[40] == pytest.approx(0.9)
    assert (rb.state.value, rb.step, rb.checkpoint_step) == ("cancelled", 25, 20)
    assert rb.metric == pytest.approx(0.75) and rb.final_metric is None
    assert (row.best_trial_id, row.best_metric) == (a, pytest.approx(0.9))
    assert [(e.trial_id, e.instance_id, e.detail["step"]) for e in said] == [(a, "l-a", 40)]
    # resume launches nothing for a: only b is queued again, from its newest checkpoint
    assert [t.trial_id for t in plan.requeued] == [b]
    assert plan.requeued[0].checkpoint_step == 20
    assert jobs.status(job, db=db)["completed"] == 1
    assert out["cancelled"] is True and out["errors"] == []
    said_text = "1 trial(s) finished after the orchestrator died, completed with the result in "
    assert said_text + f"their events: {a}" in out["message"]


def test_local_a_trial_whose_events_hold_nothing_new_is_cancelled_as_before(
    tmp_path: Path, home: Path
) -> None:
    """No events file in the run folder (or nothing past what was read): both trials are
    cancelled at step 10, the job has no best, and resume requeues both."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, a, b = _dead_local_job(db)
    _events(home / "runs" / job / a, 0, 10, 10, done=False)

    out = jobs.cancel(job, db=db)

    assert out["errors"] == [] and "finished after the orchestrator died" not in out["message"]
    with Store.open_existing(db) as s:
        rows = [s.get_trial(a), s.get_trial(b)]
        plan = plan_resume(s, s.get_job(job))
        assert s.get_job(job).best_trial_id is None
    assert [(r.state.value, r.step, r.checkpoint_step) for r in rows] == [("cancelled", 10, 10)] * 2
    assert sorted(t.trial_id for t in plan.requeued) == sorted([a, b])


# ---- a cloud (GCP over a fake provisioner; a file:// artifacts folder) ------------------------

T = time.time()
OFFER = Offer("gcp", "us-central1", "us-central1-a", "g2-standard-4", Market.SPOT, 0.3, 1.0)


def _gcp_spec(ckpt: str) -> str:
    return parse_spec(
        {
            "name": "j",
            "command": ["python", "train.py"],
            "metric": {"name": "acc"},
            "steps": STEPS,
            "parallel": 2,
            "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}},
            "providers": [{"name": "gcp", "regions": ["us-central1"]}],
            "checkpoint": {"location": ckpt},
        }
    ).model_dump_json()


class _Cloud:
    """A fake GCP: lists the instances given (by the job's tag), takes every terminate."""

    def __init__(self, instances: list[Instance]) -> None:
        self.instances = instances
        self.terminated: list[str] = []

    def open_provisioner(self, config: Any) -> _Cloud:
        return self

    def describe(self, tags: dict[str, str]) -> list[Instance]:
        return [i for i in self.instances if i.tags.get(TAG_JOB) == tags.get(TAG_JOB)]

    def terminate(self, ids: list[str]) -> None:
        self.terminated += ids


def _dead_cloud_job(
    db: str, ckpt: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, list[str], _Cloud]:
    """A GCP job recorded running under pid 0 with two running trials, each on its VM (one
    life each, ``vm-0``, ``vm-1``, still running), the orchestrator having read step 2 of
    each; returns the job, its trials and the fake cloud (installed)."""
    with Store.open(db) as s:
        j = s.create_job("j", _gcp_spec(ckpt), "job.yaml", "spot-greedy", "maximize")
        s.update_job(j.id, state="running", pid=0, heartbeat_at=T - 600.0)
        trials, vms = [], []
        for n in range(2):
            t = s.add_trial(j.id, n, {"lr": 0.01 * (n + 1)})
            s.update_trial(t.id, state="running")
            lid, iid = f"l-{n}", f"vm-{n}"
            record_launch(
                s, j.id, t.id, price_per_hour=0.3, provider="gcp", region="us-central1",
                zone="us-central1-a", id=lid, state="running", requested_at=T - 300.0,
                launched_at=T - 290.0, provider_instance_id=iid,
            )  # fmt: skip
            _read_by_orchestrator(s, t.id, 2)
            trials.append(t.id)
            vms.append(
                Instance(
                    iid,
                    OFFER,
                    InstanceState.RUNNING,
                    our_tags(j.id, t.id, lid),
                    launched_at=T - 290.0,
                    launch_identity=lid,
                )
            )
    cloud = _Cloud(vms)
    monkeypatch.setattr(registry, "cloud_module", lambda name: cloud)
    return j.id, trials, cloud


def test_cloud_trials_the_vms_finished_are_completed_and_resume_requeues_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case of review-bb F3: both VMs finished their trials after the orchestrator died
    (6 reports, a checkpoint at 6 and ``done`` in each artifacts folder). The cancel
    terminates both VMs and closes both trials completed with their metric at step 6; resume
    has nothing to requeue (was: both cancelled at step 2, both relaunched on new VMs only
    for ``result_recovered``)."""
    ckpt = (tmp_path / "ckpt").as_uri()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials, cloud = _dead_cloud_job(db, ckpt, monkeypatch)
    for t in trials:
        _events(tmp_path / "ckpt" / job / t, 0, STEPS, STEPS, done=True)
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path / "home"))  # the run folder: empty

    out = jobs.cancel(job, db=db)

    assert sorted(cloud.terminated) == ["vm-0", "vm-1"] and out["open_instances"] == []
    with Store.open_existing(db) as s:
        rows = [s.get_trial(t) for t in trials]
        row = s.get_job(job)
        plan = plan_resume(s, row)
    assert [(r.state.value, r.step, r.checkpoint_step) for r in rows] == [("completed", 6, 6)] * 2
    assert all(math.isclose(r.final_metric or 0.0, 0.56) for r in rows)
    assert (row.best_trial_id, row.best_metric) == (trials[0], pytest.approx(0.56))  # a tie
    assert plan.requeued == []  # resume launches no VM for them
    assert out["errors"] == []
    assert "2 trial(s) finished after the orchestrator died" in out["message"]


def test_cloud_an_unreadable_artifacts_folder_is_said_once_and_the_cancel_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The artifacts store refuses the read (a 403): the cancel still terminates both VMs and
    closes both trials cancelled at the step last recorded (2), says the folder once in its
    message (the second trial is not read: it would wait on the same store)."""
    ckpt = (tmp_path / "ckpt").as_uri()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials, cloud = _dead_cloud_job(db, ckpt, monkeypatch)
    calls: list[str] = []

    def refused(uri: str, options: Any, region: str = "") -> Any:
        calls.append(uri)
        raise ProviderError("gcp: reading gs://b/p: 403 Forbidden")

    monkeypatch.setattr("spotwise.providers.channel.open_artifacts", refused)

    out = jobs.cancel(job, db=db, run_root=tmp_path / "runs")

    assert sorted(cloud.terminated) == ["vm-0", "vm-1"] and out["cancelled"] is True
    assert len(calls) == 1  # the second trial's folder was not asked
    assert out["errors"] == []  # no instance is left open for it
    assert out["message"].count("403 Forbidden") == 1
    assert out["message"].endswith(
        f"; trial {trials[0]}'s events could not be read (file://{tmp_path}/ckpt/{job}/"
        f"{trials[0]}: gcp: reading gs://b/p: 403 Forbidden); 1 other open trial(s) not read: "
        "closed at the step last recorded"
    )
    with Store.open_existing(db) as s:
        rows = [s.get_trial(t) for t in trials]
        plan = plan_resume(s, s.get_job(job))
    assert [(r.state.value, r.step) for r in rows] == [("cancelled", 2)] * 2
    assert sorted(t.trial_id for t in plan.requeued) == sorted(trials)
