"""`spotwise cancel` on AWS (moto) settles each instance record where it was launched, and
closes only what it confirmed: terminated now, already ended, or not found by a listing of its
region that succeeded.

Review: a job whose spec names no region ran in the default region of its day (us-east-1);
`spotwise cancel` run with ``AWS_DEFAULT_REGION=us-west-2`` listed us-west-2 only, found
nothing, closed both records as "reconciled" and exited 0: both instances kept running and
nothing could find them again (`report --check` said nothing held, a second cancel said "job
already cancelled").
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spotwise import jobs
from spotwise.errors import ProviderError
from spotwise.planner.backend import provider_config
from spotwise.providers.aws import open_provisioner
from spotwise.providers.aws_provisioner import AwsProvisioner
from spotwise.providers.base import LaunchRequest, Market, Offer, our_tags
from spotwise.spec import parse_spec
from spotwise.store import Store

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _spec(bucket: str) -> Any:
    return parse_spec(
        {
            "name": "noregion",
            "command": ["python", "train.py"],
            "metric": {"name": "mse", "direction": "minimize"},
            "steps": 3,
            "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
            "checkpoint": {"location": f"s3://{bucket}/ckpt"},
            "providers": [
                {
                    "name": "aws",
                    "regions": [],  # the provider's default region (us-east-1 at launch)
                    "options": {"image": "ami-12c6146b", "poll_s": "0"},
                }
            ],
        }
    )


def _dead_job(tmp_path: Path, bucket: str, trials: int) -> tuple[str, str, list[tuple[str, str]]]:
    """A job whose orchestrator died after launching one instance per trial in us-east-1 (the
    default region then), each recorded before its launch as the orchestrator does. Returns
    the database URL, the job id and the (launch id, instance id) of each launch."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    spec = _spec(bucket)
    prov = open_provisioner(provider_config(spec.providers[0]))
    offer = Offer("aws", "us-east-1", "us-east-1b", "c5.xlarge", Market.SPOT, 0.0824, 0.17)
    launched: list[tuple[str, str]] = []
    with Store.open(db) as s:
        job = s.create_job("noregion", spec.model_dump_json(), "job.yaml", "spot-greedy", "min")
        for n in range(trials):
            t = s.add_trial(job.id, n, {"lr": 0.05})
            row = s.record_launch(
                job_id=job.id,
                trial_id=t.id,
                provider="aws",
                region=offer.region,
                zone=offer.zone,
                instance_type=offer.instance_type,
                market="spot",
                offer_key=offer.key,
                price_per_hour=offer.price_per_hour,
            )
            env = {
                "SPOTWISE_ATTEMPT": "0",
                "SPOTWISE_CHECKPOINT_URI": f"s3://{bucket}/ckpt/{job.id}/{t.id}",
            }
            req = LaunchRequest(
                offer, (sys.executable, "train.py"), env, our_tags(job.id, t.id, row.id), row.id
            )
            inst = prov.launch(req)
            s.update_instance(
                row.id,
                provider_instance_id=inst.instance_id,
                state="running",
                launched_at=time.time() - 60,
            )
            launched.append((row.id, inst.instance_id))
        s.update_job(job.id, state="running", pid=0)  # its orchestrator is gone
    return db, job.id, launched


def _ec2_states(region: str = "us-east-1") -> dict[str, str]:
    import boto3

    ec2 = boto3.client("ec2", region_name=region)
    return {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
    }


def _rows(db: str, job: str) -> dict[str, tuple[str, str | None]]:
    with Store.open_existing(db) as s:
        return {r.id: (r.state, r.end_reason) for r in s.list_instances(job)}


