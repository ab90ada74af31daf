"""`spotwise cancel`: a running job stops with its trials checkpointed; a dead one is closed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_helpers import record_launch, run_cli

from spotwise import jobs
from spotwise.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTWISE_")}
    env["SPOTWISE_DB"] = f"sqlite:///{tmp_path / 'state.db'}"
    env["SPOTWISE_HOME"] = str(tmp_path / "home")
    return env


def test_cancel_running_job_checkpoints_and_leaves_nothing(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "examples/digits/job.yaml").read_text())
    data.update(trials=50, steps=400, parallel=2)  # far longer than the test waits
    data["command"] = [sys.executable, str(ROOT / "examples/digits/train.py")]
    data["checkpoint"] = {"location": str(tmp_path / "ckpt"), "every": 5}
    data["providers"][0]["replay"]["speedup"] = 10  # no revocation while we wait
    spec = tmp_path / "long.yaml"
    spec.write_text(yaml.safe_dump(data))
    env = _env(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "spotwise.cli.app", "tune", str(spec), "--json"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    db = env["SPOTWISE_DB"]
    try:
        deadline = time.monotonic() + 120
        job_id = None
        while time.monotonic() < deadline:  # wait until both trials have reported progress
            if (tmp_path / "state.db").exists():
                out = jobs.status(None, db=db)
                if out["jobs"]:
                    job_id = out["jobs"][0]["job_id"]
                    rows = jobs.trials(job_id, db=db)["trials"]
                    if len(rows) == 2 and all(r["step"] >= 6 for r in rows):
                        break
            time.sleep(0.5)
        assert job_id is not None, proc.stderr.read() if proc.poll() is not None else "no job"
        # a running job's spend is in the store as it happens (it read $0 until the end)
        spend = 0.0
        for _ in range(40):
            spend = jobs.status(job_id, db=db)["cost_usd"]
            if spend > 0:
                break
            time.sleep(0.25)
        assert spend > 0
        done = run_cli("cancel", job_id, "--json", env=env, timeout=90)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["state"] == "cancelled"
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    summary = json.loads(proc.stdout.read().strip().splitlines()[-1])
    assert summary["state"] == "cancelled"
    store = Store.open_existing(db)
    trials = store.list_trials(job_id)
    assert trials and all(t.state.value == "cancelled" for t in trials)
    assert all(t.checkpoint_step > 0 for t in trials)  # stopped at a checkpoint, not killed
    assert store.list_instances(job_id, active_only=True) == []
    assert all(i.ended_at is not None for i in store.list_instances(job_id))
    store.close()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path / "ckpt") not in ps  # no trial process left behind


def _holding_one_local_instance(
    db: str, spec: str, pid: int, **instance: Any
) -> tuple[str, str, str]:
    """A job of ``spec`` (JSON) recorded as running under ``pid``, with one running trial and
    the record of one running local instance (``instance``: more columns for it); returns the
    job's, the trial's and the launch's ids."""
    with Store.open(db) as s:
        job = s.create_job("x", spec, "job.yaml", "spot-greedy", "maximize")
        s.update_job(job.id, state="running", pid=pid)
        trial = s.add_trial(job.id, 0, {"lr": 0.1})
        s.update_trial(trial.id, state="running")
        row = record_launch(s, job.id, trial.id, provider="local", price_per_hour=1.0)
        s.update_instance(row.id, state="running", **instance)
    return job.id, trial.id, row.id


