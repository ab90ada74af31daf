"""An instance is the job's only when the cloud's own identity of it matches its launch
(review-z F1): `spotwise cancel`, the drain's stray sweep and a failed launch's cleanup never
terminate, bill or adopt an instance that merely carries the job's tags.

Tags prove nothing: EC2's "Launch more like this" copies every tag (``spotwise:launch``
included), anyone with tag rights can set them, and another install with its own database can
draw the same job id. What a tag cannot fake: the ``ClientToken`` of the RunInstances call that
made an AWS instance (spotwise sends the launch id), the name of a GCE or Azure VM (spotwise
derives it from the launch id). Each instance carrying the job's tags that fails that test is
left alone and named, one line each.

AWS on moto (the providers' in-process moto server); GCP and Azure on the fakes of
``cloudfakes`` (the real clients, ``responses``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import responses
from cloudfakes import (
    AzureCredential,
    azure_config,
    fake_arm,
    fake_gce,
    gcp_config,
    gcp_credentials,
    gcp_provisioner,
)
from test_azure import LAUNCHES as AZURE_LAUNCHES
from test_gcp import LAUNCHES as GCP_LAUNCHES

from spotwise import jobs
from spotwise.planner.backend import provider_config
from spotwise.providers.aws import open_provisioner
from spotwise.providers.base import TAG_LAUNCH, LaunchRequest, Market, Offer, our_tags
from spotwise.spec import parse_spec
from spotwise.store import Store

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
HOUR = 3600.0
OFFER = Offer("aws", "us-east-1", "us-east-1b", "c5.xlarge", Market.SPOT, 0.9, 1.7)


# ---- AWS: the job, its launches, and instances that only look like them ----------------------
def _spec(bucket: str) -> Any:
    return parse_spec(
        {
            "name": "owned",
            "command": ["python", "train.py"],
            "metric": {"name": "mse", "direction": "minimize"},
            "steps": 3,
            "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
            "checkpoint": {"location": f"s3://{bucket}/ckpt"},
            "providers": [
                {
                    "name": "aws",
                    "regions": ["us-east-1"],
                    "options": {"image": "ami-12c6146b", "poll_s": "0"},
                }
            ],
        }
    )


class AwsJob:
    """A job in a store whose launches spotwise made on moto (its provisioner, the launch id
    as ClientToken), and instances made by others that carry its tags."""

    def __init__(self, tmp_path: Path, bucket: str) -> None:
        self.db = f"sqlite:///{tmp_path / 'state.db'}"
        self.bucket = bucket
        self.spec = _spec(bucket)
        self.prov = open_provisioner(provider_config(self.spec.providers[0]))
        with Store.open(self.db) as s:
            job = s.create_job("owned", self.spec.model_dump_json(), "job.yaml", "greedy", "min")
            self.trial = s.add_trial(job.id, 0, {"lr": 0.05}).id
        self.id = job.id

    def record(self, **fields: Any) -> str:
        """A launch record of the job (written before the cloud call, as the orchestrator does)."""
        with Store.open_existing(self.db) as s:
            row = s.record_launch(
                job_id=self.id,
                trial_id=self.trial,
                provider="aws",
                region=OFFER.region,
                zone=OFFER.zone,
                instance_type=OFFER.instance_type,
                market="spot",
                offer_key=OFFER.key,
                price_per_hour=OFFER.price_per_hour,
                **fields,
            )
        return row.id

    def launch(self, launch_id: str, started: float) -> str:
        """Launch ``launch_id`` as spotwise does; EC2 says it started at ``started``."""
        env = {
            "SPOTWISE_ATTEMPT": "0",
            "SPOTWISE_CHECKPOINT_URI": f"s3://{self.bucket}/ckpt/{self.id}/{self.trial}",
        }
        tags = our_tags(self.id, self.trial, launch_id)
        req = LaunchRequest(OFFER, (sys.executable, "train.py"), env, tags, launch_id)
        iid = self.prov.launch(req).instance_id
        _started(iid, started)
        return iid

    def copy_of(self, launch_id: str, started: float) -> str:
        """EC2's "Launch more like this" of the instance of ``launch_id``: every tag copied,
        ``spotwise:launch`` too; its ClientToken is the console's, not the launch id."""
        return _run(our_tags(self.id, self.trial, launch_id), started)

    def another_installs(self, started: float) -> str:
        """An instance of another spotwise install whose job drew the same id: its own
        launch id, sent as its own ClientToken."""
        launch = "l-0f0f0f0f"
        return _run(our_tags(self.id, "t-theirs", launch), started, token=launch)


