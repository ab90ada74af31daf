"""The AWS provisioner on moto: what a launch sends, money safety, states, and the whole trial
path through the instance emulator (agent, IMDS notices, S3 events, stop relay)."""

from __future__ import annotations

import base64
import json
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from awsfakes import FAKE_KEY_ID, FAKE_SECRET
from contract import wait_for

from spotwise.errors import CapacityError, ProviderError
from spotwise.planner.runstate import write_control
from spotwise.providers.aws import open_provisioner
from spotwise.providers.aws_agent import parse_user_data
from spotwise.providers.base import (
    TAG_JOB,
    TAG_LAUNCH,
    InstanceState,
    LaunchRequest,
    Market,
    NoticeKind,
    Offer,
    our_tags,
)
from spotwise.providers.registry import ProviderConfig

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TRIAL = textwrap.dedent("""
    import json, os, signal, sys, time
    events = os.environ["SPOTWISE_EVENTS_FILE"]; stop = os.environ["SPOTWISE_STOP_FILE"]
    control = os.environ.get("SPOTWISE_CONTROL_FILE", ""); seen = ""
    steps = int(os.environ.get("STEPS", "1000")); why = []
    signal.signal(signal.SIGTERM, lambda *a: why.append("signal"))
    def emit(**rec):
        with open(events, "a") as fh:
            fh.write(json.dumps({**rec, "time": time.time()}) + "\\n")
    for step in range(1, steps + 1):
        emit(type="report", step=step, metric=step / 10)
        if control and os.path.exists(control):
            body = open(control).read()
            if body != seen:
                seen = body; emit(type="control", step=step, path=control, body=body)
        if os.path.exists(stop):
            why.append("stop_file")
        if why:
            emit(type="stopping", reason=why[0], step=step)
            sys.exit(0)
        time.sleep(0.05)
    emit(type="done", step=steps)
    sys.exit(int(os.environ.get("EXIT", "0")))
""")


def _offer(
    market: Market = Market.SPOT, zone: str = "us-east-1b", itype: str = "c5.xlarge"
) -> Offer:
    price = 0.0824 if market is Market.SPOT else 0.17
    return Offer("aws", "us-east-1", zone, itype, market, price, 0.17, vcpus=4, memory_gb=8.0)


def _prov(bucket: str, **options: str) -> Any:
    opts = {"image": "ami-12c6146b", "artifacts": f"s3://{bucket}/runs", "poll_s": "0", **options}
    return open_provisioner(ProviderConfig(name="aws", regions=("us-east-1",), options=opts))


def _request(
    tmp_path: Path,
    market: Market = Market.SPOT,
    env: dict[str, str] | None = None,
    job: str = "job-1",
    trial: str = "trial-1",
    attempt: int = 1,
    tags: dict[str, str] | None = None,
) -> LaunchRequest:
    script = tmp_path / "trial.py"
    script.write_text(TRIAL)
    launch = uuid.uuid4().hex[:16]
    full_env = {
        "SPOTWISE_JOB_ID": job,
        "SPOTWISE_TRIAL_ID": trial,
        "SPOTWISE_ATTEMPT": str(attempt),
        "SPOTWISE_EVENTS_FILE": str(tmp_path / "orchestrator-events.jsonl"),
        "SPOTWISE_STOP_FILE": str(tmp_path / f"stop-{attempt}"),
        "SPOTWISE_CONTROL_FILE": str(tmp_path / f"control-{attempt}.json"),
        **(env or {}),
    }
    return LaunchRequest(
        _offer(market),
        (sys.executable, str(script)),
        full_env,
        tags if tags is not None else our_tags(job, trial, launch),
        launch,
        str(tmp_path),
    )


def _raw(instance_id: str) -> dict[str, Any]:
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1")
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return dict(reservations[0]["Instances"][0])


def _user_data(instance_id: str) -> str:
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1")
    attr = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    return base64.b64decode(attr["UserData"]["Value"]).decode()


