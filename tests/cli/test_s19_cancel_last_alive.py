"""`spotwise cancel` of a dead local job bills its lives up to the latest wall time the store
proves its orchestrator alive at, its own records included (review-ah F12).

Each life that died with the orchestrator was billed up to the later of its last heartbeat and
its last recorded report: a life launched after the last heartbeat was billed only the 60 s
minimum (and the others stopped at the heartbeat) although the orchestrator's own records (the
launch's request, a life it closed itself) show it ran on. Only wall times the
orchestrator wrote count: never an event's time (a replay's events are on the market clock), a
launch cleanup's ``launched_at`` (the provider's start: a replay's market time) or the end a
cancel wrote (``reconciled``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from shared_helpers import record_launch
from test_s18_heartbeat import DIED, PRICE, SPEEDUP, _alive, _dead_local_job, _usd

from spotwise import jobs
from spotwise.store import Store

RECORD = "the orchestrator's last instance record"


def _launch(db: str, job: str, n: int, at: float, **fields: object) -> str:
    """One more trial of the job and its life ``l-{n}``, requested and launched at ``at``."""
    with Store.open(db) as s:
        t = s.add_trial(job, n, {"lr": 0.01})
        s.update_trial(t.id, state="running")
        fields = {"state": "running", "launched_at": at, **fields}
        record_launch(
            s, job, t.id, price_per_hour=PRICE, provider="local", id=f"l-{n}",
            requested_at=at, provider_instance_id=f"local-{n}", **fields,
        )  # fmt: skip
    return t.id


def _bills(db: str, job: str) -> dict[str, tuple[float, float, float | None]]:
    with Store.open_existing(db) as s:
        return {r.id: (r.market_seconds, r.cost_usd, r.ended_at) for r in s.list_instances(job)}


def test_lives_launched_after_the_last_heartbeat_are_billed_up_to_the_last_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding's job: the heartbeat at +30 wall s, then two more launches (+35, and a
    relaunch at +40) before the kill, no report after: the orchestrator was alive at +40, so
    the first life ran to +40 (was: +30) and the second 5 wall s, 1500 market s (was: the 60 s
    minimum, $0.015 where it ran $0.375); the last one, billed from its own start, the minimum."""
    now = time.time()
    t0 = now - 50.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, _ = _dead_local_job(db, [t0], heartbeat_at=t0 + 30.0)
    second = _launch(db, job, 1, t0 + 35.0)
    _launch(db, job, 2, t0 + 40.0)
    _alive(monkeypatch)
    monkeypatch.setattr("spotwise.release.wall_now", lambda: now)
    out = jobs.cancel(job, db=db)
    assert out["billed_to"] == RECORD + DIED
    bills = _bills(db, job)
    assert bills["l-0"] == (
        pytest.approx(40.0 * SPEEDUP),  # was 30 wall s: 9000
        pytest.approx(_usd(40.0 * SPEEDUP)),
        pytest.approx(t0 + 40.0),
    )
    assert bills["l-1"][:2] == (pytest.approx(5.0 * SPEEDUP), pytest.approx(0.375))
    assert bills["l-2"][:2] == (0.0, pytest.approx(_usd(0.0)))
    with Store.open_existing(db) as s:
        assert s.get_trial(second).cost_usd == pytest.approx(0.375)
        assert s.get_job(job).cost_usd == pytest.approx(sum(b[1] for b in bills.values()))


