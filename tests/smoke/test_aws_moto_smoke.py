"""CI smoke run of the AWS path against moto: `spotwise tune examples/digits/job-aws.yaml` as a
subprocess, pointed at a ``ThreadedMotoServer`` in this process through ``AWS_ENDPOINT_URL``.
The spec run is the example's, read from the file at each run, with one field changed: ``steps``
is SMOKE_STEPS instead of 300 (written to the test's folder), since the trials' epochs were most
of the wall time and nothing here depends on how many there are past the first checkpoint.

The moto server gets real spot prices (2022-05-31 slice) and a fake Pricing API; the instance
emulator plays each EC2 instance the orchestrator launches: it reads the user-data and runs
the trial agent locally against moto's S3, with instance-profile credentials from a fake IMDS.
Once the first trial has a checkpoint in S3, one interruption notice is injected: the agent
SIGTERMs the trial (it checkpoints to S3 and exits), EC2 "takes" the instance at the deadline,
and the orchestrator relaunches the trial, which resumes from its S3 checkpoint. The job must
finish, and afterwards no instance tagged with the job may be left running in moto. A third run
stops the job with Ctrl-C at that point instead, then `spotwise resume`s it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "digits" / "job-aws.yaml"
FIXTURES = ROOT / "tests" / "fixtures" / "aws"
BUCKET = "spotwise-digits-example"  # the bucket job-aws.yaml names
# steps of each trial (the example says 300). The notice is injected once a trial has its
# first checkpoint (step 10; the example checkpoints every 10): 40 more steps (0.03 to 0.1 s
# each) for the agent to relay it while the trial still runs. The trial stops one or two
# steps after the checkpoint (its SIGTERM comes within a step or two); the steps past that
# are the resumed trial's, on the critical path (at 80 steps, 69 of them: 2 to 7 s a run).
SMOKE_STEPS = 50
# wall seconds from the interruption notice to EC2 taking the instance (AWS: 120). The trial
# finishes its step, checkpoints to S3 and exits in 2-3 s, over 5 s on a loaded machine (it
# was killed at a 5 s lead once). The relaunch does not wait for the deadline: no wall time lost.
NOTICE_LEAD_S = 8.0
KEY_ID, SECRET = "AKIASMOKETESTKEY0042", "smoke/Test+Secret/NeverPrintMe0042"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    pytest.importorskip("moto", reason="moto is not installed (spotwise[dev])")
    pytest.importorskip("torch", reason="the digits example needs torch")
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    if str(FIXTURES) not in sys.path:
        sys.path.insert(0, str(FIXTURES))
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")).close()
    yield url
    server.stop()


def _client(service: str, url: str) -> Any:
    import boto3

    return boto3.client(
        service,
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id=KEY_ID,
        aws_secret_access_key=SECRET,
    )


def _aws_env(moto_url: str) -> dict[str, str]:
    """This process's environment without any SPOTWISE_/AWS_ variable, plus moto's endpoint and
    the fake keys: a subprocess sees only what the test gives it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTWISE_", "AWS_"))}
    env.update(
        {
            "AWS_ENDPOINT_URL": moto_url,
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }
    )
    return env


def _example_spec(tmp_path: Path) -> Path:
    """job-aws.yaml as it is, but for ``steps`` (SMOKE_STEPS), written under ``tmp_path``."""
    import yaml

    spec = yaml.safe_load(EXAMPLE.read_text())
    assert spec["steps"] >= SMOKE_STEPS, "the notice needs trials of SMOKE_STEPS steps or more"
    spec["steps"] = SMOKE_STEPS
    path = tmp_path / EXAMPLE.name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _has_checkpoint(s3: Any, uri: str) -> bool:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    resp = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix.rstrip('/')}/ckpt-")
    return any(o["Key"].endswith(".json") for o in resp.get("Contents", []))


@dataclass
class Run:
    """One `spotwise tune` of job-aws.yaml against moto, with one notice injected."""

    returncode: int
    out: str
    err: str
    logs: dict[str, str]
    machines: dict[str, Any]
    errors: list[str]
    hit: str | None  # the instance that got the notice
    resumed: subprocess.CompletedProcess[str] | None = None  # `spotwise resume` (kind "resume")