# ---- what a launch sends ------------------------------------------------------------------------
def test_spot_launch_is_tagged_imdsv2_only_and_starts_the_agent(
    bucket: str, tmp_path: Path
) -> None:
    prov = _prov(bucket)
    req = _request(tmp_path, env={"WANDB_MODE": "offline"})
    inst = prov.launch(req)
    raw = _raw(inst.instance_id)
    tags = {t["Key"]: t["Value"] for t in raw["Tags"]}
    assert {k: tags[k] for k in req.tags} == dict(req.tags)
    assert tags["spotwise:market"] == "spot" and float(tags["spotwise:price"]) == 0.0824
    assert tags["spotwise:artifacts"] == f"s3://{bucket}/runs/job-1/trial-1"
    assert raw["InstanceLifecycle"] == "spot"
    assert raw["Placement"]["AvailabilityZone"] == "us-east-1b"
    assert raw["ClientToken"] == req.client_token
    assert raw["MetadataOptions"]["HttpTokens"] == "required"
    assert inst.offer.market is Market.SPOT and inst.state in (
        InstanceState.PENDING,
        InstanceState.RUNNING,
    )
    text = _user_data(inst.instance_id)
    assert text.startswith("#!/bin/bash") and "-m spotwise.providers.aws_agent" in text
    cfg = parse_user_data(text)
    assert (cfg.job_id, cfg.trial_id, cfg.attempt, cfg.launch_id) == (
        "job-1",
        "trial-1",
        1,
        req.client_token,
    )
    assert cfg.argv[0] == "python"  # the orchestrator's interpreter path means nothing there
    assert cfg.env["WANDB_MODE"] == "offline"
    local_only = ("SPOTWISE_EVENTS_FILE", "SPOTWISE_STOP_FILE", "SPOTWISE_CONTROL_FILE")
    assert not [k for k in local_only if k in cfg.env]  # the agent sets instance paths
    assert FAKE_SECRET not in text and FAKE_KEY_ID not in text


def test_on_demand_launch_has_no_market_options(bucket: str, tmp_path: Path) -> None:
    inst = _prov(bucket).launch(_request(tmp_path, Market.ON_DEMAND))
    raw = _raw(inst.instance_id)
    assert "InstanceLifecycle" not in raw
    assert inst.offer.market is Market.ON_DEMAND


def test_collapsed_s3_checkpoint_uri_is_repaired(bucket: str, tmp_path: Path) -> None:
    prov = open_provisioner(
        ProviderConfig(
            name="aws", regions=("us-east-1",), options={"image": "ami-12c6146b", "poll_s": "0"}
        )
    )
    ckpt = f"s3:/{bucket}/ckpt/job-1/trial-1"  # what str(Path("s3://b/...")) gives
    inst = prov.launch(_request(tmp_path, env={"SPOTWISE_CHECKPOINT_URI": ckpt}))
    cfg = parse_user_data(_user_data(inst.instance_id))
    assert cfg.env["SPOTWISE_CHECKPOINT_URI"] == f"s3://{bucket}/ckpt/job-1/trial-1"
    assert cfg.artifacts == f"s3://{bucket}/ckpt/job-1/trial-1"  # events beside checkpoints


@pytest.mark.parametrize(
    ("options", "env", "tags", "match"),
    [
        ({"image": ""}, {}, None, "no machine image"),
        ({"artifacts": ""}, {"SPOTWISE_CHECKPOINT_URI": "/home/me/ckpt"}, None, "not in S3"),
        # an artifacts folder only moves the events: checkpoints would be on the instance's disk
        ({}, {"SPOTWISE_CHECKPOINT_URI": "/home/me/ckpt"}, None, "checkpoint.location"),
        ({}, {"AWS_SECRET_ACCESS_KEY": FAKE_SECRET}, None, "instance profile"),
        ({}, {}, {"owner": "me"}, "without spotwise tags"),
    ],
)
def test_unsafe_launches_are_refused(
    bucket: str,
    tmp_path: Path,
    options: dict[str, str],
    env: dict[str, str],
    tags: dict[str, str] | None,
    match: str,
) -> None:
    prov = _prov(bucket, **options)
    with pytest.raises(ProviderError, match=match) as err:
        prov.launch(_request(tmp_path, env=env, tags=tags))
    assert FAKE_SECRET not in str(err.value)
    assert prov.describe() == []