def _run(tags: dict[str, str], started: float, token: str | None = None) -> str:
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1")
    resp = ec2.run_instances(
        ImageId="ami-12c6146b",
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        **({"ClientToken": token} if token else {}),
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )
    iid: str = resp["Instances"][0]["InstanceId"]
    _started(iid, started)
    return iid


def _started(iid: str, started: float) -> None:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    inst = ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_instance(iid)
    inst.launch_time = datetime.fromtimestamp(started, UTC)


def _states() -> dict[str, str]:
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1")
    return {
        i["InstanceId"]: i["State"]["Name"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
    }


def _left_alone(iid: str, job: str, why: str, where: str = " (us-east-1)") -> str:
    return f"{iid}{where} carries job {job}'s tags but was not launched by it: left alone ({why})"


@pytest.fixture
def job(bucket: str, tmp_path: Path) -> AwsJob:
    return AwsJob(tmp_path, bucket)


# ---- AWS -------------------------------------------------------------------------------------
def test_describe_reads_the_launch_from_the_instances_client_token(job: AwsJob) -> None:
    from spotwise.providers.base import launched_by

    now = time.time()
    lid = job.record(state="running")
    own = job.launch(lid, now)
    copy = job.copy_of(lid, now)
    theirs = job.another_installs(now)

    found = {i.instance_id: i for i in job.prov.describe({"spotwise:job": job.id})}

    assert found.keys() == {own, copy, theirs}  # the tags alone cannot tell them apart
    assert {iid: i.tags[TAG_LAUNCH] for iid, i in found.items()} == {
        own: lid,
        copy: lid,
        theirs: "l-0f0f0f0f",
    }
    assert found[own].launch_identity == lid
    assert found[copy].launch_identity not in (None, lid)  # the console's token
    assert found[theirs].launch_identity == "l-0f0f0f0f"
    assert [iid for iid, i in found.items() if launched_by(i, job.id, {lid})] == [own]


def test_cancel_of_a_dead_job_leaves_a_copy_and_another_installs_instance_running(
    job: AwsJob,
) -> None:
    now = time.time()
    known = job.record(state="running", launched_at=now - HOUR)
    unanswered = job.record()  # the orchestrator died in the launch call: no instance id
    own = job.launch(known, now - HOUR)
    with Store.open_existing(job.db) as s:
        s.update_instance(known, provider_instance_id=own)
    made = job.launch(unanswered, now - HOUR / 2)  # the create went through
    copy = job.copy_of(unanswered, now - HOUR)  # older than the instance its record made
    theirs = job.another_installs(now - HOUR)
    with Store.open_existing(job.db) as s:
        s.update_job(job.id, state="running", pid=0)  # its orchestrator is gone

    out = jobs.cancel(job.id, db=job.db)

    assert sorted(out["terminated_instances"]) == sorted([own, made])
    assert _states() == {own: "terminated", made: "terminated", copy: "running", theirs: "running"}
    assert sorted(out["not_ours"]) == sorted(
        [
            _left_alone(
                copy,
                job.id,
                f"its launch tag names launch {unanswered}, but aws says another request "
                "created it",
            ),
            _left_alone(theirs, job.id, "its launch tag l-0f0f0f0f names no launch of this job"),
        ]
    )
    assert out["open_instances"] == [] and out["errors"] == []
    # the answer names each one it left alone, after what it released
    assert sorted(out["message"].split("; ")[2:]) == sorted(out["not_ours"])
    with Store.open_existing(job.db) as s:
        rows = {r.id: r for r in s.list_instances(job.id)}
    # the launch that never answered is matched to the instance it made, not to the copy
    assert rows[unanswered].provider_instance_id == made
    assert rows[unanswered].launched_at == pytest.approx(now - HOUR / 2, abs=2)
    assert rows[unanswered].cost_usd == pytest.approx(0.45, abs=0.01)  # 30 min, not the copy's
    assert rows[known].cost_usd == pytest.approx(0.9, abs=0.01)


def test_cancel_of_a_finished_job_bills_its_stray_and_reports_what_is_not_its(
    job: AwsJob,
) -> None:
    now = time.time()
    lost = job.record(state="failed", end_reason="failed", ended_at=now - HOUR)
    stray = job.launch(lost, now - HOUR)  # "confirmed" clean by a listing that lagged
    copy = job.copy_of(lost, now - 2 * HOUR)
    theirs = job.another_installs(now - 2 * HOUR)
    with Store.open_existing(job.db) as s:
        s.update_job(job.id, state="succeeded", pid=None, ended_at=now - HOUR)

    out = jobs.cancel(job.id, db=job.db)

    assert out["terminated_instances"] == [stray]
    assert _states() == {stray: "terminated", copy: "running", theirs: "running"}
    (found,) = out["found_instances"]
    assert (found["instance_id"], found["trial"]) == (stray, job.trial)
    assert found["billed_usd"] == pytest.approx(0.9, abs=0.01)  # its hour, nothing of theirs
    lines = [
        _left_alone(
            copy,
            job.id,
            f"its launch tag names launch {lost}, but aws says another request created it",
        ),
        _left_alone(theirs, job.id, "its launch tag l-0f0f0f0f names no launch of this job"),
    ]
    assert sorted(out["not_ours"]) == sorted(lines)
    head = f"job already succeeded; found 1 instance still running with its tags: {stray} "
    assert out["message"].startswith(head)
    assert sorted(out["message"].split("; ")[2:]) == sorted(lines)  # one part each
    with Store.open_existing(job.db) as s:
        assert s.get_instance(lost).cost_usd == pytest.approx(0.9, abs=0.01)
        assert s.get_job(job.id).cost_usd == pytest.approx(0.9, abs=0.01)

    # the next cancel finds nothing of the job's, and still names what it leaves alone
    again = jobs.cancel(job.id, db=job.db)
    assert again["terminated_instances"] == []
    assert again["message"].startswith(
        "job already succeeded; no instance of it is left (looked in us-east-1); "
    )
    assert sorted(again["not_ours"]) == sorted(lines)


def _ledger(job: AwsJob, now: float) -> Any:
    """The orchestrator's parts that sweep strays and clean up failed launches, over the real
    provisioner and store."""
    from spotwise.planner.ledger import Ledger
    from spotwise.planner.runstate import TrialRun
    from spotwise.providers.billing import rule_for

    led = Ledger.__new__(Ledger)
    led.job_id, led.lives, led.unconfirmed, led.leftover_ids = job.id, {}, {}, []
    led.trials = [TrialRun(job.trial, 0, {}, 10, 5)]
    led.spent_usd = 0.0
    led.store = Store.open_existing(job.db)
    led.events = []
    led._event = lambda kind, at, t=None, **d: led.events.append((kind, d))
    led.backend = SimpleNamespace(
        provisioner=job.prov,
        now=lambda: now,
        segments=lambda offer, t0, t1: [(max(t1 - t0, 0.0), offer.price_per_hour)],
        rule_of=lambda offer: rule_for(offer.provider),
    )
    return led


def test_the_drains_stray_sweep_terminates_its_stray_and_leaves_the_others(job: AwsJob) -> None:
    now = time.time()
    lost = job.record(state="failed", end_reason="failed", ended_at=now - HOUR)
    stray = job.launch(lost, now - HOUR)
    copy = job.copy_of(lost, now - HOUR)
    theirs = job.another_installs(now - HOUR)
    led = _ledger(job, now)

    led._sweep_strays(now)

    assert _states() == {stray: "terminated", copy: "running", theirs: "running"}
    assert ("terminated", {"instances": [stray], "reason": "a stray instance"}) in led.events
    left = sorted(d["message"] for kind, d in led.events if kind == "not_ours")
    assert left == sorted(
        [
            _left_alone(
                copy,
                job.id,
                f"its launch tag names launch {lost}, but aws says another request created it",
            ),
            _left_alone(theirs, job.id, "its launch tag l-0f0f0f0f names no launch of this job"),
        ]
    )
    row = led.store.get_instance(lost)
    assert row.cost_usd == pytest.approx(0.9, abs=0.01)  # its own hour, billed to its launch
    assert led.spent_usd == pytest.approx(0.9, abs=0.01)
    led.store.close()


def test_a_failed_launchs_cleanup_terminates_its_instance_not_a_copy(job: AwsJob) -> None:
    now = time.time()
    failed = job.record()
    made = job.launch(failed, now - 60)  # the create went through, the call failed
    copy = job.copy_of(failed, now - 60)
    led = _ledger(job, now)

    confirmed, held, cost, _ = led._discard_launch(led.trials[0], failed, now - 60, OFFER)

    assert confirmed and [i.instance_id for i in held] == [made]
    assert cost == pytest.approx(0.9 / 60, abs=0.002)  # its minute
    assert _states() == {made: "terminated", copy: "running"}
    assert [kind for kind, _ in led.events] == ["not_ours", "terminated"]
    led.store.close()


def test_a_retried_launch_adopts_its_own_instance_never_a_copy(job: AwsJob) -> None:
    now = time.time()
    lid = job.record()
    copy = job.copy_of(lid, now)  # looks like the create of an earlier call of this launch

    first = job.launch(lid, now)
    again = job.launch(lid, now)  # the same request once more: the same instance

    assert first != copy and again == first
    assert _states() == {copy: "running", first: "running"}


# ---- job ids ---------------------------------------------------------------------------------
def test_job_ids_are_64_bits_and_old_32_bit_ones_still_work(tmp_path: Path) -> None:
    from spotwise.store.models import new_id

    ids = {new_id("j") for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("j-") and len(i) == 18 for i in ids)
    assert all(int(i[2:], 16) >= 0 for i in ids)  # hex
    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as s:
        old = s.create_job("old", "{}", "job.yaml", "greedy", "min", job_id="j-3fa2c9d1")
        new = s.create_job("new", "{}", "job.yaml", "greedy", "min")
        assert s.get_job("j-3fa2c9d1").name == "old" and old.id == "j-3fa2c9d1"
        assert len(new.id) == 18 and s.get_job(new.id).name == "new"


# ---- GCP and Azure, on their fakes ------------------------------------------------------------
TOKEN = "ownership-test-token"


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials", lambda: (gcp_credentials(TOKEN), "proj-1")
    )
    monkeypatch.setattr(
        "spotwise.providers.azure.default_credential", lambda: AzureCredential(TOKEN)
    )
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        yield SimpleNamespace(
            gce=fake_gce.FakeGCE().install(rs), arm=fake_arm.FakeARM().install(rs)
        )


