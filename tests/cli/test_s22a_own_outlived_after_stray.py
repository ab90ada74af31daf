"""`spotwise cancel`'s sweep of a finished job bills the record's own instance that outlived
its record for the whole of its extra time, even when a stray of the same launch was billed to
the record first (s21 helper A's note, gap (a)).

The own instance's extra seconds were its life less the record's ``market_seconds``, and the
record's seconds (and dollars, and the on-demand reference's start) held the stray's part
too: billed first (earlier in the listing, or by an earlier cancel), the stray's hour was
taken off the own instance's bill. The record's own life is now its bill less the parts that
name other instances.

Record l-ok: its own instance i-ok launched at T-3h, billed an hour ($0.90 at $0.90/h) and
closed at T-2h; i-ok still runs at T, with a report at T-30min. i-x, a retried create of l-ok,
runs from T-1h. At T: i-x is billed its hour ($0.90, 3600 s); i-ok its two more hours ($1.80,
7200 s) and an on-demand reference for its useful 5400 s (up to its last report) at $3.06/h
($4.59)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cancel import _cloud_job

from spotwise import release
from spotwise.planner import reconcile
from spotwise.providers.base import TAG_JOB, TAG_LAUNCH, Instance, InstanceState, Market, Offer
from spotwise.release_sweep import sweep_finished
from spotwise.store import Store

T, HOUR, PRICE, OD = 1_700_000_000.0, 3600.0, 0.9, 3.06


def _finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, list[Any]]:
    """The succeeded job (l-ok as above), the cancel's clock at T, and the listings the
    sweeps will make in turn (each a list of instance ids, all terminated by that sweep)."""
    ok = {
        "id": "l-ok", "state": "terminated", "end_reason": "completed",
        "provider_instance_id": "i-ok", "launched_at": T - 3 * HOUR, "requested_at": T - 3 * HOUR,
        "ended_at": T - 2 * HOUR, "market_seconds": HOUR, "cost_usd": PRICE,
    }  # fmt: skip
    db, job = _cloud_job(tmp_path, None, [ok])
    with Store.open_existing(db) as s:
        s.update_job(job, state="succeeded", pid=None, ended_at=T - 2 * HOUR, cost_usd=PRICE)
        trial = s.get_instance("l-ok").trial_id
        s.update_trial(trial, state="completed", cost_usd=PRICE)
        s.add_observation(trial, 3, 0.9, wall_time=T - HOUR / 2, instance_id="l-ok")
    monkeypatch.setattr(release, "wall_now", lambda: T)
    starts = {"i-ok": T - 3 * HOUR, "i-x": T - HOUR}
    listings: list[Any] = []

    def listed(spec: Any, job_id: str, held: list[Any], spare: Any, **_: Any) -> Any:
        offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, PRICE, OD)
        tags = {TAG_JOB: job, TAG_LAUNCH: "l-ok"}
        found = [
            Instance(i, offer, InstanceState.RUNNING, tags, starts[i], launch_identity="l-ok")
            for i in listings.pop(0)
        ]
        return reconcile.Reconciled(terminated=[i.instance_id for i in found], listed=found)

    monkeypatch.setattr(reconcile, "reconcile_records", listed)
    return db, job, listings


def _parts(row: Any) -> dict[str, tuple[float, float, float]]:
    return {
        p["instance"]: (p["cost_usd"], p["market_seconds"], p["on_demand_cost_usd"])
        for p in json.loads(row.extra_bills_json or "[]")
    }


def _billed(out: dict[str, Any]) -> dict[str, float]:
    return {f["instance_id"]: f["billed_usd"] for f in out["found_instances"]}


def _check(db: str, job_id: str) -> None:
    """Each instance billed exactly its own time, once, and the sums follow."""
    with Store.open_existing(db) as s:
        row = s.get_instance("l-ok")
        trial_cost, job = s.get_trial(row.trial_id).cost_usd, s.get_job(job_id)
    parts = _parts(row)
    assert parts["i-x"] == (pytest.approx(PRICE), HOUR, 0.0)
    # was (0.9, 3600.0, 1.53): the stray's hour taken off i-ok's two, and off its reference
    assert parts["i-ok"] == (pytest.approx(2 * PRICE), 2 * HOUR, pytest.approx(5400 * OD / HOUR))
    assert row.cost_usd == pytest.approx(4 * PRICE)  # was $2.70
    assert row.market_seconds == 4 * HOUR  # was 10800
    assert row.on_demand_cost_usd == pytest.approx(5400 * OD / HOUR)  # was $1.53
    assert trial_cost == pytest.approx(4 * PRICE)
    assert (job.cost_usd, job.on_demand_cost_usd) == (
        pytest.approx(4 * PRICE),
        pytest.approx(5400 * OD / HOUR),
    )


def test_the_own_instance_listed_after_a_stray_of_its_launch_is_billed_its_whole_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One cancel lists i-x, then i-ok: i-x's part is on the record when i-ok is billed."""
    db, job_id, listings = _finished(tmp_path, monkeypatch)
    listings.append(["i-x", "i-ok"])
    with Store.open_existing(db) as s:
        out = sweep_finished(s, s.get_job(job_id), "succeeded")
    assert _billed(out) == {"i-x": pytest.approx(PRICE), "i-ok": pytest.approx(2 * PRICE)}
    _check(db, job_id)


def test_the_own_instance_after_an_earlier_cancel_billed_a_stray_is_billed_its_whole_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier cancel, whose listing did not show i-ok yet, billed i-x; a later one lists
    both: i-x is not billed again, i-ok is billed its two hours (was one)."""
    db, job_id, listings = _finished(tmp_path, monkeypatch)
    listings.extend([["i-x"], ["i-ok", "i-x"]])
    with Store.open_existing(db) as s:
        first = sweep_finished(s, s.get_job(job_id), "succeeded")
        second = sweep_finished(s, s.get_job(job_id), "succeeded")
    assert _billed(first) == {"i-x": pytest.approx(PRICE)}
    assert _billed(second) == {"i-ok": pytest.approx(2 * PRICE), "i-x": 0.0}
    assert [f["billed_by_another"] for f in second["found_instances"]] == [False, True]
    _check(db, job_id)


def test_the_own_instance_listed_first_is_billed_its_whole_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The order that was right already (i-ok billed before any part of i-x): a guard."""
    db, job_id, listings = _finished(tmp_path, monkeypatch)
    listings.append(["i-ok", "i-x"])
    with Store.open_existing(db) as s:
        out = sweep_finished(s, s.get_job(job_id), "succeeded")
    assert _billed(out) == {"i-ok": pytest.approx(2 * PRICE), "i-x": pytest.approx(PRICE)}
    _check(db, job_id)
