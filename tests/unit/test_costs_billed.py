"""`spotwise report`: billed hours beside instance hours (review-u finding 3).

The "hours" column was labelled "billed instance time" but summed every second of every life,
the revoked first hours AWS refunds included: for the README job it said 7.22 h where 4.75 h
were billed, so $ / hours ($0.72/h) was below every price paid ($0.918 to $1.22/h).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from shared_helpers import record_life
from typer.testing import CliRunner

from spotwise import costs
from spotwise.bill_parts import billed_seconds
from spotwise.cli.app import app
from spotwise.costs import JobInfo, summarize
from spotwise.store import Store

NOW = 1_790_000_000.0
H = 3600.0


def _life(**kw: Any) -> SimpleNamespace:
    row = {
        "id": "l-1",
        "job_id": "j-a",
        "provider": "aws",
        "zone": "us-east-1a",
        "instance_type": "p3.2xlarge",
        "market": "spot",
        "price_per_hour": 1.0,
        "provider_instance_id": "i-1",
        "state": "terminated",
        "requested_at": NOW - 5 * H,
        "launched_at": NOW - 5 * H,
        "ended_at": NOW - H,
        "end_reason": "completed",
        "cost_usd": 1.0,
        "on_demand_cost_usd": 3.06,
        "market_seconds": H,
    }
    row.update(kw)
    return SimpleNamespace(**row)


@pytest.mark.parametrize(
    ("life", "billing", "seconds"),
    [
        # AWS: a spot instance it revokes in its first hour is refunded
        (dict(end_reason="revoked", market_seconds=1393.2, cost_usd=0.0), None, 0.0),
        # ... after its first hour it is billed, per second
        (dict(end_reason="revoked", market_seconds=3700.0, cost_usd=1.03), None, 3700.0),
        # per second, rounded up; a short life is billed AWS's 60 s minimum
        (dict(market_seconds=2563.4, cost_usd=0.71), None, 2564.0),
        (dict(end_reason="stopped", market_seconds=30.0, cost_usd=1 / 60), None, 60.0),
        # GCP refunds the first minute only; Azure refunds nothing and bills at least 300 s
        # (s22, review-au F5: Microsoft's 5-minute minimum from 2025-06-01; was 30 s here)
        (dict(provider="gcp", end_reason="revoked", market_seconds=30.0, cost_usd=0.0), None, 0),
        (
            dict(provider="gcp", end_reason="revoked", market_seconds=120.0, cost_usd=0.03),
            None,
            120,
        ),
        (
            dict(provider="azure", end_reason="revoked", market_seconds=30.0, cost_usd=0.01),
            None,
            300,
        ),
        # a life the provider took that `cancel` closed: its $0 bill says it was refunded
        (dict(end_reason="reconciled", market_seconds=900.0, cost_usd=0.0), None, 0.0),
        # a replayed life names the trace's cloud (aws) but was billed by the replay's rule
        (dict(end_reason="revoked", market_seconds=1800.0, cost_usd=0.5), "gcp", 1800.0),
        (dict(end_reason="revoked", market_seconds=1800.0, cost_usd=0.0), "aws", 0.0),
    ],
)
def test_billed_seconds_follow_each_lifes_billing_rule(
    life: dict[str, Any], billing: str | None, seconds: float
) -> None:
    assert billed_seconds(_life(**life), billing) == pytest.approx(seconds)


def test_cost_per_billed_hour_is_a_price_that_was_paid() -> None:
    """The README job's shape: lives at $1.2201 and $0.918/h, half of them revoked in their
    first hour (refunded). $ / hours fell below both prices; $ / billed hours lies between."""
    ended = [
        _life(
            id="a", price_per_hour=1.2201, end_reason="revoked", market_seconds=1393.2, cost_usd=0
        ),
        _life(
            id="b", price_per_hour=0.918, end_reason="revoked", market_seconds=1751.4, cost_usd=0
        ),
        _life(id="c", price_per_hour=1.2201, market_seconds=2564.0, cost_usd=2564 * 1.2201 / H),
        _life(id="d", price_per_hour=0.918, market_seconds=2824.0, cost_usd=2824 * 0.918 / H),
    ]
    infos = {"j-a": JobInfo("succeeded", running=False, simulated=False)}
    tot = summarize(ended, [], infos, by="provider", since=None, now=NOW)["totals"]
    assert tot["hours"] == pytest.approx((1393.2 + 1751.4 + 2564 + 2824) / H)  # kept as it was
    assert tot["billed_hours"] == pytest.approx((2564 + 2824) / H)
    assert tot["cost_usd"] / tot["hours"] < 0.918
    assert 0.918 < tot["cost_usd"] / tot["billed_hours"] < 1.2201


def _store(tmp_path: Path) -> str:
    """A real AWS job (one refunded life, one billed hour) and a replayed job whose replay
    bills by GCP's rule (a life revoked after 30 min: billed, though AWS would refund it)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    specs = {
        "j-real": {"providers": [{"name": "aws", "region": "us-east-1"}]},
        "j-sim": {"providers": [{"name": "local", "replay": {"billing": "gcp"}}]},
    }
    with Store.open(db) as s:
        for job_id, spec in specs.items():
            s.create_job(
                job_id, json.dumps(spec), "job.yaml", "spotwise", "maximize", job_id=job_id
            )
            s.update_job(job_id, state="succeeded")
        for n, (job, lid, reason, seconds, cost) in enumerate(
            [
                ("j-real", "l-refunded", "revoked", 0.5 * H, 0.0),
                ("j-real", "l-billed", "completed", 1.0 * H, 0.95),
                ("j-sim", "l-sim", "revoked", 0.5 * H, 0.475),
            ]
        ):
            record_life(
                s, job, n, lid, requested_at=NOW - 3 * H, state="terminated",
                launched_at=NOW - 3 * H, ended_at=NOW - H, end_reason=reason,
                cost_usd=cost, on_demand_cost_usd=3.06 * seconds / H, market_seconds=seconds,
                provider_instance_id=f"i-{lid}",
            )  # fmt: skip
    return db


def test_report_json_adds_billed_hours_and_keeps_hours(tmp_path: Path) -> None:
    out = costs.report(since="all", db=_store(tmp_path), now=NOW)
    assert out["totals"]["hours"] == pytest.approx(1.5)
    assert out["totals"]["billed_hours"] == pytest.approx(1.0)
    assert out["replay"]["totals"]["billed_hours"] == pytest.approx(0.5)  # GCP's rule
    assert [(g["key"], g["billed_hours"]) for g in out["groups"]] == [("aws", pytest.approx(1.0))]


def test_report_table_shows_billed_hours_and_says_what_hours_are(tmp_path: Path) -> None:
    done = CliRunner().invoke(
        app, ["report", "--since", "all", "--db", _store(tmp_path)], env={"COLUMNS": "80"}
    )
    assert done.exit_code == 0, done.output
    text = done.stdout
    head = next(line for line in text.splitlines() if line.startswith("provider"))
    columns = ["provider", "lives", "revoked", "hours", "billed", "h", "$", "on-demand", "$"]
    assert head.split() == [*columns, "saved"]
    real = text.split("replayed market")[0]
    (total,) = [line.split() for line in real.splitlines() if line.startswith("total")]
    assert total[:6] == ["total", "2", "1", "1.50", "1.00", "0.9500"]
    flat = " ".join(text.split())
    assert "billed instance time" not in flat
    assert "hours: instance time, refunded time included" in flat
    assert "billed h: the time charged for" in flat
