"""`spotwise cancel` of a dead local job resumed on a machine whose clock is behind the one its
earlier run used (review-aj F3).

What proves the orchestrator alive (:func:`~spotwise.last_alive.last_alive`) was the latest of
its heartbeat, its reports and its instance records, across every run of the job: the earlier
run's records, on a clock ahead of the resumed run's, were later than the resumed run's death,
and its dead lives were billed up to them (up to the cancel, here 20 wall s more: 6000 market
s of a life that ran 9000). The heartbeat is the latest run's (each run rewrites it, a resume
at once) and is written at least every 5 wall s while the loop runs; a report or record more
than ``LATE_S`` after it is not the latest run's, and no longer counts."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import pytest
from test_s18_heartbeat import DIED, SPEEDUP, _alive, _dead_local_job, _usd
from test_s19_cancel_last_alive import _bills, _launch

from spotwise import jobs
from spotwise.last_alive import LATE_S
from spotwise.planner.ledger import STOP_TIMEOUT_WALL_S
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.proc_group import SETTLE_S
from spotwise.store import Store
from spotwise.store.heartbeat import HEARTBEAT_EVERY_WALL_S

BEAT = "the orchestrator's last heartbeat"
RECORD = "the orchestrator's last instance record"


def _earlier_run(db: str, job: str, at: float) -> None:
    """The job's first run, on machine A: a trial whose life it billed and closed itself
    (``completed``) at ``at`` on A's clock, 1 wall s after its start, and its last report
    there, 0.5 s before."""
    trial = _launch(
        db, job, 1, at - 1.0, state="terminated", end_reason="completed", ended_at=at,
        market_seconds=SPEEDUP, cost_usd=_usd(SPEEDUP),
    )  # fmt: skip
    with Store.open(db) as s:
        s.add_observation(trial, 3, 0.5, at - 0.5, market_time=at - 0.5, instance_id="l-1")


def test_an_earlier_runs_records_on_a_clock_ahead_do_not_bill_the_resumed_runs_lives_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ran the job first; its clock is 10 min ahead of B's, so its last record reads +430
    on B's clock although it was written before B's run began. B resumed the job, launched a
    life at +0 (B's clock), wrote its last heartbeat at +30 and was killed; the cancel runs at
    +50. The life ran until +30: 9000 market s, $2.25 (was: until the cancel, capped at +50:
    15000 market s, $3.75, and billed "up to the orchestrator's last instance record")."""
    now = time.time()
    t0 = now - 50.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials = _dead_local_job(db, [t0], heartbeat_at=t0 + 30.0)
    _earlier_run(db, job, t0 + 430.0)
    _alive(monkeypatch)
    monkeypatch.setattr("spotwise.release.wall_now", lambda: now)
    out = jobs.cancel(job, db=db)
    assert out["billed_to"] == BEAT + DIED  # was: RECORD
    bills = _bills(db, job)
    assert bills["l-0"] == (
        pytest.approx(30.0 * SPEEDUP),  # was 50 wall s: 15000
        pytest.approx(_usd(30.0 * SPEEDUP)),  # $2.25, was $3.75
        pytest.approx(t0 + 30.0),
    )
    assert bills["l-1"][:2] == (pytest.approx(SPEEDUP), pytest.approx(_usd(SPEEDUP)))  # as is
    with Store.open_existing(db) as s:
        assert s.get_trial(trials[0]).cost_usd == pytest.approx(_usd(30.0 * SPEEDUP))
        assert s.get_job(job).cost_usd == pytest.approx(sum(b[1] for b in bills.values()))


@pytest.mark.parametrize(
    ("after_beat", "until", "which"),
    [
        (LATE_S - 1.0, LATE_S - 1.0, RECORD),  # within the bound: the orchestrator's own
        (LATE_S + 2.0, 0.0, BEAT),  # beyond it (all it wrote): an earlier run's
    ],
)
def test_a_record_counts_only_within_late_s_of_the_heartbeat(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    after_beat: float,
    until: float,
    which: str,
) -> None:
    """The bound itself: the heartbeat at +30, a record the orchestrator closed ``after_beat``
    wall s later (its launch 1 s before, its report 0.5 s before); the cancel 100 s after the
    first launch. A
    clock skew smaller than ``LATE_S`` is still billed (at most ``LATE_S`` wall s)."""
    now = time.time()
    t0 = now - 100.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, _ = _dead_local_job(db, [t0], heartbeat_at=t0 + 30.0)
    _earlier_run(db, job, t0 + 30.0 + after_beat)
    _alive(monkeypatch)
    monkeypatch.setattr("spotwise.release.wall_now", lambda: now)
    assert jobs.cancel(job, db=db)["billed_to"] == which + DIED
    assert _bills(db, job)["l-0"][2] == pytest.approx(t0 + 30.0 + until)


def test_late_s_covers_the_longest_the_orchestrator_writes_records_without_a_heartbeat() -> None:
    """The heartbeat's own period, then the longest single blocking step between two asks for
    one: a local terminate (its kill grace, and the settling of a killed group), during which
    the orchestrator still closes records (ledger's ``_bill``, at its wall clock): a record
    written then must still count. The drain's wait for noticed lives is no longer in the
    sum: it writes the heartbeat all along (tests/orchestrator/test_s20g_drain_heartbeat.py)."""
    grace = inspect.signature(LocalProvisioner.__init__).parameters["kill_grace_s"].default
    longest = HEARTBEAT_EVERY_WALL_S + grace + SETTLE_S
    assert longest <= LATE_S <= longest + 10.0  # not much more: a skewed clock may bill it
    assert LATE_S < HEARTBEAT_EVERY_WALL_S + STOP_TIMEOUT_WALL_S  # was 45 s: the drain's wait
