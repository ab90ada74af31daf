"""A running job's orchestrator records when it was last alive (``job.heartbeat_at``, revision
0004), and `spotwise cancel` of a local job whose orchestrator died (kill -9, OOM, a reboot)
bills each trial life that died with it up to then (review-ad F2).

Its trial processes die with the orchestrator, and nothing recorded when: each such life was
billed up to the job's last report, or to its own start (the 60 s minimum) when none was
recorded: a job killed 30 wall s after its launches, before any report, was billed 60 market s
a life where each ran ~9000 (30 wall s at the replay's 300x)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from shared_helpers import local_replay_spec, record_launch

from spotwise import jobs
from spotwise.errors import StoreError
from spotwise.store import Store

ORCH_TESTS = str(Path(__file__).resolve().parents[1] / "orchestrator")
if ORCH_TESTS not in sys.path:
    sys.path.insert(0, ORCH_TESTS)
from test_running_totals import ScriptedMarket, run_scripted  # noqa: E402 (the path above)

SPEEDUP, PRICE = 300.0, 0.9  # the replay's market seconds per wall second; $/h of each life
MINIMUM_S = 60.0  # the replayed AWS rule bills a started life at least this
DIED = ", as their trial processes died with the orchestrator"


def _usd(market_s: float) -> float:
    return max(market_s, MINIMUM_S) * PRICE / 3600.0


def _local_spec() -> str:
    return local_replay_spec(SPEEDUP)


def _dead_local_job(db: str, launched: list[float], **job: Any) -> tuple[str, list[str]]:
    """A local replay job recorded as running under pid 0 (no orchestrator), one running trial
    and local life per ``launched`` wall time (launch ids ``l-0``, ``l-1``…, instance ids
    ``local-0``…); ``job``: more columns (``heartbeat_at``). Returns the job and trial ids."""
    with Store.open(db) as s:
        j = s.create_job("j", _local_spec(), "job.yaml", "spot-greedy", "maximize")
        s.update_job(j.id, state="running", pid=0, **job)
        trials = []
        for n, at in enumerate(launched):
            t = s.add_trial(j.id, n, {"lr": 0.01})
            s.update_trial(t.id, state="running")
            record_launch(
                s, j.id, t.id, price_per_hour=PRICE, provider="local", id=f"l-{n}",
                state="running", launched_at=at, provider_instance_id=f"local-{n}",
            )  # fmt: skip
            trials.append(t.id)
    return j.id, trials


def _alive(monkeypatch: pytest.MonkeyPatch, *instance_ids: str) -> None:
    """The cancel finds these trial processes alive (and kills them): all others died."""
    from spotwise.planner import reconcile

    monkeypatch.setattr(reconcile, "reconcile", lambda spec, job_id: list(instance_ids))


def test_a_life_that_never_reported_is_billed_up_to_the_last_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding's job: two trials launched, the orchestrator killed before either reported,
    its last heartbeat 30 wall s after the first launch: each life ran until then."""
    now = time.time()
    t0 = now - 40.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials = _dead_local_job(db, [t0, t0 + 0.12], heartbeat_at=t0 + 30.0)
    _alive(monkeypatch)  # both died with the orchestrator
    out = jobs.cancel(job, db=db)
    assert out["state"] == "cancelled"
    assert out["billed_to"] == "the orchestrator's last heartbeat" + DIED
    assert out["message"].endswith(
        "0 tagged instance(s) terminated, 2 instance record(s) closed and billed up to the "
        "orchestrator's last heartbeat" + DIED
    )
    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
        # 30 wall s = 9000 market s at 300x (was 0 s, billed the 60 s minimum)
        assert rows["l-0"].market_seconds == pytest.approx(30.0 * SPEEDUP)
        assert rows["l-1"].market_seconds == pytest.approx((30.0 - 0.12) * SPEEDUP)
        assert rows["l-0"].cost_usd == pytest.approx(_usd(9000.0))  # $2.25, was $0.015
        assert [r.ended_at for r in rows.values()] == [pytest.approx(t0 + 30.0)] * 2
        costs = [s.get_trial(t).cost_usd for t in trials]
        assert costs == [pytest.approx(rows["l-0"].cost_usd), pytest.approx(rows["l-1"].cost_usd)]
        assert s.get_job(job).cost_usd == pytest.approx(sum(r.cost_usd for r in rows.values()))