def test_cancel_job_whose_orchestrator_died(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    from spotwise.spec import load_spec

    spec = load_spec(ROOT / "examples/digits/job.yaml").model_dump_json()
    job, trial, launch = _holding_one_local_instance(  # under a pid of no process
        db, spec, 2**22 + 12345, launched_at=time.time() - 2.0
    )
    with Store.open_existing(db) as s:  # its last report, a second after the launch
        s.add_observation(trial, 1, 0.5, time.time() - 1.0, instance_id=launch)

    # `status` says the orchestrator is gone and what to run (it said "running", no hint)
    assert jobs.status(job, db=db)["orchestrator"] == "gone"
    from rich.console import Console

    from spotwise.cli import render

    console = Console(width=200, record=True, color_system=None)
    render.console, saved = console, render.console
    try:
        render.print_status(jobs.status(job, db=db))
    finally:
        render.console = saved
    assert (
        "its orchestrator is no longer running (it crashed or was killed): "
        f"`spotwise cancel {job}` releases what it still holds"
    ) in console.export_text()

    out = jobs.cancel(job, db=db)
    assert out["state"] == "cancelled" and out["cancelled"]
    assert "orchestrator" not in jobs.status(job, db=db)
    store = Store.open_existing(db)
    assert store.get_job(job).state.value == "cancelled"
    assert store.get_trial(trial).state.value == "cancelled"
    inst = store.get_instance(launch)
    assert inst.end_reason == "reconciled" and inst.ended_at is not None
    # review: after a kill -9 and cancel, trials read $0 while their instances were billed
    assert inst.cost_usd > 0 and store.get_trial(trial).cost_usd == inst.cost_usd
    store.close()


def _cloud_job(
    tmp_path: Path, host: str | None, rows: list[dict], provider: dict | None = None
) -> tuple[str, str]:
    """A job on ``provider`` (default: AWS) in the store, recorded as running under pid 0
    (never alive) on ``host``, with one trial and launch record per ``rows`` entry."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    from spotwise.spec import parse_spec

    cloud = {"name": "aws", "regions": ["us-east-1"]}
    spec = parse_spec(
        {
            "name": "j",
            "command": ["python", "train.py"],
            "metric": {"name": "acc"},
            "steps": 3,
            "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}},
            "providers": [provider or cloud],
            **({} if provider else {"checkpoint": {"location": "s3://bucket/ckpt"}}),
        }
    ).model_dump_json()
    with Store.open(db) as s:
        job = s.create_job("j", spec, "job.yaml", "spot-greedy", "maximize")
        s.update_job(job.id, state="running", pid=0, host=host, cost_usd=0.123)
        for n, row in enumerate(rows):
            t = s.add_trial(job.id, n, {"lr": 0.1})
            record_launch(s, job.id, t.id, price_per_hour=0.9, **row)
    return db, job.id


def test_cancel_bills_what_no_life_covered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead orchestrator's running instance was closed at $0, and a leftover kept the bill of
    the drain that could not terminate it: the provider billed both until now."""
    from spotwise.planner import reconcile as backend

    now = time.time()
    db, job = _cloud_job(
        tmp_path,
        None,
        [
            {"id": "l-run", "state": "running", "launched_at": now - 3600},
            {  # billed for 30 min by a drain that could not terminate it
                "id": "l-left",
                "state": "running",
                "launched_at": now - 3600,
                "market_seconds": 1800.0,
                "cost_usd": 0.45,
                "end_reason": "not terminated",
            },
            {  # a stopped VM the drain could not delete: its compute is not billed
                "id": "l-stop",
                "state": "stopping",
                "launched_at": now - 3600,
                "market_seconds": 600.0,
                "cost_usd": 0.15,
                "end_reason": "not deleted",
            },
        ],
    )
    ids = {"l-run": "i-1", "l-left": "i-2", "l-stop": "i-3"}

    def settle(
        spec: Any, job_id: str, held: list[backend.Held], spare: Any = None, **_: Any
    ) -> backend.Reconciled:
        return backend.Reconciled(
            terminated=[ids[h.launch_id] for h in held],
            records=[backend.Settled(h, backend.TERMINATED, ids[h.launch_id]) for h in held],
        )

    monkeypatch.setattr(backend, "reconcile_records", settle)
    out = jobs.cancel(job, db=db)
    assert out["state"] == "cancelled" and out["terminated_instances"] == ["i-1", "i-2", "i-3"]
    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
        assert {r.end_reason for r in rows.values()} == {"reconciled"}
        assert rows["l-run"].cost_usd == pytest.approx(0.9, abs=0.01)
        assert rows["l-left"].cost_usd == pytest.approx(0.9, abs=0.01)
        assert rows["l-left"].market_seconds == pytest.approx(3600, abs=30)
        assert rows["l-stop"].cost_usd == 0.15
        # the job's cost is its instances' again (not the running estimate it last saved)
        assert s.get_job(job).cost_usd == pytest.approx(0.9 + 0.9 + 0.15, abs=0.02)


def test_cancel_of_a_job_running_on_another_machine_needs_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a shared database, a pid recorded on another machine means nothing here: cancel
    took that orchestrator for dead and released its instances under it."""
    from spotwise.errors import ConfigError
    from spotwise.planner import reconcile as backend

    db, job = _cloud_job(tmp_path, "other-host", [])
    released: list[str] = []
    monkeypatch.setattr(
        backend,
        "reconcile_records",
        lambda spec, job_id, held, spare=None, **_: released.append(job_id) or backend.Reconciled(),
    )
    with pytest.raises(ConfigError, match=rf"^job {job} runs on other-host \(pid 0\): run") as e:
        jobs.cancel(job, db=db)
    assert e.value.hint == (
        f"if that machine is lost, `spotwise cancel --force {job}` releases the job's instances "
        "from here"
    )
    assert released == []
    assert jobs.status(job, db=db)["state"] == "running"
    out = jobs.cancel(job, db=db, force=True)
    assert out["state"] == "cancelled" and released == [job]


def test_cancel_that_times_out_says_the_job_is_still_stopping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "the orchestrator checkpointed and stopped every trial" after its wait ran out."""
    db, job = _cloud_job(tmp_path, None, [])
    monkeypatch.setattr(jobs, "orchestrator_state", lambda job: "here")
    monkeypatch.setattr(jobs.os, "kill", lambda pid, sig: None)  # it never stops
    out = jobs.cancel(job, db=db, wait_s=0.3)
    assert out == {
        "job_id": job,
        "state": "running",
        "cancelled": False,
        "stopping": True,
        "message": f"asked the orchestrator (pid 0) to stop; it is still stopping after 0.3 s: "
        f"see `spotwise status {job}`",
    }


def test_an_orchestrator_run_by_another_user_is_named_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared database: the recorded orchestrator is alive here but another user's process,
    so the signal is refused. It raised a bare PermissionError; the job is left as it is."""
    from spotwise.errors import ConfigError

    db, job = _cloud_job(tmp_path, None, [])
    monkeypatch.setattr(jobs, "orchestrator_state", lambda job: "here")

    def refuse(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(jobs.os, "kill", refuse)
    with pytest.raises(ConfigError, match=r"runs as another user of this machine: cancel it as"):
        jobs.cancel(job, db=db, wait_s=0.3)
    assert jobs.status(job, db=db)["state"] == "running"


@pytest.mark.parametrize("alive", [False, True])
def test_a_dead_replay_jobs_instances_are_billed_on_the_replays_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, alive: bool
) -> None:
    """`status` read the dead job's last running estimate while its instances read $0, so
    `report` and `status` disagreed; both now read the instances' bills. A trial process that
    died with its orchestrator is billed up to the job's last report (review: billed up to the
    cancel, in replayed market seconds, $0.45 became $13.89 a minute later); one still alive,
    killed by the cancel, up to the cancel."""
    from spotwise import release
    from spotwise.planner import reconcile as backend

    now = time.time()
    db, job_id = _cloud_job(
        tmp_path,
        None,
        [{"id": "l-1", "state": "running", "launched_at": now - 12.0,
          "provider_instance_id": "local-1"}],
        provider={"name": "local", "replay": {"speedup": 300}},
    )  # fmt: skip
    with Store.open(db) as s:
        s.update_job(job_id, cost_usd=0.4267)  # the dead job's last running estimate
        job = s.get_job(job_id)
        (trial,) = s.list_trials(job_id)
        s.add_observation(trial.id, 3, 0.5, now - 4.0, instance_id="l-1")  # the last report
        s.add_observation(trial.id, 1, 0.4, now - 10.0, instance_id="l-1")
    monkeypatch.setattr(backend, "reconcile", lambda spec, job_id: ["local-1"] if alive else [])
    # the cancel's clock is the test's (a loaded machine took over 0.5 wall s = 150 market s)
    monkeypatch.setattr(release, "wall_now", lambda: now)
    out = jobs.cancel(job.id, db=db)
    until = (
        "now"
        if alive
        else "the job's last report, as their trial processes died with the orchestrator"
    )
    terminated = 1 if alive else 0
    assert out["message"].endswith(
        f"{terminated} tagged instance(s) terminated, 1 instance record(s) closed and billed "
        f"up to {until}"
    )
    # 8 wall s = 2400 market s at 300x to the last report; 12 wall s = 3600 to the cancel
    market_s = 3600 if alive else 2400
    with Store.open_existing(db) as s:
        row = s.get_instance("l-1")
        assert row.market_seconds == pytest.approx(market_s, abs=150)
        assert row.cost_usd == pytest.approx(market_s / 3600 * 0.9, abs=0.04)
        assert s.get_job(job.id).cost_usd == pytest.approx(row.cost_usd)
        assert s.get_trial(trial.id).cost_usd == pytest.approx(row.cost_usd)


def test_cancel_reads_a_stored_spec_that_todays_checks_would_refuse(tmp_path: Path) -> None:
    """A job recorded when `file://ckpt/sub` was accepted (read as a relative folder): a newer
    spotwise refuses that form in a new spec, but `cancel` must still read the stored one and
    release what the job holds (it used to raise, after marking the job cancelled)."""
    from spotwise.spec import parse_spec

    data = yaml.safe_load((Path(__file__).parents[2] / "examples/digits/job.yaml").read_text())
    stored = json.loads(parse_spec(data, "job.yaml").model_dump_json())
    stored["checkpoint"]["location"] = "file://ckpt/sub"
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, _, _ = _holding_one_local_instance(db, json.dumps(stored), 0, provider_instance_id="pid-1")
    out = jobs.cancel(job, db=db)
    assert (out["state"], out["cancelled"]) == ("cancelled", True)
    with Store.open_existing(db) as s:
        rows = [(r.state, r.end_reason) for r in s.list_instances(job)]
    assert rows == [("terminated", "reconciled")]


def test_cancel_of_a_dead_job_keeps_the_best_of_its_completed_trials(tmp_path: Path) -> None:
    """Review: a job killed after three trials completed read `best None` once cancelled."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    from spotwise.spec import load_spec

    spec = load_spec(ROOT / "examples/digits/job.yaml").model_dump_json()
    job, running, _ = _holding_one_local_instance(db, spec, 2**22 + 12345)  # no such process
    with Store.open_existing(db) as s:
        done = [s.add_trial(job, n, {"lr": 0.1 * n}) for n in (1, 2, 3)]
        for t, metric in zip(done, (0.91, 0.958, 0.958), strict=True):
            s.update_trial(t.id, state="completed", final_metric=metric)
        stopped = s.add_trial(job, 4, {"lr": 0.5})
        s.update_trial(stopped.id, state="stopped_early", final_metric=0.99)  # not completed

    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        after = s.get_job(job)
        assert (after.best_trial_id, after.best_metric) == (done[1].id, 0.958)  # ties: earlier
        assert s.get_trial(running).state.value == "cancelled"


