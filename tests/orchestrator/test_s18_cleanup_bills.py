"""A failed launch's or a stray's bill adds to what its record already holds (review-ah F4, F9).

The drain's stray sweep billed two strays of one launch onto one stale copy of the record (the
first stray's dollars vanished from the record and every report, and a negative part was
written); the drain's bill of a failed launch's refused instance replaced what the launch's
tries had already put on the record. Both are now added to the record as it is. The real
LaunchCleanup methods run on a real store, with a stand-in backend.
"""

from __future__ import annotations

import json
import time
import types
from pathlib import Path

import pytest
from shared_helpers import record_launch, record_life

from spotwise import costs
from spotwise.planner.launch_cleanup import LaunchCleanup, Unconfirmed
from spotwise.providers.base import TAG_JOB, TAG_LAUNCH, Instance, InstanceState, Market, Offer
from spotwise.providers.billing import rule_for
from spotwise.store import Store

PRICE = 0.95
OFFER = Offer(
    provider="aws",
    region="us-east-1",
    zone="us-east-1a",
    instance_type="p3.2xlarge",
    market=Market("spot"),
    price_per_hour=PRICE,
    on_demand_price_per_hour=3.0,
)
SPEC = json.dumps({"providers": [{"name": "aws", "regions": ["us-east-1"]}]})


def _cleanup(store: Store, **parts: object) -> LaunchCleanup:
    lc = object.__new__(LaunchCleanup)
    lc.store, lc.job_id, lc.leftover_ids, lc.unconfirmed = store, "j-aws", [], {}
    lc._event = lambda *a, **k: None  # type: ignore[method-assign]
    for name, value in parts.items():
        setattr(lc, name, value)
    return lc


def test_two_strays_of_one_launch_both_land_on_its_record(tmp_path: Path) -> None:
    now = time.time()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        s.create_job("j", SPEC, "job.yaml", "spot-greedy", "maximize", job_id="j-aws")
        s.update_job("j-aws", state="running")
        record_life(
            s, "j-aws", 0, "l-0", requested_at=now - 7200, launched_at=now - 7200,
            provider_instance_id="i-0", state="terminated", end_reason="completed",
            ended_at=now - 3600, cost_usd=PRICE, on_demand_cost_usd=3.0, market_seconds=3600.0,
        )  # fmt: skip
        trial_id = s.get_instance("l-0").trial_id
    tags = {TAG_JOB: "j-aws", TAG_LAUNCH: "l-0"}
    strays = [  # 1 h and 30 min old
        Instance(f"i-s{n}", OFFER, InstanceState.RUNNING, launched_at=now - 1800 * n, tags=tags)
        for n in (2, 1)
    ]

    def bill(t: object, insts: object, start: float, end: float, offer: object) -> tuple:
        return PRICE * (end - start) / 3600.0, end - start

    with Store.open_existing(db) as store:
        lc = _cleanup(
            store,
            backend=types.SimpleNamespace(
                provisioner=types.SimpleNamespace(describe=lambda _: strays)
            ),
            trials=[types.SimpleNamespace(trial_id=trial_id)],
            _ours=lambda found, ids, now: found,
            _terminate_quietly=lambda t, ids, now, what: True,
            _bill_discarded=bill,
        )
        lc._sweep_strays(now)
        row = store.get_instance("l-0")
    assert row.cost_usd == pytest.approx(PRICE * 2.5)  # was $1.425: the first stray lost
    assert row.market_seconds == pytest.approx(9000.0)
    parts = json.loads(row.extra_bills_json or "[]")
    assert [p["cost_usd"] for p in parts] == [pytest.approx(PRICE), pytest.approx(PRICE / 2)]
    everything = costs.report(since="all", until="now", db=db)  # `now`: the bills just written
    assert everything["totals"]["cost_usd"] == pytest.approx(PRICE * 2.5)


def test_a_refused_leftover_adds_to_what_the_launchs_tries_terminated(tmp_path: Path) -> None:
    now = time.time()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        s.create_job("j", SPEC, "job.yaml", "spot-greedy", "maximize", job_id="j-aws")
        t = s.add_trial("j-aws", 0, {"lr": 0.1})
        record_launch(s, "j-aws", t.id, price_per_hour=PRICE, id="l-0")
        # what its tries terminated: one instance, an hour
        s.update_instance("l-0", end_reason="unconfirmed", cost_usd=PRICE, market_seconds=3600.0)
    trial = types.SimpleNamespace(trial_id=t.id, cost_usd=PRICE)
    u = Unconfirmed(trial, ["i-refused"], now - 1800, OFFER)
    u.cost, u.seconds = PRICE, 3600.0  # what _close_failed_launch kept of its tries
    with Store.open_existing(db) as store:
        lc = _cleanup(
            store,
            spent_usd=PRICE,
            backend=types.SimpleNamespace(
                segments=lambda o, a, b: [(b - a, o.price_per_hour)],
                rule_of=lambda o: rule_for("aws"),
            ),
        )
        lc._bill_leftover_launch("l-0", u, now)
        row = store.get_instance("l-0")
    assert trial.cost_usd == pytest.approx(PRICE * 1.5) and lc.spent_usd == pytest.approx(1.425)
    assert row.cost_usd == pytest.approx(PRICE * 1.5)  # was $0.475: the tries' $0.95 replaced
    assert row.market_seconds == pytest.approx(5400.0)