@pytest.mark.parametrize(
    ("beat", "report", "until", "which"),
    [
        (30.0, 20.0, 30.0, "the orchestrator's last heartbeat"),
        (10.0, 20.0, 20.0, "the job's last report"),  # a report after the last heartbeat
    ],
)
def test_a_dead_life_is_billed_to_the_later_of_report_and_heartbeat_from_its_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    beat: float,
    report: float,
    until: float,
    which: str,
) -> None:
    """Lives launched at +0 and +5 (died) and +1 (found alive by the cancel: killed now, billed
    up to now); the job's last report at ``report``, its heartbeat at ``beat`` (wall s after
    the first launch). A life launched after both is billed from its own start, and its launch
    record proves the orchestrator alive then: tests/cli/test_s19_cancel_last_alive.py."""
    now = time.time()
    t0 = now - 50.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials = _dead_local_job(db, [t0, t0 + 5.0, t0 + 1.0], heartbeat_at=t0 + beat)
    with Store.open_existing(db) as s:
        s.add_observation(trials[0], 3, 0.5, t0 + report, instance_id="l-0")
    _alive(monkeypatch, "local-2")
    monkeypatch.setattr("spotwise.release.wall_now", lambda: now)  # the cancel's clock
    out = jobs.cancel(job, db=db)
    assert out["billed_to"] == which + DIED
    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
    assert rows["l-0"].market_seconds == pytest.approx(until * SPEEDUP)
    assert rows["l-0"].ended_at == pytest.approx(t0 + until)
    assert rows["l-1"].market_seconds == pytest.approx((until - 5.0) * SPEEDUP)
    assert rows["l-1"].ended_at == pytest.approx(t0 + until)
    assert rows["l-2"].market_seconds == pytest.approx(49.0 * SPEEDUP)  # killed now: to now