def test_cancel_finds_instances_where_they_were_launched_not_in_todays_default_region(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, job, launched = _dead_job(tmp_path, bucket, trials=2)
    iids = [iid for _, iid in launched]
    assert _ec2_states() == dict.fromkeys(iids, "running")

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")  # cancel from another default region
    out = jobs.cancel(job, db=db)

    assert sorted(out["terminated_instances"]) == sorted(iids)
    assert out["open_instances"] == [] and out["errors"] == []
    assert out["message"] == (
        "orchestrator was not running; job marked cancelled, 2 tagged instance(s) terminated, "
        "2 instance record(s) closed and billed up to now (2 terminated now)"
    )
    assert [(r["instance_id"], r["region"], r["outcome"]) for r in out["records"]] == [
        (iid, "us-east-1", "terminated") for iid in iids
    ]
    assert _ec2_states() == dict.fromkeys(iids, "terminated")
    assert _rows(db, job) == {lid: ("terminated", "reconciled") for lid, _ in launched}
    # a second cancel lists the cloud again, where the records say the job launched
    assert jobs.cancel(job, db=db)["message"] == (
        "job already cancelled; no instance with its tags is left (looked in us-east-1)"
    )


def test_a_refused_terminate_leaves_its_record_open_and_cancel_exits_1_until_it_succeeds(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.cli.app import app

    db, job, launched = _dead_job(tmp_path, bucket, trials=2)
    (done_lid, done_iid), (stuck_lid, stuck_iid) = launched
    refusal = (
        f"aws: terminating ['{stuck_iid}'] failed: An error occurred (UnauthorizedOperation) "
        "when calling the TerminateInstances operation: not allowed"
    )
    real = AwsProvisioner.terminate

    def refuse(self: AwsProvisioner, ids: Sequence[str]) -> None:
        if stuck_iid in ids:
            raise ProviderError(refusal)
        real(self, ids)

    monkeypatch.setattr(AwsProvisioner, "terminate", refuse)
    out = jobs.cancel(job, db=db)

    assert out["state"] == "cancelled" and out["terminated_instances"] == [done_iid]
    assert out["open_instances"] == [stuck_iid] and out["errors"] == [refusal]
    assert out["message"] == (
        "orchestrator was not running; job marked cancelled, 1 tagged instance(s) terminated, "
        "1 instance record(s) closed and billed up to now (1 terminated now); 1 still open "
        f"and may still be billed: {stuck_iid} ({refusal}); run `spotwise cancel {job}` again "
        "to retry"
    )
    assert _ec2_states() == {done_iid: "terminated", stuck_iid: "running"}
    assert _rows(db, job) == {done_lid: ("terminated", "reconciled"), stuck_lid: ("running", None)}

    # still refused: the CLI says so and exits 1 (a script must not take it for released)
    runner = CliRunner()
    res = runner.invoke(app, ["cancel", job, "--db", db])
    assert res.exit_code == 1, res.output
    assert "1 still open and may still be billed" in res.output
    assert _rows(db, job)[stuck_lid] == ("running", None)

    monkeypatch.setattr(AwsProvisioner, "terminate", real)
    res = runner.invoke(app, ["cancel", job, "--db", db])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == (
        f"{job}: cancelled — job already cancelled; its record still held instances: 1 tagged "
        "instance(s) terminated, 1 instance record(s) closed and billed up to now (1 terminated "
        "now)"
    )
    assert _ec2_states() == dict.fromkeys([done_iid, stuck_iid], "terminated")
    assert set(_rows(db, job).values()) == {("terminated", "reconciled")}


def test_a_launch_younger_than_the_listing_lag_stays_open_until_it_can_be_confirmed(
    bucket: str, tmp_path: Path
) -> None:
    """EC2's listings are eventually consistent: a launch requested seconds ago that is not
    listed yet may still have made an instance. Closing its record 'not found' left nothing
    to find that instance by; it stays open, and a cancel after the lag closes it."""
    db, job, _ = _dead_job(tmp_path, bucket, trials=1)
    with Store.open_existing(db) as s:
        trial = s.list_trials(job)[0].id
        s.record_launch(
            id="l-young",
            job_id=job,
            trial_id=trial,
            provider="aws",
            region="us-east-1",
            zone="us-east-1a",
            instance_type="c5.xlarge",
            market="spot",
            offer_key="aws:us-east-1a:c5.xlarge:spot",
            price_per_hour=0.1,
            state="requested",
            requested_at=time.time() - 30.0,
        )
    out = jobs.cancel(job, db=db)
    young = {r["launch_id"]: r for r in out["records"]}["l-young"]
    assert young["outcome"] == "open" and young["instance_id"] == "l-young"
    # 30 s ago, give or take a slow machine's seconds; the rest of the 2 minutes to wait
    said = re.search(r"requested (\d+) s ago .* again in (\d+) s", young["error"])
    assert said is not None and 30 <= int(said[1]) <= 40 and int(said[1]) + int(said[2]) == 120
    assert _rows(db, job)["l-young"] == ("requested", None)
    with Store.open_existing(db) as s:  # two minutes later: the listing would show it
        s.update_instance("l-young", requested_at=time.time() - 121.0)
    again = jobs.cancel(job, db=db)
    assert {r["launch_id"]: r["outcome"] for r in again["records"]} == {"l-young": "not found"}
    assert _rows(db, job)["l-young"] == ("terminated", "reconciled")


def test_each_record_is_closed_only_when_confirmed(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Terminated now; already ended (billed up to its end, not up to now); a launch that never
    answered and left nothing (not found by a listing that succeeded); a record in a region
    whose listing failed (stays open, whatever is there)."""
    import boto3

    db, job, launched = _dead_job(tmp_path, bucket, trials=2)
    (run_lid, run_iid), (ended_lid, ended_iid) = launched
    boto3.client("ec2", region_name="us-east-1").terminate_instances(InstanceIds=[ended_iid])
    with Store.open_existing(db) as s:
        trial = s.list_trials(job)[0].id
        for lid, region, iid, age in (
            ("l-never", "us-east-1", None, 121.0),  # recorded, then the orchestrator died
            ("l-eu", "eu-west-1", "i-0123456789abcdef0", 0.0),
        ):
            s.record_launch(
                id=lid,
                job_id=job,
                trial_id=trial,
                provider="aws",
                region=region,
                zone=f"{region}a",
                instance_type="c5.xlarge",
                market="spot",
                offer_key=f"aws:{region}a:c5.xlarge:spot",
                price_per_hour=0.1,
                provider_instance_id=iid,
                state="requested" if iid is None else "running",
                requested_at=time.time() - age,  # l-never: past EC2's listing lag
            )
    down = "aws: credentials rejected while describing instances in eu-west-1 (AuthFailure)"
    real = AwsProvisioner._describe_raw

    def describe_raw(self: AwsProvisioner, region: str, filters: Any) -> Any:
        if region == "eu-west-1":
            raise ProviderError(down)
        return real(self, region, filters)

    monkeypatch.setattr(AwsProvisioner, "_describe_raw", describe_raw)
    out = jobs.cancel(job, db=db)

    assert out["terminated_instances"] == [run_iid]
    assert {r["launch_id"]: r["outcome"] for r in out["records"]} == {
        run_lid: "terminated",
        ended_lid: "ended",
        "l-never": "not found",
        "l-eu": "open",
    }
    assert out["open_instances"] == ["i-0123456789abcdef0"]
    assert out["message"] == (
        "orchestrator was not running; job marked cancelled, 1 tagged instance(s) terminated, "
        "3 instance record(s) closed and billed up to now (1 terminated now, 1 already ended, "
        "1 not found in us-east-1); 1 still open and may still be billed: i-0123456789abcdef0 "
        f"({down}); run `spotwise cancel {job}` again to retry"
    )
    rows = _rows(db, job)
    assert rows.pop("l-eu") == ("running", None)
    assert set(rows.values()) == {("terminated", "reconciled")}
    with Store.open_existing(db) as s:
        ended = s.get_instance(ended_lid)
        assert ended.ended_at is not None and ended.ended_at <= time.time()
        # billed to its end as moto reports it (no later than now), from its launch 60 s ago
        assert ended.market_seconds == pytest.approx(ended.ended_at - ended.launched_at)
