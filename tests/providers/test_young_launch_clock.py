"""`spotwise cancel` keeps a launch younger than EC2's listing lag open (its instance may not be
listed yet), reading its age on ONE clock (review-aa F6).

The record's ``requested_at`` is written by the orchestrator's clock; the cancel compared it
with its own. An orchestrator on another machine whose clock was ahead kept the record open
forever ("requested 0 s ago ... run the cancel again in 120 s", every time), and one whose clock
was behind made a create of seconds ago look old: closed `not found`, its instance left running
with nothing to find it by. Now a request written on another machine, or ahead of this clock,
is judged on this machine's clock alone: it is closed once a cancel here finds it absent the
listing lag after the first cancel here that found it absent.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spotwise import jobs, release
from spotwise.planner.reconcile import UNLISTED, unlisted_since
from spotwise.providers.base import Market, Offer, our_tags
from spotwise.spec import parse_spec
from spotwise.store import Store

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

LAG = 120.0  # AwsProvisioner.LISTING_LAG_S
OFFER = Offer("aws", "us-east-1", "us-east-1a", "c5.xlarge", Market.SPOT, 0.1, 0.17)


def _spec(bucket: str) -> Any:
    return parse_spec(
        {
            "name": "skew",
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


def _job(tmp_path: Path, bucket: str, requested_at: float, host: str | None) -> tuple[str, str]:
    """A job whose orchestrator (on ``host``) died in the call of a launch it recorded at
    ``requested_at`` by its own clock: nothing is listed for that launch (yet)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        job = s.create_job(
            "skew", _spec(bucket).model_dump_json(), "job.yaml", "spot-greedy", "min"
        )
        trial = s.add_trial(job.id, 0, {"lr": 0.05})
        s.record_launch(
            id="l-unanswered",
            job_id=job.id,
            trial_id=trial.id,
            provider="aws",
            region=OFFER.region,
            zone=OFFER.zone,
            instance_type=OFFER.instance_type,
            market="spot",
            offer_key=OFFER.key,
            price_per_hour=OFFER.price_per_hour,
            requested_at=requested_at,
        )
        s.update_job(job.id, state="running", pid=0, host=host)
    return db, job.id