def _request(launches: Any, job: str, launch_id: str) -> LaunchRequest:
    """The cloud's test request, for ``job`` (label values are lower case) and ``launch_id``."""
    return replace(launches.request(launch_id), tags=our_tags(job, "t1", launch_id))


def _cloud_spec(provider: dict[str, Any]) -> Any:
    return parse_spec(
        {
            "name": "owned",
            "command": ["python", "t.py"],
            "metric": {"name": "m", "direction": "maximize"},
            "steps": 2,
            "search_space": {"x": {"type": "real", "low": 0.0, "high": 1.0}},
            "providers": [provider],
        }
    )


def test_gcp_a_vm_with_the_jobs_labels_it_did_not_name_is_left_alone(fakes: Any) -> None:
    from spotwise.planner.reconcile import reconcile_records
    from spotwise.providers.gcp import tags_to_labels

    prov = gcp_provisioner(gcp_config(), gcp_credentials(TOKEN))
    job = "job-1"
    ours = prov.launch(_request(GCP_LAUNCHES, job, "launch-g1")).instance_id
    # a VM someone made with our labels (copied, or set by hand), and another install's
    fakes.gce.add_foreign(
        "us-central1-a", "copy-of-ours", tags_to_labels(our_tags(job, "t1", "launch-g1"))
    )
    fakes.gce.add_foreign(
        "us-central1-a", "theirs", tags_to_labels(our_tags(job, "t1", "launch-x"))
    )
    listed = {i.instance_id: i.launch_identity for i in prov.describe({"spotwise:job": job})}
    assert listed == {
        ours: "launch-g1",
        "us-central1-a/copy-of-ours": "",  # GCE says: not a launch of ours
        "us-central1-a/theirs": "",
    }

    spec = _cloud_spec({"name": "gcp", "options": dict(gcp_config().options)})
    out = reconcile_records(spec, job, [], launches={"launch-g1"})

    assert out.terminated == [ours] and out.errors == []
    assert sorted(fakes.gce.instances) == [
        ("us-central1-a", "copy-of-ours"),
        ("us-central1-a", "theirs"),
    ]
    assert sorted(out.not_ours) == [
        _left_alone(
            "us-central1-a/copy-of-ours",
            job,
            "its launch tag names launch launch-g1, but gcp says another request created it",
            " (us-central1)",
        ),
        _left_alone(
            "us-central1-a/theirs",
            job,
            "its launch tag launch-x names no launch of this job",
            " (us-central1)",
        ),
    ]