def test_cancel_of_a_dead_job_completes_a_trial_that_reported_its_last_step(
    tmp_path: Path,
) -> None:
    """Review (AWS job killed as a trial reported its last step): the trial, finished with a
    metric at step 40 of 40, was marked cancelled with no result and the job's best was None."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    from spotwise.spec import load_spec

    spec = load_spec(ROOT / "examples/digits/job.yaml")  # steps: 40
    assert spec.steps == 40
    job, finished, _ = _holding_one_local_instance(db, spec.model_dump_json(), 2**22 + 12345)
    with Store.open_existing(db) as s:
        for step, metric in ((20, 0.90), (40, 0.95)):
            s.add_observation(finished, step, metric, wall_time=time.time())
        short = s.add_trial(job, 1, {"lr": 0.2})  # got to step 30 only
        s.update_trial(short.id, state="running")
        s.add_observation(short.id, 30, 0.99, wall_time=time.time())
        invalid = s.add_trial(job, 2, {"lr": 0.3})  # its last step diverged (an infinite loss)
        s.update_trial(invalid.id, state="running")
        s.add_observation(invalid.id, 40, float("inf"), wall_time=time.time())

    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        done = s.get_trial(finished)
        assert (done.state.value, done.final_metric, done.step) == ("completed", 0.95, 40)
        assert s.get_trial(short.id).state.value == "cancelled"
        assert s.get_trial(invalid.id).state.value == "cancelled"
        after = s.get_job(job)
        assert (after.best_trial_id, after.best_metric) == (finished, 0.95)


def test_a_dead_replay_jobs_life_that_never_reported_is_billed_its_minimum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review-ac F3: a trial process that died with its orchestrator before its first report
    is billed up to its start, 0 s: it was closed at $0 although the life started, and AWS
    (whose rule the replay bills by) charges a started instance at least 60 s."""
    from spotwise import costs
    from spotwise.planner import reconcile as backend

    now = time.time()
    db, job_id = _cloud_job(
        tmp_path,
        None,
        [{"id": "l-1", "state": "running", "launched_at": now - 3.0,
          "provider_instance_id": "local-1"}],
        provider={"name": "local", "replay": {"speedup": 300}},
    )  # fmt: skip
    monkeypatch.setattr(backend, "reconcile", lambda spec, job_id: [])  # died with it
    out = jobs.cancel(job_id, db=db)
    assert out["billed_to"] == (
        "their start (no report was recorded), as their trial processes died with the orchestrator"
    )
    minimum_usd = 60 * 0.9 / 3600
    with Store.open_existing(db) as s:
        row = s.get_instance("l-1")
        assert (row.market_seconds, row.end_reason) == (0.0, "reconciled")
        assert row.cost_usd == pytest.approx(minimum_usd)  # was $0
        assert s.get_job(job_id).cost_usd == pytest.approx(minimum_usd)
        (trial,) = s.list_trials(job_id)
        assert trial.cost_usd == pytest.approx(minimum_usd)
    # $ and the hours it is for agree (`now`: the cancel's bills, just written, included)
    report = costs.report(db=db, since="all", until="now")
    assert report["replay"]["totals"]["billed_hours"] == pytest.approx(60 / 3600)