def _cancel(db: str, job: str, at: float, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A cancel run from this machine (its orchestrator's is lost: --force) at wall time ``at``."""
    monkeypatch.setattr(release, "wall_now", lambda: at)
    return jobs.cancel(job, db=db, force=True)


def _record(out: dict[str, Any]) -> dict[str, Any]:
    (rec,) = out["records"]
    assert rec["launch_id"] == "l-unanswered"
    return rec


def _row(db: str) -> tuple[str, str | None]:
    with Store.open_existing(db) as s:
        row = s.get_instance("l-unanswered")
        return row.state, row.end_reason


def test_orchestrator_clock_behind_a_fresh_launch_is_not_closed_on_its_old_looking_time(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestrator's machine runs 10 minutes behind: a launch of seconds ago reads 600 s
    old here. Its absence was trusted (`not found`, closed); the instance that EC2 then lists
    had nothing left to find it by. Now the first cancel keeps it open; the instance listed
    after it is found, terminated and billed by the next cancel."""
    now = time.time()
    db, job = _job(tmp_path, bucket, now - 5 - 600, host="orchestrator-box")

    first = _cancel(db, job, now, monkeypatch)

    rec = _record(first)
    assert rec["outcome"] == "open"
    assert "requested on orchestrator-box, whose clock" in rec["error"]
    assert (
        "first found it absent now: run the cancel again from this machine in 120 s"
        in (rec["error"])
    )
    assert first["open_instances"] == ["l-unanswered"]
    assert _row(db) == ("requested", None)
    with Store.open_existing(db) as s:
        (seen,) = s.events(job, kind=UNLISTED)
    assert (seen.instance_id, seen.time, seen.detail) == (
        "l-unanswered",
        now,
        {"host": socket.gethostname()},
    )

    # EC2 now lists the create the orchestrator made just before it died
    import boto3

    tags = our_tags(job, "t", "l-unanswered")
    made = boto3.client("ec2", region_name="us-east-1").run_instances(
        ImageId="ami-12c6146b",
        InstanceType="c5.xlarge",
        MinCount=1,
        MaxCount=1,
        ClientToken="l-unanswered",  # what the launch sends: its launch id
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["Instances"][0]["InstanceId"]
    second = _cancel(db, job, now + 30, monkeypatch)

    assert second["terminated_instances"] == [made]
    assert _record(second)["outcome"] == "terminated"
    assert _row(db) == ("terminated", "reconciled")


def test_a_launch_absent_for_the_lag_on_this_machines_clock_is_closed(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The way out: a cancel here the listing lag after the first one here closes it, and a
    cancel before that says how long is left (this machine's seconds, not the other's)."""
    now = time.time()
    db, job = _job(tmp_path, bucket, now - 600, host="orchestrator-box")
    _cancel(db, job, now, monkeypatch)

    early = _record(_cancel(db, job, now + 50, monkeypatch))
    assert early["outcome"] == "open"
    assert (
        "first found it absent 50 s ago: run the cancel again from this machine in 70 s"
        in (early["error"])
    )
    late = _cancel(db, job, now + LAG, monkeypatch)
    assert _record(late)["outcome"] == "not found"
    assert late["open_instances"] == []
    assert _row(db) == ("terminated", "reconciled")
    with Store.open_existing(db) as s:  # only the first absence was written
        assert [e.time for e in s.events(job, kind=UNLISTED)] == [now]


@pytest.mark.parametrize(
    ("host", "there"),
    [("orchestrator-box", "on orchestrator-box"), (None, "here")],
    ids=["another-machine-ahead", "this-clock-set-back"],
)
def test_a_request_time_in_the_future_is_named_clock_skew_and_does_not_hold_forever(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str | None, there: str
) -> None:
    """An orchestrator clock a year ahead (an RTC reset, no NTP), or this machine's clock set
    back since the request: every cancel said "requested 0 s ago ... run the cancel again in
    120 s" and the record never closed (and `resume` refused the job meanwhile)."""
    now = time.time()
    year = 365 * 86400.0
    db, job = _job(tmp_path, bucket, now - 5 + year, host=host)

    rec = _record(_cancel(db, job, now, monkeypatch))

    assert rec["outcome"] == "open"
    assert "requested 0 s ago" not in rec["error"]
    assert (
        f"its request time, written {there}, is {year - 5:.0f} s ahead of this machine's"
        in (rec["error"])
    )
    assert "(clock skew: set the clocks right, e.g. with NTP)" in rec["error"]
    assert "run the cancel again from this machine in 120 s" in rec["error"]
    assert _record(_cancel(db, job, now + LAG, monkeypatch))["outcome"] == "not found"
    assert _row(db) == ("terminated", "reconciled")


def test_on_the_orchestrators_own_machine_the_request_time_is_read_as_before(
    bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One clock: a request written here 121 s ago is past the lag and its absence is trusted
    by the first cancel; one of 30 s ago says how long to wait, from its request."""
    now = time.time()
    db, job = _job(tmp_path, bucket, now - 30, host=socket.gethostname())

    rec = _record(_cancel(db, job, now, monkeypatch))
    assert rec["outcome"] == "open"
    assert rec["error"].endswith(
        "was requested 30 s ago and aws's listing can lag 120 s "
        "behind a create, so its absence proves nothing yet; run the "
        "cancel again in 90 s"
    )
    assert _record(_cancel(db, job, now + 91, monkeypatch))["outcome"] == "not found"
    with Store.open_existing(db) as s:
        assert s.events(job, kind=UNLISTED) == []


def test_only_this_machines_first_absence_counts() -> None:
    """Another machine's sighting is on its clock: it is not counted here."""
    here = socket.gethostname()

    def ev(launch: str, t: float, host: str, kind: str = UNLISTED) -> Any:
        return SimpleNamespace(kind=kind, instance_id=launch, time=t, detail={"host": host})

    events = [
        ev("l-1", 500.0, here),
        ev("l-1", 300.0, here),
        ev("l-1", 100.0, "other-box"),
        ev("l-2", 50.0, "other-box"),
        ev("l-3", 70.0, here, kind="launch"),
    ]
    assert unlisted_since(events, here) == {"l-1": 300.0}