def test_azure_a_vm_with_the_jobs_tags_it_did_not_name_is_left_alone(fakes: Any) -> None:
    from spotwise.planner.reconcile import reconcile_records
    from spotwise.providers import azure

    prov = azure.open_provisioner(azure_config(fakes.arm), credential=AzureCredential(TOKEN))
    job = "job-1"
    ours = prov.launch(_request(AZURE_LAUNCHES, job, "launch-a1")).instance_id
    fakes.arm.add_foreign("copy-of-ours", our_tags(job, "t1", "launch-a1"))
    fakes.arm.add_foreign("theirs", our_tags(job, "t1", "launch-x"))
    listed = {i.instance_id: i.launch_identity for i in prov.describe({"spotwise:job": job})}
    assert listed == {ours: "launch-a1", "copy-of-ours": "", "theirs": ""}  # "": not a launch

    spec = _cloud_spec({"name": "azure", "options": dict(azure_config(fakes.arm).options)})
    out = reconcile_records(spec, job, [], launches={"launch-a1"})

    assert out.terminated == [ours] and out.errors == []
    assert sorted(fakes.arm.vms) == ["copy-of-ours", "theirs"]
    assert sorted(out.not_ours) == [
        _left_alone(
            "copy-of-ours",
            job,
            "its launch tag names launch launch-a1, but azure says another request created it",
            " (eastus)",
        ),
        _left_alone(
            "theirs", job, "its launch tag launch-x names no launch of this job", " (eastus)"
        ),
    ]


