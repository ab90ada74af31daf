"""`spotwise cancel` of a dead cloud job that leaves an instance carrying the job's tags
running, because the job did not launch it (EC2's "Launch more like this" copies every tag),
exits 4 (review-aa F5: it exited 0, and a cron caller checking ``$?`` never learnt that a
billed instance with the job's tags runs on)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_ownership_identity import AwsJob, _states  # the suite's own moto job
from typer.testing import CliRunner

from spotwise.cli.app import app
from spotwise.store import Store

HOUR = 3600.0


@pytest.fixture
def job(bucket: str, tmp_path: Path) -> AwsJob:
    return AwsJob(tmp_path, bucket)


def test_cancel_exits_4_when_it_leaves_an_instance_with_the_jobs_tags_running(
    job: AwsJob,
) -> None:
    now = time.time()
    known = job.record(state="running", launched_at=now - HOUR)
    own = job.launch(known, now - HOUR)
    with Store.open_existing(job.db) as s:
        s.update_instance(known, provider_instance_id=own)
        s.update_job(job.id, state="running", pid=0)  # its orchestrator died
    copy = job.copy_of(known, now - HOUR)

    res = CliRunner().invoke(app, ["cancel", job.id, "--db", job.db, "--json"])

    assert res.exit_code == 4, res.output
    out = json.loads(res.output)
    assert out["state"] == "cancelled" and out["open_instances"] == []
    assert [line.split()[0] for line in out["not_ours"]] == [copy]
    assert _states() == {own: "terminated", copy: "running"}  # ours released, the copy not
