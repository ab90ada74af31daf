"""`spotwise cancel`: a running job stops with its trials checkpointed; a dead one is closed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

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
        done = subprocess.run(
            [sys.executable, "-m", "spotwise.cli.app", "cancel", job_id, "--json"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
        )
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


def test_cancel_job_whose_orchestrator_died(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store.open(db)
    from spotwise.spec import load_spec

    spec = load_spec(ROOT / "examples/digits/job.yaml")
    job = store.create_job("x", spec.model_dump_json(), "", "spot-greedy", "maximize")
    store.update_job(job.id, state="running", pid=2**22 + 12345)  # no such process
    trial = store.add_trial(job.id, 0, {"lr": 0.1})
    store.update_trial(trial.id, state="running")
    row = store.record_launch(
        job_id=job.id,
        trial_id=trial.id,
        provider="local",
        region="us-east-1",
        zone="us-east-1a",
        instance_type="p3.2xlarge",
        market="spot",
        offer_key="k",
        price_per_hour=1.0,
    )
    store.update_instance(row.id, state="running")
    store.close()

    out = jobs.cancel(job.id, db=db)
    assert out["state"] == "cancelled" and out["cancelled"]
    store = Store.open_existing(db)
    assert store.get_job(job.id).state.value == "cancelled"
    assert store.get_trial(trial.id).state.value == "cancelled"
    inst = store.get_instance(row.id)
    assert inst.end_reason == "reconciled" and inst.ended_at is not None
    store.close()