# ---- review-aa F4: a cloud that does not say which request made an instance -----------------
def _hide_token_of(monkeypatch: pytest.MonkeyPatch, iid: str) -> None:
    """EC2 answers DescribeInstances for ``iid`` without a ClientToken (documented "if
    applicable"): spotwise cannot confirm which launch made it."""
    from spotwise.providers.aws_provisioner import AwsProvisioner

    real = AwsProvisioner._to_instance

    def to_instance(self: Any, raw: dict[str, Any], region: str) -> Any:
        if raw.get("InstanceId") == iid:
            raw = {k: v for k, v in raw.items() if k != "ClientToken"}
        return real(self, raw, region)

    monkeypatch.setattr(AwsProvisioner, "_to_instance", to_instance)


def test_an_unconfirmed_instance_with_a_launchs_tag_keeps_its_record_open(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestrator died in the launch call; the instance it made is listed with that
    launch's tag but no ClientToken. Its record was closed `not found` at $0 and the instance
    left running, with nothing left to find it by: now the record stays open, the answer says
    why, and nothing is terminated on an unconfirmed identity."""
    job = AwsJob(tmp_path, bucket)
    now = time.time()
    unanswered = job.record(requested_at=now - 3600.0)
    made = job.launch(unanswered, now - 3600.0)
    _hide_token_of(monkeypatch, made)
    with Store.open_existing(job.db) as s:
        s.update_job(job.id, state="running", pid=0)

    out = jobs.cancel(job.id, db=job.db)

    assert _states() == {made: "running"}  # not terminated on an unconfirmed identity
    (rec,) = out["records"]
    assert (rec["outcome"], rec["instance_id"]) == ("open", made)
    assert "does not confirm that launch made it" in rec["error"]
    assert out["open_instances"] == [made]  # the CLI exits 1 and says to run it again
    assert "aws does not say which request created it" in out["not_ours"][0]
    with Store.open_existing(job.db) as s:
        assert s.get_instance(unanswered).state == "requested"  # kept open