def test_the_orchestrators_own_records_prove_it_alive_after_its_last_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No report after the heartbeat (+30): a launch requested at +35, and a life the
    orchestrator billed and closed itself at +47 (``completed``): the lives that died with it
    ran until +47, the latest of them."""
    now = time.time()
    t0 = now - 50.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials = _dead_local_job(db, [t0], heartbeat_at=t0 + 30.0)
    _launch(db, job, 1, t0 + 35.0)
    _launch(
        db, job, 2, t0 + 36.0, state="terminated", end_reason="completed", ended_at=t0 + 47.0,
        market_seconds=11.0 * SPEEDUP, cost_usd=_usd(11.0 * SPEEDUP),
    )  # fmt: skip
    _alive(monkeypatch)
    monkeypatch.setattr("spotwise.release.wall_now", lambda: now)
    out = jobs.cancel(job, db=db)
    assert out["billed_to"] == RECORD + DIED
    bills = _bills(db, job)
    assert bills["l-0"][0] == pytest.approx(47.0 * SPEEDUP)  # was 30 wall s
    assert bills["l-0"][2] == pytest.approx(t0 + 47.0)
    assert bills["l-1"][0] == pytest.approx(12.0 * SPEEDUP)  # was 0 s: the minimum
    assert bills["l-2"][:2] == (pytest.approx(11.0 * SPEEDUP), pytest.approx(_usd(3300.0)))
    with Store.open_existing(db) as s:
        assert s.get_trial(trials[0]).cost_usd == pytest.approx(bills["l-0"][1])
        assert s.get_job(job).cost_usd == pytest.approx(sum(b[1] for b in bills.values()))


def test_only_wall_times_the_orchestrator_wrote_extend_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Later times that do not prove the orchestrator alive then: a job event (the replay's
    market clock, far ahead of the wall), a failed launch whose ``launched_at`` the launch
    cleanup took from the provider (market time), an observation's market time, and a record
    a cancel closed (``reconciled``: the cancel's own clock). The lives stop at the heartbeat."""
    now = time.time()
    t0 = now - 50.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials = _dead_local_job(db, [t0], heartbeat_at=t0 + 30.0)
    _launch(
        db, job, 1, t0 + 10.0, state="failed", end_reason="failed", ended_at=t0 + 11.0,
        launched_at=now + 1e5,  # the provider's (market) start
    )  # fmt: skip
    _launch(db, job, 2, t0 + 20.0, state="terminated", end_reason="reconciled", ended_at=now - 1.0)
    with Store.open(db) as s:
        s.add_event(job, "launch", now + 1e6, trial_id=trials[0], instance_id="l-0")
        s.add_event(job, "progress", now + 2e6, trial_id=trials[0], instance_id="l-0")
        s.add_observation(trials[0], 1, 0.5, t0 + 5.0, market_time=now + 3e6, instance_id="l-0")
    _alive(monkeypatch)
    monkeypatch.setattr("spotwise.release.wall_now", lambda: now)
    out = jobs.cancel(job, db=db)
    assert out["billed_to"] == "the orchestrator's last heartbeat" + DIED
    assert _bills(db, job)["l-0"][0::2] == (pytest.approx(30.0 * SPEEDUP), pytest.approx(t0 + 30))


def test_a_life_started_after_everything_recorded_is_billed_from_its_own_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its launch answered after its request (the latest record: +35): billed no further back
    than its start (+36): the rule's minimum; the earlier life runs to the request (+35).
    Where a launch's request is all the records prove (no report, no heartbeat), each life is
    billed to its own start and cancel says so, as before."""
    now = time.time()
    t0 = now - 50.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, _ = _dead_local_job(db, [t0], heartbeat_at=t0 + 30.0)
    _launch(db, job, 1, t0 + 35.0, launched_at=t0 + 36.0)
    _alive(monkeypatch)
    monkeypatch.setattr("spotwise.release.wall_now", lambda: now)
    assert jobs.cancel(job, db=db)["billed_to"] == RECORD + DIED
    bills = _bills(db, job)
    assert bills["l-0"][0] == pytest.approx(35.0 * SPEEDUP)
    assert bills["l-1"] == (0.0, pytest.approx(_usd(0.0)), pytest.approx(t0 + 36.0))

    alone = f"sqlite:///{tmp_path / 'alone.db'}"
    job, _ = _dead_local_job(alone, [])
    _launch(alone, job, 0, t0 + 35.0)
    out = jobs.cancel(job, db=alone)
    assert out["billed_to"] == "their start (no report was recorded)" + DIED
    assert _bills(alone, job)["l-0"][:2] == (0.0, pytest.approx(_usd(0.0)))