def test_a_heartbeat_after_now_bills_no_further_than_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A heartbeat read as later than the cancel (this machine's clock stepped back since):
    the life is billed up to now, never past it."""
    now = time.time()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, _ = _dead_local_job(db, [now - 10.0], heartbeat_at=now + 3600.0)
    _alive(monkeypatch)
    monkeypatch.setattr("spotwise.release.wall_now", lambda: now)  # the cancel's clock
    jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        (row,) = s.list_instances(job)
    assert row.market_seconds == pytest.approx(10.0 * SPEEDUP)  # was timed: flaky under load
    assert row.ended_at == pytest.approx(now)


def test_status_shows_the_last_heartbeat(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, _ = _dead_local_job(db, [100.0], heartbeat_at=130.5)
    assert jobs.status(job, db=db)["heartbeat_at"] == 130.5
    assert jobs.status(None, db=db)["jobs"][0]["heartbeat_at"] == 130.5


# ---- the heartbeat itself ----------------------------------------------------------------


class _Beats:
    """A store that records each heartbeat written (``fail``: the next writes raise)."""

    def __init__(self) -> None:
        self.written: list[tuple[str, float]] = []
        self.fail = 0

    def heartbeat(self, job_id: str, at: float) -> None:
        if self.fail:
            self.fail -= 1
            raise StoreError("writing job 'j-1''s heartbeat: database is locked")
        self.written.append((job_id, at))


def test_the_heartbeat_is_written_at_once_then_at_most_every_5_s() -> None:
    from spotwise.store.heartbeat import HEARTBEAT_EVERY_WALL_S, Heartbeat

    assert HEARTBEAT_EVERY_WALL_S == 5.0
    clock = [0.0]
    store: Any = _Beats()
    beat = Heartbeat(store, "j-1", clock=lambda: clock[0], wall=lambda: 1000.0 + clock[0])
    wrote = []
    for t in [0.0, 0.05, 1.0, 4.99, 5.0, 5.1, 9.99, 10.0, 30.0]:  # the loop's passes
        clock[0] = t
        wrote.append(beat.beat())
    assert wrote == [True, False, False, False, True, False, False, True, True]
    assert store.written == [("j-1", 1000.0), ("j-1", 1005.0), ("j-1", 1010.0), ("j-1", 1030.0)]


def test_a_heartbeat_that_cannot_be_written_never_stops_the_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The database locked: the write is skipped (logged at debug), and tried again only when
    the next one is due, not at every pass."""
    from spotwise.store.heartbeat import Heartbeat

    clock = [0.0]
    store: Any = _Beats()
    store.fail = 1
    beat = Heartbeat(store, "j-1", clock=lambda: clock[0], wall=lambda: 2000.0 + clock[0])
    with caplog.at_level("DEBUG", logger="spotwise.store"):
        assert beat.beat() is False  # raised nothing
    assert "j-1: no heartbeat written" in caplog.text and "database is locked" in caplog.text
    assert all(r.levelname == "DEBUG" for r in caplog.records)
    clock[0] = 1.0
    assert beat.beat() is False and store.written == []  # not retried at once
    clock[0] = 5.0
    assert beat.beat() is True and store.written == [("j-1", 2005.0)]


def test_the_store_writes_the_heartbeat_of_its_job_only(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        a = s.create_job("a", "{}", "a.yaml", "spot-greedy", "maximize")
        b = s.create_job("b", "{}", "b.yaml", "spot-greedy", "maximize")
        s.heartbeat(a.id, 123.25)
        assert (s.get_job(a.id).heartbeat_at, s.get_job(b.id).heartbeat_at) == (123.25, None)
        s.heartbeat(a.id, 130.0)
        assert s.get_job(a.id).heartbeat_at == 130.0


# ---- the orchestrator writes it -------------------------------------------------------------


def _count_heartbeats(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    written: list[float] = []
    real = Store.heartbeat

    def spy(self: Store, job_id: str, at: float) -> None:
        written.append(at)
        real(self, job_id, at)

    monkeypatch.setattr(Store, "heartbeat", spy)
    return written


@pytest.mark.timeout(120)
def test_the_orchestrator_beats_at_its_start_and_not_at_every_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job of many passes (a scripted market: 60 market s a pass) that ends within the
    heartbeat's period writes one heartbeat, at its start: no write per pass."""
    from spotwise.planner import orchestrator

    monkeypatch.setattr(orchestrator, "HEARTBEAT_EVERY_WALL_S", 3600.0)
    written = _count_heartbeats(monkeypatch)
    market = ScriptedMarket(steps=4)
    passes: list[float] = []
    market.on_pass = lambda m: passes.append(m.t)  # once a pass
    before = time.time()
    summary, db = run_scripted(tmp_path, monkeypatch, market)
    assert summary["state"] == "succeeded"
    assert len(passes) >= 6 and len(written) == 1
    assert before <= written[0] <= time.time()
    # the totals' save carries later ones (tests/cli/test_s19_cancel_heartbeat_totals.py)
    assert jobs.status(summary["job_id"], db=db)["heartbeat_at"] >= written[0]


@pytest.mark.timeout(120)
def test_the_orchestrator_beats_again_in_its_loop_once_one_is_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.planner import orchestrator

    monkeypatch.setattr(orchestrator, "HEARTBEAT_EVERY_WALL_S", 0.0)  # due at every pass
    written = _count_heartbeats(monkeypatch)
    market = ScriptedMarket(steps=4)
    summary, db = run_scripted(tmp_path, monkeypatch, market)
    assert len(written) >= 6 and written == sorted(written)
    with Store.open_existing(db) as s:
        job = s.get_job(summary["job_id"])
    assert job.heartbeat_at == written[-1]
    assert job.started_at is not None and job.ended_at is not None
    assert job.started_at <= written[0] and written[-1] <= job.ended_at


@pytest.mark.timeout(120)
def test_a_resumed_orchestrator_writes_its_own_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job cancelled after its first trial, resumed: the resumed run's heartbeat replaces
    the first run's."""
    from spotwise.planner import orchestrator

    monkeypatch.setattr(orchestrator, "HEARTBEAT_EVERY_WALL_S", 3600.0)
    handle: dict[str, Any] = {}
    real = orchestrator.on_signals

    def capture(callback: Any) -> Any:
        handle["cancel"] = callback
        return real(callback)

    monkeypatch.setattr(orchestrator, "on_signals", capture)
    market = ScriptedMarket(steps=2)
    market.on_pass = lambda m: handle.pop("cancel")() if m.launched and "cancel" in handle else None
    summary, db = run_scripted(tmp_path, monkeypatch, market, trials=2)
    assert summary["state"] == "cancelled"
    job = summary["job_id"]
    with Store.open(db) as s:
        s.update_job(job, heartbeat_at=1.0)  # the first run's, long ago
    market.on_pass = None
    written = _count_heartbeats(monkeypatch)
    before = time.time()
    again = jobs.resume(job, db=db, run_root=tmp_path / "runs")
    assert again["state"] == "succeeded" and len(written) == 1
    assert jobs.status(job, db=db)["heartbeat_at"] >= written[0] >= before  # and its saves


# ---- a database from before the heartbeat -----------------------------------------------------


def test_a_database_of_revision_0003_upgrades_and_cancel_still_bills_its_dead_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its job has no heartbeat (NULL): a dead life is billed as before (its start: the
    minimum; the job's last report when it has one)."""
    from alembic import command

    from spotwise.store.db import alembic_config, head_revision, make_engine

    db = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(db)
    with engine.connect() as conn:
        command.upgrade(alembic_config(conn), "0003")
        conn.execute(
            sa.text(
                "INSERT INTO job (id, name, spec_json, spec_path, policy, state, created_at, "
                "direction, cost_usd, on_demand_cost_usd, revocations, migrations, "
                "early_stopped, pid, pid_start) VALUES ('j-old', 'old', :spec, 'job.yaml', "
                "'spot-greedy', 'running', 1.0, 'maximize', 0, 0, 0, 0, 0, 0, NULL)"
            ),
            {"spec": _local_spec()},
        )
        conn.commit()
    engine.dispose()

    now = time.time()
    with Store.open(db) as s:
        with s.engine.connect() as conn:
            version = conn.exec_driver_sql("SELECT version_num FROM alembic_version").all()
            assert version == [(head_revision(),)]  # 0004 and every later revision
            assert "heartbeat_at" in {c["name"] for c in sa.inspect(conn).get_columns("job")}
        assert s.get_job("j-old").heartbeat_at is None
        t = s.add_trial("j-old", 0, {"lr": 0.01})
        s.update_trial(t.id, state="running")
        record_launch(
            s, "j-old", t.id, price_per_hour=PRICE, provider="local", id="l-0",
            state="running", launched_at=now - 20.0, provider_instance_id="local-0",
        )  # fmt: skip
    _alive(monkeypatch)
    out = jobs.cancel("j-old", db=db)
    assert out["state"] == "cancelled"
    assert out["billed_to"] == "their start (no report was recorded)" + DIED
    assert jobs.status("j-old", db=db)["heartbeat_at"] is None
    with Store.open_existing(db) as s:
        (row,) = s.list_instances("j-old")
    assert (row.market_seconds, row.end_reason) == (0.0, "reconciled")
    assert row.cost_usd == pytest.approx(_usd(0.0))