def test_a_retried_launch_finds_the_first_instance(bucket: str, tmp_path: Path) -> None:
    req = _request(tmp_path)
    first = _prov(bucket).launch(req)
    again = _prov(bucket).launch(req)  # a new process after a crash: found by its launch tag
    assert again.instance_id == first.instance_id


def test_capacity_errors_map_to_capacity_error(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.exceptions import ClientError

    prov = _prov(bucket)
    ec2 = prov._ec2("us-east-1")

    def no_capacity(**kwargs: Any) -> Any:
        raise ClientError(
            {
                "Error": {
                    "Code": "InsufficientInstanceCapacity",
                    "Message": "no c5.xlarge in us-east-1b",
                }
            },
            "RunInstances",
        )

    monkeypatch.setattr(ec2, "run_instances", no_capacity)
    with pytest.raises(CapacityError, match="no capacity"):
        prov.launch(_request(tmp_path))


# ---- states -------------------------------------------------------------------------------------
def test_terminated_by_us_vs_reclaimed_by_aws(bucket: str, tmp_path: Path) -> None:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    prov = _prov(bucket)
    ours = prov.launch(_request(tmp_path, trial="a"))
    taken = prov.launch(_request(tmp_path, trial="b"))
    prov.terminate([ours.instance_id])
    backend = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
    backend.terminate_instances([taken.instance_id])
    backend.get_instance(taken.instance_id).state_reason = StateReason(
        "Server.SpotInstanceTermination: Spot instance termination",
        "Server.SpotInstanceTermination",
    )
    states = {i.instance_id: i for i in prov.describe({TAG_JOB: "job-1"})}
    assert states[ours.instance_id].state is InstanceState.TERMINATED
    assert states[taken.instance_id].state is InstanceState.REVOKED
    assert all(i.ended_at is not None and i.ended_at <= time.time() + 1 for i in states.values())


def test_describe_is_rate_limited_by_poll_s(bucket: str, tmp_path: Path) -> None:
    prov = _prov(bucket, poll_s="30")
    inst = prov.launch(_request(tmp_path))
    first = prov.describe()
    import boto3

    boto3.client("ec2", region_name="us-east-1").terminate_instances(InstanceIds=[inst.instance_id])
    assert prov.describe() is first  # served from the cache within poll_s
    prov.terminate([inst.instance_id])  # our own action clears it
    assert prov.describe()[0].state.is_terminal()


# ---- the trial path, through the emulator --------------------------------------------------------
def test_events_notice_exit_and_reclaim_travel_through_s3(
    bucket: str, tmp_path: Path, emulator: Any
) -> None:
    prov = _prov(bucket)
    req = _request(tmp_path)
    inst = prov.launch(req)
    events = wait_for(lambda: prov.progress(inst.instance_id), 30, "the first events")
    assert events[0]["type"] == "report" and events[0]["step"] == 1
    # the trial's exit is read ~0.5 s after the notice (quiet machine): a 2 s lead leaves room
    # for a loaded one, and the test waits out the lead before EC2 takes the instance
    deadline = emulator.interrupt(inst.instance_id, lead_s=2.0)
    notice = wait_for(lambda: next(iter(prov.notices()), None), 20, "the notice")
    assert notice.kind is NoticeKind.INTERRUPTION and notice.instance_id == inst.instance_id
    assert notice.deadline == pytest.approx(deadline, abs=1.0)
    done = wait_for(
        lambda: next(
            (i for i in prov.describe({TAG_LAUNCH: req.client_token}) if i.exit_code is not None),
            None,
        ),
        20,
        "the trial's exit",
    )
    assert done.exit_code == 0
    rest = prov.progress(inst.instance_id)
    assert rest and rest[-1]["type"] == "stopping" and rest[-1]["reason"] == "signal"
    gone = wait_for(
        lambda: next((i for i in prov.describe() if i.state.is_terminal()), None),
        20,
        "EC2 to take the instance back",
    )
    assert gone.state is InstanceState.REVOKED
    assert "IMDS unreachable" not in emulator.log_of(inst.instance_id)


def test_a_stop_request_reaches_the_trial_on_the_instance(
    bucket: str, tmp_path: Path, emulator: Any
) -> None:
    prov = _prov(bucket)
    req = _request(tmp_path)
    inst = prov.launch(req)
    wait_for(lambda: prov.progress(inst.instance_id), 30, "the trial to start")
    Path(req.env["SPOTWISE_STOP_FILE"]).touch()  # what the orchestrator does to stop a trial
    seen: list[dict[str, object]] = []

    def stopped() -> bool:
        seen.extend(prov.progress(inst.instance_id))
        return any(e["type"] == "stopping" for e in seen)

    wait_for(stopped, 30, "the trial to see the stop file")
    assert next(e for e in seen if e["type"] == "stopping")["reason"] == "stop_file"
    exited = wait_for(
        lambda: next((i for i in prov.describe() if i.exit_code is not None), None), 20, "the exit"
    )
    assert exited.exit_code == 0 and not exited.state.is_terminal()  # ours to terminate
    prov.terminate([inst.instance_id])
    assert wait_for(lambda: prov.describe()[0].state is InstanceState.TERMINATED, 10, "terminate")


def test_a_control_file_change_reaches_the_trial_on_the_instance(
    bucket: str, tmp_path: Path, emulator: Any
) -> None:
    prov = _prov(bucket)
    req = _request(tmp_path)
    inst = prov.launch(req)
    wait_for(lambda: prov.progress(inst.instance_id), 30, "the trial to start")
    local = Path(req.env["SPOTWISE_CONTROL_FILE"])  # the orchestrator's side
    seen: list[dict[str, object]] = []

    def control_bodies() -> list[object]:
        seen.extend(e for e in prov.progress(inst.instance_id) if e["type"] == "control")
        return [e["body"] for e in seen]

    for n, every in enumerate((7, 3), start=1):
        write_control(local, every)  # what the orchestrator does
        wait_for(lambda n=n: len(control_bodies()) >= n, 30, f"the trial to see every={every}")
    assert [json.loads(str(b)) for b in control_bodies()] == [
        {"checkpoint_every": 7},
        {"checkpoint_every": 3},
    ]
    steps = [int(str(e["step"])) for e in seen]
    assert steps[0] < steps[1]  # seen while running, one change after the other
    # the trial read its own file on the instance, not the orchestrator's path
    on_instance = {str(e["path"]) for e in seen}
    assert on_instance == {
        str(emulator.state_dir / inst.instance_id / "job-1" / "trial-1" / "control-1.json")
    }
    assert json.loads(_s3_get(bucket, "runs/job-1/trial-1/control-1.json")) == {
        "checkpoint_every": 3
    }
    prov.terminate([inst.instance_id])


def test_the_control_file_is_uploaded_only_when_its_content_changes(
    bucket: str, tmp_path: Path
) -> None:
    import boto3

    from spotwise.providers.s3_blobs import S3Blobs
    from spotwise.providers.trialfiles import TrialFiles

    s3 = boto3.client("s3", region_name="us-east-1")
    puts: list[tuple[str, bytes]] = []
    real_put = s3.put_object

    def counting_put(**kw: Any) -> Any:
        puts.append((kw["Key"], kw["Body"]))
        return real_put(**kw)

    s3.put_object = counting_put
    track = TrialFiles("i-1", S3Blobs.from_uri(f"s3://{bucket}/runs/j/t", client=s3), "4")
    track.control_file = tmp_path / "control-4.json"
    track.sync(0.0, time.time(), force=True)
    assert puts == []  # no control file yet: nothing to relay
    write_control(track.control_file, 6)
    track.sync(0.0, time.time(), force=True)
    track.sync(0.0, time.time(), force=True)
    write_control(track.control_file, 6)  # rewritten, same content
    track.sync(0.0, time.time(), force=True)
    assert puts == [("runs/j/t/control-4.json", b'{"checkpoint_every": 6}')]
    write_control(track.control_file, 2)
    track.sync(0.0, time.time(), force=True)
    assert [body for _, body in puts] == [b'{"checkpoint_every": 6}', b'{"checkpoint_every": 2}']
    assert _s3_get(bucket, "runs/j/t/control-4.json") == b'{"checkpoint_every": 2}'


def test_a_failing_trial_reports_its_exit_code(bucket: str, tmp_path: Path, emulator: Any) -> None:
    prov = _prov(bucket)
    req = _request(tmp_path, env={"STEPS": "3", "EXIT": "3"})
    inst = prov.launch(req)
    done = wait_for(
        lambda: next((i for i in prov.describe() if i.exit_code is not None), None), 30, "the exit"
    )
    assert done.exit_code == 3
    kinds = [e["type"] for e in prov.progress(inst.instance_id)]
    assert kinds == ["report", "report", "report", "done"]
    status = json.loads(_s3_get(bucket, "runs/job-1/trial-1/agent-1.json"))
    assert status["exit_code"] == 3 and status["state"] == "exited"


def _s3_get(bucket: str, key: str) -> bytes:
    import boto3

    return bytes(
        boto3.client("s3", region_name="us-east-1")
        .get_object(Bucket=bucket, Key=key)["Body"]
        .read()
    )


def test_a_rebalance_recommendation_stops_the_trial_and_is_reported_without_a_deadline(
    bucket: str, tmp_path: Path, emulator: Any
) -> None:
    prov = _prov(bucket)
    inst = prov.launch(_request(tmp_path))
    wait_for(lambda: prov.progress(inst.instance_id), 30, "the trial to start")
    emulator.rebalance(inst.instance_id)
    (notice,) = wait_for(prov.notices, 30, "the rebalance notice")
    # reported, so the orchestrator can tell the exit that follows from a crash
    assert notice.kind is NoticeKind.REBALANCE and notice.deadline == float("inf")
    assert notice.instance_id == inst.instance_id
    done = wait_for(
        lambda: next((i for i in prov.describe() if i.exit_code is not None), None),
        30,
        "the trial to checkpoint and exit",
    )
    assert done.exit_code == 0 and not done.state.is_terminal()  # EC2 does not take it
    assert prov.notices() == []  # each notice once
    assert prov.progress(inst.instance_id)[-1]["reason"] == "signal"
    status = json.loads(_s3_get(bucket, "runs/job-1/trial-1/agent-1.json"))
    assert [n["kind"] for n in status["notices"]] == ["rebalance"]


def test_rebalance_ignore_keeps_the_trial_running(
    bucket: str, tmp_path: Path, emulator: Any
) -> None:
    prov = _prov(bucket, rebalance="ignore")
    inst = prov.launch(_request(tmp_path, env={"STEPS": "60"}))
    wait_for(lambda: prov.progress(inst.instance_id), 30, "the trial to start")
    emulator.rebalance(inst.instance_id)
    (notice,) = wait_for(prov.notices, 30, "the rebalance notice")
    assert notice.kind is NoticeKind.REBALANCE
    done = wait_for(
        lambda: next((i for i in prov.describe() if i.exit_code is not None), None),
        30,
        "the trial to finish",
    )
    assert done.exit_code == 0
    assert prov.progress(inst.instance_id)[-1]["type"] == "done"


def test_an_exit_read_with_its_notice_waits_for_the_notice(bucket: str, tmp_path: Path) -> None:
    """AWS reads its trial files through Tracks like GCP and Azure: the orchestrator must hear
    of a notice before the exit it caused, or it would take that exit for a crash."""
    from spotwise.providers.s3_blobs import S3Blobs
    from spotwise.providers.trialfiles import TrialFiles

    prov = _prov(bucket)
    blobs = S3Blobs.from_uri(f"s3://{bucket}/runs/job-9/trial-9", client=prov._s3())
    track = TrialFiles("i-0123456789abcdef0", blobs, "0")
    prov._tracks[track.instance_id] = track  # as a launch would
    notice = {"kind": "interruption", "received_at": 1.0, "deadline": 121.0}
    status = {"state": "exited", "exit_code": 0, "notices": [notice]}
    blobs.put("agent-0.json", json.dumps(status).encode())
    prov._reader.sync(track, force=True)
    assert track.exit_to_report() is None  # the notice is not out yet
    (got,) = prov.notices()
    assert got.kind is NoticeKind.INTERRUPTION and got.deadline == 121.0
    assert track.exit_to_report() == 0