def _as_a_terminal_starts_it() -> None:
    """In the child before exec: SIGINT and SIGHUP at their defaults, as a command typed at a
    terminal gets them (a test run started with them ignored, e.g. `.ci/run &` from a script,
    would pass that on, and the job would keep them ignored as it should)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _tune_with_one_notice(moto_url: str, tmp_path: Path, kind: str) -> Run:
    """Run the job; once a trial has a checkpoint in S3, inject ``kind`` into its instance:
    ``interruption`` (EC2 takes it NOTICE_LEAD_S later) or ``rebalance`` (a recommendation, no
    deadline); or ``resume``: Ctrl-C the job (SIGINT), then `spotwise resume` it."""
    from awsfakes import PricingServer, SpotPrices, load_spot_rows
    from ec2_emulator import InstanceEmulator

    urllib.request.urlopen(
        urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")
    ).close()
    s3 = _client("s3", moto_url)
    s3.create_bucket(Bucket=BUCKET)
    _client("iam", moto_url).create_instance_profile(InstanceProfileName="spotwise-trial")
    prices = SpotPrices(load_spot_rows(shift_to=time.time() - 60)).install()
    next(prices)
    env = _aws_env(moto_url)
    env.update(
        {
            "AWS_CONFIG_FILE": str(tmp_path / "none"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
            "SPOTWISE_DB": f"sqlite:///{tmp_path / 'spotwise.db'}",
            "SPOTWISE_HOME": str(tmp_path / "home"),
            "SPOTWISE_AWS_POLL_S": "0.3",
        }
    )
    digits = str(ROOT / "examples" / "digits")
    spec = _example_spec(tmp_path)
    hit: str | None = None
    try:
        with (
            PricingServer() as pricing,
            InstanceEmulator(
                moto_url,
                tmp_path / "instances",
                env=env,
                agent_poll_s=0.2,
                kill_grace_s=20.0,
                paths={"/opt/spotwise/examples/digits": digits},
            ) as emu,
        ):
            env["AWS_ENDPOINT_URL_PRICING"] = pricing.url
            proc = subprocess.Popen(
                [sys.executable, "-m", "spotwise.cli.app", "tune", str(spec), "--json"],
                env=env,
                cwd=tmp_path,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=_as_a_terminal_starts_it,
            )
            deadline = time.monotonic() + 180
            while proc.poll() is None and hit is None and time.monotonic() < deadline:
                for iid, machine in list(emu.machines.items()):
                    uri = machine.config.env.get("SPOTWISE_CHECKPOINT_URI", "")
                    if uri.startswith("s3://") and _has_checkpoint(s3, uri):
                        if kind == "interruption":
                            emu.interrupt(iid, lead_s=NOTICE_LEAD_S)
                        elif kind == "rebalance":
                            emu.rebalance(iid)
                        else:
                            proc.send_signal(signal.SIGINT)
                        hit = iid
                        break
                time.sleep(0.1)
            try:
                out, err = proc.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                pytest.fail(f"spotwise tune did not finish: {err[-3000:]}\n{emu.errors}")
            resumed = None
            if kind == "resume":
                job_id = json.loads(out)["job_id"]
                resumed = subprocess.run(
                    [sys.executable, "-m", "spotwise.cli.app", "resume", job_id, "--json"],
                    env=env,
                    cwd=tmp_path,
                    text=True,
                    capture_output=True,
                    timeout=240,
                )
            logs = {iid: emu.log_of(iid) for iid in emu.machines}
            run = Run(
                proc.returncode, out, err, logs, dict(emu.machines), list(emu.errors), hit, resumed
            )
    finally:
        with pytest.raises(StopIteration):
            next(prices)
    return run


def _tagged(moto_url: str, job_id: str) -> list[dict[str, Any]]:
    return [
        i
        for r in _client("ec2", moto_url).describe_instances(
            Filters=[{"Name": "tag:spotwise:job", "Values": [job_id]}]
        )["Reservations"]
        for i in r["Instances"]
    ]


def _relaunched_and_resumed(run: Run) -> None:
    assert run.hit is not None
    lost = run.machines[run.hit].config
    again = [
        m
        for m in run.machines.values()
        if m.config.trial_id == lost.trial_id and m.config.attempt > lost.attempt
    ]
    assert again, f"trial {lost.trial_id} was not relaunched: {list(run.machines)}"
    resumed = run.logs[again[0].instance_id]
    assert "resumed from step" in resumed, resumed[-2000:]


def test_tune_on_moto_survives_an_interruption_and_leaves_nothing_running(
    moto_url: str, tmp_path: Path
) -> None:
    run = _tune_with_one_notice(moto_url, tmp_path, "interruption")
    interrupted, logs = run.hit, run.logs
    assert run.returncode == 0, f"tune failed:\n{run.err[-4000:]}\nemulator: {run.errors}"
    assert interrupted is not None, "no trial reached a checkpoint to interrupt"
    summary = json.loads(run.out)
    assert summary["state"] == "succeeded", summary
    assert summary["completed"] == 2 and summary["revocations"] >= 1, summary

    # the interrupted trial was relaunched and resumed from its S3 checkpoint
    _relaunched_and_resumed(run)
    assert "notice" in logs[interrupted] and "trial exited with 0" in logs[interrupted]

    # every instance of the job is gone; the interrupted one was taken by "EC2" (revoked)
    tagged = _tagged(moto_url, summary["job_id"])
    assert len(tagged) == len(run.machines) >= 3
    assert [i["InstanceId"] for i in tagged if i["State"]["Name"] in ("pending", "running")] == []
    reasons = {i["InstanceId"]: i.get("StateReason", {}).get("Code") for i in tagged}
    assert reasons[interrupted] == "Server.SpotInstanceTermination"

    # credentials appear nowhere: output, agent logs, the database
    blobs = [run.out, run.err, *logs.values()] + [
        p.read_bytes().decode("latin-1") for p in tmp_path.glob("spotwise.db*")
    ]
    assert not [b for b in blobs if KEY_ID in b or SECRET in b]


def test_a_job_stopped_with_ctrl_c_resumes_from_s3_and_leaves_nothing_running(
    moto_url: str, tmp_path: Path
) -> None:
    """Ctrl-C once a trial has its first checkpoint in S3: the job ends cancelled, every
    instance released; `spotwise resume` runs the unfinished trials on, each from its S3
    checkpoint on a new instance and a new attempt, and the job's bill is its records' sum."""
    from spotwise.store import Store

    run = _tune_with_one_notice(moto_url, tmp_path, "resume")
    first = json.loads(run.out)
    assert run.returncode == 130 and first["state"] == "cancelled", run.err[-3000:]
    assert run.resumed is not None
    assert run.resumed.returncode == 0, run.resumed.stderr[-4000:]
    second = json.loads(run.resumed.stdout)
    assert second["job_id"] == first["job_id"] and second["state"] == "succeeded", second
    assert second["completed"] == 2 and second["resumed"]["previous_state"] == "cancelled"
    requeued = set(second["resumed"]["requeued_trials"])
    assert run.hit is not None and run.machines[run.hit].config.trial_id in requeued

    # each requeued trial ran again on a new attempt and resumed from its S3 checkpoint
    attempts = [(m.config.trial_id, m.config.attempt) for m in run.machines.values()]
    assert len(attempts) == len(set(attempts)), attempts
    with Store.open_existing(f"sqlite:///{tmp_path / 'spotwise.db'}") as store:
        (mark,) = store.events(first["job_id"], kind="resumed")
        launches = store.events(first["job_id"], kind="launch", after_id=mark.id)
        rows = store.list_instances(first["job_id"])
        job = store.get_job(first["job_id"])
    resumed_from = {e.trial_id: e.detail["resume_step"] for e in launches}
    hit_trial_id, hit_attempt = (
        run.machines[run.hit].config.trial_id,
        run.machines[run.hit].config.attempt,
    )
    assert resumed_from[hit_trial_id] >= 10  # the example checkpoints every 10 steps
    again = [
        m for m in run.machines.values()
        if m.config.trial_id == hit_trial_id and m.config.attempt > hit_attempt
    ]  # fmt: skip
    assert again and "resumed from step" in run.logs[again[0].instance_id]
    assert job.cost_usd == pytest.approx(sum(r.cost_usd for r in rows))
    assert job.on_demand_cost_usd == pytest.approx(sum(r.on_demand_cost_usd for r in rows))
    tagged = _tagged(moto_url, first["job_id"])
    assert [i["InstanceId"] for i in tagged if i["State"]["Name"] in ("pending", "running")] == []


def test_a_rebalance_recommendation_moves_the_trial_without_counting_a_failure(
    moto_url: str, tmp_path: Path
) -> None:
    """The agent stops a trial on a rebalance recommendation (its default, ``rebalance: stop``):
    the trial checkpoints and exits 0 with steps left, EC2 takes nothing. That exit must be a
    migration (relaunch elsewhere, resume), not a crash, and spotwise must terminate the
    instance itself since no provider deadline will."""
    from spotwise.store import Store

    run = _tune_with_one_notice(moto_url, tmp_path, "rebalance")
    assert run.returncode == 0, f"tune failed:\n{run.err[-4000:]}\nemulator: {run.errors}"
    assert run.hit is not None, "no trial reached a checkpoint to hit"
    summary = json.loads(run.out)
    assert summary["state"] == "succeeded", summary
    assert (summary["completed"], summary["revocations"]) == (2, 0), summary
    assert summary["migrations"] >= 1, summary
    _relaunched_and_resumed(run)
    assert "rebalance" in run.logs[run.hit] and "trial exited with 0" in run.logs[run.hit]

    with Store.open_existing(f"sqlite:///{tmp_path / 'spotwise.db'}") as store:
        job_id = summary["job_id"]
        assert len(store.events(job_id, kind="rebalance")) == 1
        assert store.events(job_id, kind="error") == []  # not counted as a crash
        trials = store.list_trials(job_id)
    assert all(t.state.value == "completed" for t in trials)

    tagged = _tagged(moto_url, job_id)
    assert [i["InstanceId"] for i in tagged if i["State"]["Name"] in ("pending", "running")] == []
    reasons = {i["InstanceId"]: i.get("StateReason", {}).get("Code") for i in tagged}
    assert reasons[run.hit] != "Server.SpotInstanceTermination"  # we released it, not EC2


def test_prices_cli_against_moto_is_sorted_with_on_demand_joined(
    moto_url: str, tmp_path: Path
) -> None:
    """`spotwise prices --provider aws --region us-east-1 --json`, a subprocess, moto server."""
    from awsfakes import PricingServer, SpotPrices, load_spot_rows

    prices = SpotPrices(load_spot_rows(shift_to=time.time() - 60)).install()
    next(prices)
    env = {**_aws_env(moto_url), "SPOTWISE_DB": f"sqlite:///{tmp_path / 'spotwise.db'}"}
    try:
        with PricingServer() as pricing:
            env["AWS_ENDPOINT_URL_PRICING"] = pricing.url
            res = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "spotwise.cli.app",
                    "prices",
                    "--provider",
                    "aws",
                    "--region",
                    "us-east-1",
                    "--json",
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
    finally:
        with pytest.raises(StopIteration):
            next(prices)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    rows = out["prices"]
    assert out["source"] == "live" and out["on_demand_source"] == "pricing-api"
    assert rows and [r["price_per_hour"] for r in rows] == sorted(r["price_per_hour"] for r in rows)
    spot = [r for r in rows if r["market"] == "spot"]
    assert spot and all(r["price_per_hour"] > 0.001 for r in spot)  # real prices, not 0.00001
    joined = {r["instance_type"]: r["on_demand_price_per_hour"] for r in spot}
    assert joined["c5.xlarge"] == 0.17 and joined["p3.2xlarge"] == 3.06
    assert joined["g5.xlarge"] == 1.006
    assert all(r["on_demand_price_per_hour"] >= r["price_per_hour"] for r in spot)
    assert out["cached"] == len(rows)
