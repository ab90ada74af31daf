"""`spotwise resume` waits for an orchestrator still draining after a cancel (s23 helper G,
"noticed, not fixed").

A cancel of a job running on another machine writes the request to its row: ``cancelled``,
no ``ended_at``. Its orchestrator stops its trials, bills its lives, then writes its end. A
resume was refused only while a record was held: in the window after the last bill and
before the end's write, it took the job over (``pending``, its pid) while the old orchestrator
still wrote its end. Now a job marked ended with no ``ended_at`` and a heartbeat under
``STALE_HEARTBEAT_S`` is refused in one line naming `spotwise status JOB`, nothing written; a
written end lets it through, its heartbeat fresh or stale. (A stale heartbeat with no end, the
orchestrator dead mid-drain, is refused until `spotwise cancel [--force]` closes the job:
test_s24a_resume_unclosed.py.)
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from spotwise import jobs
from spotwise.errors import ConfigError
from spotwise.liveness import STALE_HEARTBEAT_S
from spotwise.planner import orchestrator
from spotwise.spec import parse_spec
from spotwise.store import Store


def _draining_job(tmp_path: Path, beat_age_s: float, ended_at: float | None = None) -> tuple:
    """A job another machine runs, its cancel requested (``cancelled``, ``ended_at`` as
    given), every life billed (no record held), 1 of its 3 trials made and cancelled: what
    its row holds in the drain's last step, its heartbeat ``beat_age_s`` old."""
    spec = parse_spec(
        {
            "name": "j",
            "command": ["python", "train.py"],
            "metric": {"name": "acc"},
            "steps": 3,
            "trials": 3,
            "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}},
            "providers": [{"name": "aws", "regions": ["us-east-1"]}],
            "checkpoint": {"location": "s3://bucket/ckpt"},
        }
    ).model_dump_json()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    with Store.open(db) as s:
        job = s.create_job("j", spec, str(tmp_path / "job.yaml"), "spot-greedy", "maximize")
        s.update_job(
            job.id,
            state="cancelled",
            ended_at=ended_at,
            pid=4242,
            host="build-box-2",
            heartbeat_at=time.time() - beat_age_s,
            cost_usd=0.5,
        )
        t = s.add_trial(job.id, 0, {"lr": 0.01})
        s.update_trial(t.id, state="cancelled")
    return db, job.id


class _Ran(Exception):
    """The resumed run, replaced: nothing is launched."""


def _resume(db: str, job_id: str, monkeypatch: pytest.MonkeyPatch, ran: list[Any]) -> None:
    """`spotwise resume JOB` (what the command calls), its run replaced: the plans it got are
    added to ``ran``."""

    def resume_job(plan: Any, store: Any, opts: Any) -> dict[str, Any]:
        ran.append(plan)
        raise _Ran(plan.job_id)

    monkeypatch.setattr(orchestrator, "resume_job", resume_job)
    with contextlib.suppress(_Ran):
        jobs.resume(job_id, db=db)


def test_a_resume_while_the_cancelled_job_still_drains_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, job_id = _draining_job(tmp_path, beat_age_s=3.0)
    ran: list[Any] = []
    with pytest.raises(ConfigError) as e:  # before: planned and run, over the draining one
        _resume(db, job_id, monkeypatch, ran)
    assert ran == []
    assert e.value.exit_code == 2 and e.value.hint is None  # one line: `error: ...`
    assert str(e.value) == (
        f"job {job_id} is cancelled but its orchestrator is still closing it (heartbeat 3 s "
        f"old): wait until `spotwise status {job_id}` shows it ended, then resume"
    )
    with Store.open_existing(db) as s:  # nothing written: still the old orchestrator's
        job = s.get_job(job_id)
        assert (job.state.value, job.ended_at, job.pid, job.host) == (
            "cancelled",
            None,
            4242,
            "build-box-2",
        )
        assert s.events(job_id, kind="resumed") == []


@pytest.mark.parametrize(
    "beat_age_s", [STALE_HEARTBEAT_S + 30, 3.0], ids=["end-written-then-silent", "end-written"]
)
def test_a_drain_that_wrote_its_end_lets_the_resume_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, beat_age_s: float
) -> None:
    db, job_id = _draining_job(tmp_path, beat_age_s, ended_at=time.time())
    ran: list[Any] = []
    _resume(db, job_id, monkeypatch, ran)
    assert [p.job_id for p in ran] == [job_id]
    assert [t.trial_id for t in ran[0].requeued]  # its cancelled trial runs again
