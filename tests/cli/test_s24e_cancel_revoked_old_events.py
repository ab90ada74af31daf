"""Cancel of a dead local job recorded by a spotwise before b8d0d89 bills its taken lives as
taken (review-bc F1).

Before b8d0d89 the orchestrator wrote a ``revoked`` event without the ``launch`` key, and its
instance id empty (its trial had already left the life): ``{"checkpoint": 0, "step": 0,
"zone": "us-east-1f"}``. HEAD's cancel found a taken life only through that key, so after an
upgrade it billed such lives up to the orchestrator's last record at full price (the review's
job: $0.90 where the replayed AWS rule gives $0, a life taken in its first hour). The life is
now found by what every version records: the event's trial, its latest ``launch`` before it in
the order recorded (the relaunch's ``launch`` is written at the same market time, just after
it), that launch's zone, and its market time.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from shared_helpers import local_replay_spec, record_launch

from spotwise import jobs
from spotwise.store import Store

SPEEDUP, PRICE = 300.0, 0.9  # market seconds per wall second; $/h of each life
M = 1_677_794_925.0  # the replayed market's clock at the first launches
EAST, WEST = "us-east-1f", "us-west-2c"


def _launch(s: Store, job: str, trial: str, life: str, zone: str, at: float, n: int) -> None:
    """A ``launch`` event as every version writes it (its instance id the launch id)."""
    s.add_event(
        job, "launch", at, trial_id=trial, instance_id=life,
        offer=f"local:{zone}:p3.2xlarge:spot", price=PRICE, attempt=n, resume_step=0,
    )  # fmt: skip


def _old_revoked(s: Store, job: str, trial: str, zone: str, at: float) -> None:
    """A ``revoked`` event as spotwise wrote it before b8d0d89: no ``launch``, no instance id."""
    s.add_event(job, "revoked", at, trial_id=trial, checkpoint=0, step=0, zone=zone)


def _old_dead_job(db: str, t0: float) -> tuple[str, list[str]]:
    """The review's A-database job, as an old orchestrator left it when SIGKILLed: trial 0's
    first life (us-east-1f) taken 1296 market s in, the relaunch (us-west-2c) at that tick and
    taken 1997 market s later, both records still open; trial 1's one life running on."""
    with Store.open(db) as s:
        j = s.create_job("j", local_replay_spec(SPEEDUP), "job.yaml", "spot-greedy", "maximize")
        s.update_job(j.id, state="running", pid=0, heartbeat_at=t0 + 30.0)
        trials = []
        for n in range(2):
            t = s.add_trial(j.id, n, {"lr": 0.01})
            s.update_trial(t.id, state="running")
            trials.append(t.id)
        lives = [("l-0", trials[0], EAST, 0.0), ("l-1", trials[0], WEST, 1296.0)]
        lives.append(("l-2", trials[1], EAST, 0.0))
        for life, trial, zone, market_s in lives:
            record_launch(
                s, j.id, trial, price_per_hour=PRICE, provider="local", zone=zone, id=life,
                state="running", launched_at=t0 + market_s / SPEEDUP,
                provider_instance_id=f"local-{life}",
            )  # fmt: skip
        # in the order the old orchestrator wrote them (one tick: the revoke, then the relaunch)
        _launch(s, j.id, trials[0], "l-0", EAST, M, 0)
        _launch(s, j.id, trials[1], "l-2", EAST, M, 0)
        _old_revoked(s, j.id, trials[0], EAST, M + 1296.0)
        _launch(s, j.id, trials[0], "l-1", WEST, M + 1296.0, 1)
        _old_revoked(s, j.id, trials[0], WEST, M + 1296.0 + 1997.0)
    return j.id, trials


def test_lives_taken_before_the_upgrade_are_billed_as_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotwise.planner import reconcile

    monkeypatch.setattr(reconcile, "reconcile", lambda spec, job_id: [])  # all died with it
    t0 = time.time() - 40.0
    db = f"sqlite:///{tmp_path / 'state.db'}"
    job, trials = _old_dead_job(db, t0)
    out = jobs.cancel(job, db=db)
    with Store.open_existing(db) as s:
        rows = {r.id: r for r in s.list_instances(job)}
        # each taken in its first hour: free (were billed up to the heartbeat, 30 wall s after
        # the first launches: 9000 market s, $2.25, and 7704 s, $1.926)
        assert rows["l-0"].cost_usd == 0.0
        assert rows["l-1"].cost_usd == 0.0
        # each up to its own `revoked` event (the first one is not l-1's, launched that tick)
        assert rows["l-0"].market_seconds == pytest.approx(1296.0)
        assert rows["l-1"].market_seconds == pytest.approx(1997.0)
        # trial 1's life was taken by nothing: billed up to the heartbeat, 9000 market s
        assert rows["l-2"].market_seconds == pytest.approx(30.0 * SPEEDUP)
        assert rows["l-2"].cost_usd == pytest.approx(9000.0 * PRICE / 3600.0)  # $2.25
        assert s.get_trial(trials[0]).cost_usd == 0.0
        assert s.get_job(job).cost_usd == pytest.approx(2.25)  # was $2.25 + $2.25 + $1.926
    assert out["billed_to"] == (
        "the orchestrator's last heartbeat, as their trial processes died with the "
        "orchestrator; l-0, l-1 up to when the replayed market took them (their `revoked` "
        "events)"
    )
