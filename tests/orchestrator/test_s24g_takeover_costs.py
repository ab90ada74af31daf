"""A run another process took over writes none of the trials' other fields, and bills its own
lives into their cost as the sum of their records (s24 helper G, after helper C; review-az AZ5).

Helper C made the trial writes of the progress, the metric and the end compare-and-set on the
job's owner (:meth:`~spotwise.planner.job_summary.JobSummary._trial_write`). Other writes still
went to the trial's row directly, and after a takeover (`spotwise resume` while this run was
frozen) they wrote this run's figures over the other run's:

* the bill of a life (``Ledger._bill``): this run's cost of the trial and its revocations;
* a failed launch's cleanup (``LaunchCleanup._bill_discarded``, ``_bill_leftover_launch``):
  this run's cost of the trial;
* a launch that landed in the call (``Actions``): ``running``, its start, its migrations and
  revocations;
* the reports of another attempt taken in (``resumed_end._take``): the progress and the
  observations;
* a cancel of a trial not running (``Orchestrator.cancel``): ``cancelled`` and an end, before the
  takeover was heard.

Each now goes through the owner-checked write. The bill of this run's own life is real money and
still lands: a run taken over writes the trial's cost as the sum of its instance records'
(``update_trial_cost_to_lives``), which is right whichever run writes it.

Here the other run holds the job (its pid and host in the job's row), has written the trials'
rows (``NEW``) and has billed a life of its own for each (``THEIRS``: a record of $0.5). After
the old run's writes, each row is still ``NEW`` but for its cost: the sum of its records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shared_helpers import record_launch
from test_budget_review import AWS
from test_budget_review import Prov as LaunchProv
from test_s20g_drain_steps import Book
from test_s24c_takeover_trial_rows import OTHER, _never_heard, _tune

from spotwise.planner import resumed_end
from spotwise.planner.job_summary import JobSummary
from spotwise.planner.orchestrator import Orchestrator
from spotwise.planner.policy import Phase
from spotwise.planner.runstate import TrialRun
from spotwise.providers.base import Instance, InstanceState, our_tags
from spotwise.providers.local import LocalProvisioner
from spotwise.store import Store

ME = {"pid": 4242, "host": "old-box", "pid_start": "pid:[4242]|boot:1"}
# the other run's row of each trial: waiting to run again (from its checkpoint)
NEW = {"state": "waiting", "step": 2, "started_at": 555.0, "revocations": 3, "migrations": 4}
THEIRS = 0.5  # the other run's own billed life of each trial (its record) and its cost


def _take_over(s: Store, job_id: str) -> list[str]:
    """Write what the other run holds: the job's row and each trial's (``NEW``, its cost its own
    life's bill, on a record of its own); returns the trials' ids."""
    s.update_job(job_id, state="running", ended_at=None, **OTHER)
    ids = sorted(t.id for t in s.list_trials(job_id))
    for n, trial_id in enumerate(ids):
        s.update_trial(trial_id, **NEW, cost_usd=THEIRS)
        record_launch(
            s, job_id, trial_id, price_per_hour=1.0, provider="local", zone="us-east-1b",
            id=f"l-theirs-{n}", state="terminated", launched_at=1.0, ended_at=2.0,
            cost_usd=THEIRS, end_reason="stopped",
        )  # fmt: skip
    return ids


def _check_rows(s: Store, job_id: str, ids: list[str]) -> list[Any]:
    """Each trial's row is the other run's (``NEW``) and its cost the sum of its records, this
    run's bills among them; returns this run's records."""
    ours = []
    for trial_id in ids:
        row = s.get_trial(trial_id)
        got = {k: getattr(row, k) for k in NEW}
        assert {**got, "state": row.state.value} == NEW
        lives = [i for i in s.list_instances(job_id) if i.trial_id == trial_id]
        mine = [i for i in lives if not i.id.startswith("l-theirs")]
        assert row.cost_usd == pytest.approx(sum(i.cost_usd or 0.0 for i in lives))
        assert row.cost_usd == pytest.approx(THEIRS + sum(i.cost_usd or 0.0 for i in mine))
        ours += mine
    return ours


# ---- real tunes, through the CLI --------------------------------------------------------------
def test_a_run_taken_over_bills_its_lives_into_the_trials_cost_not_over_their_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The takeover is heard (the ~2 s read of the job's row) once both trials reported; the
    drain terminates and bills this run's two lives. Before, each bill wrote this run's cost
    of the trial (without the other's $0.5) and its revocations (0) over the other's row."""
    db, run = _tune(tmp_path, monkeypatch)
    real = Orchestrator._hear_cancel
    taken: list[str] = []

    def hear(self: Orchestrator) -> None:
        if not taken and self.trials and all(t.life and t.step >= 3 for t in self.trials):
            taken.extend(_take_over(self.store, self.job_id))
        real(self)

    monkeypatch.setattr(Orchestrator, "_hear_cancel", hear)
    res = run()
    assert res.exit_code == 130, res.output
    with Store.open_existing(db) as s:
        (job,) = s.list_jobs()
        ours = _check_rows(s, job.id, taken)
    assert len(ours) == 2 and all(i.ended_at and (i.cost_usd or 0.0) > 0 for i in ours)


def test_a_launch_that_lands_after_a_takeover_writes_nothing_of_the_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The takeover lands in the launch's call (after the run last read the job's row): the
    launch's write of its trial (``running``, its start, migrations, revocations) finds the row
    another's and is not made; the run hears it there and its drain bills the life into the
    trial's cost as its records' sum. Before, the launch wrote ``running`` over the other's
    ``waiting`` row, and the bill its cost and revocations."""
    db, run = _tune(tmp_path, monkeypatch)
    real = LocalProvisioner.launch
    taken: list[str] = []

    def launch(self: LocalProvisioner, request: Any) -> Instance:
        inst = real(self, request)
        if not taken:
            with Store.open_existing(db) as s:
                (job,) = s.list_jobs()
                taken.extend(_take_over(s, job.id))
        return inst

    monkeypatch.setattr(LocalProvisioner, "launch", launch)
    monkeypatch.setattr(Orchestrator, "_save_and_hear", _never_heard(Orchestrator._save_and_hear))
    res = run()
    assert res.exit_code == 130, res.output
    assert "another process (pid 99999 on build-box-3) took the job over" in res.stdout
    with Store.open_existing(db) as s:
        (job,) = s.list_jobs()
        ours = _check_rows(s, job.id, taken)
        assert (job.pid, job.host) == (OTHER["pid"], OTHER["host"])
    assert ours and all(i.ended_at for i in ours)


# ---- the drain's and the loop's writes, over a real store ---------------------------------
class Taken(Book):
    """test_s20g's ledger over a real store, with the orchestrator's owner-checked trial writes
    (:class:`JobSummary`'s own): the job's row names this run (``ME``) until :func:`_take_over`."""

    _trial_write = JobSummary._trial_write
    _observe = JobSummary._observe
    _hear_cancel = JobSummary._hear_cancel

    def __init__(self, store: Store, job_id: str) -> None:
        super().__init__(store, job_id, [])
        store.update_job(job_id, state="running", **ME)
        self.owner, self.taken_over, self.heartbeat = dict(ME), "", None
        self.cancel_requested = self.cancelled = False
        self.row_state = "running"


def _taken(tmp_path: Path) -> Taken:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    job = store.create_job("taken", "{}", "", "spot-greedy", "maximize")
    return Taken(store, job.id)


def _heard(book: Taken) -> None:
    """The write found the takeover and heard it at once."""
    assert book.taken_over == "pid 99999 on build-box-3" and book.cancel_requested


def test_a_revoked_life_billed_after_a_takeover_keeps_the_other_runs_row(
    tmp_path: Path,
) -> None:
    """The market took this run's life (2 h in: billed) just after the takeover landed: its
    bill finds the row another's. Before: the row's cost was this run's $1.825 alone, and its
    revocations this run's 1."""
    book = _taken(tmp_path)
    t = book.live(0)
    assert t.life is not None
    ids = _take_over(book.store, book.job_id)
    t.life.exited, t.revocations = True, 1  # its exit, as TrialBook._on_exit counts it
    gone = Instance("i-0", AWS, InstanceState.REVOKED, ended_at=7300.0)
    book._settle_lives({"i-0": gone}, 7305.0)
    (mine,) = _check_rows(book.store, book.job_id, ids)
    _heard(book)  # found by that write, and heard at once
    assert (mine.state, mine.end_reason) == ("revoked", "revoked")
    assert mine.cost_usd == pytest.approx(7300 * 0.9 / 3600)  # AWS: past its first hour
    assert t.cost_usd == mine.cost_usd  # this run's own count of its spend: its own
    book.store.close()


def _orphan(book: Taken, t: TrialRun) -> Instance:
    """The instance failed launch ``l-1`` of ``t`` left (made by it), running from 0."""
    tags = our_tags(book.job_id, t.trial_id, "l-1")
    return Instance("i-9", AWS, InstanceState.RUNNING, tags, 0.0, launch_identity="l-1")


def _failed_launch(book: Taken, prov: LaunchProv) -> TrialRun:
    row = book.store.add_trial(book.job_id, 0, {"lr": 0.01})
    t = TrialRun(row.id, 0, {"lr": 0.01}, 6, 2)
    record_launch(book.store, book.job_id, row.id, price_per_hour=AWS.price_per_hour, id="l-1")
    book.backend.provisioner = prov  # type: ignore[attr-defined]
    return t


def test_a_failed_launchs_instance_billed_after_a_takeover_adds_to_the_lives_sum(
    tmp_path: Path,
) -> None:
    """Its cleanup finds and terminates the instance (100 s: its bill on the launch's record):
    the trial's cost, written before the record, is its lives' sum once the record holds it.
    Before: the row's cost was this run's alone."""
    book = _taken(tmp_path)
    prov = LaunchProv()
    t = _failed_launch(book, prov)
    prov.held = [_orphan(book, t)]
    ids = _take_over(book.store, book.job_id)
    book._close_failed_launch(t, "l-1", 0.0, AWS)
    assert prov.terminated == [["i-9"]]
    (mine,) = _check_rows(book.store, book.job_id, ids)
    _heard(book)  # found by that write, and heard at once
    assert (mine.state, mine.cost_usd) == ("failed", pytest.approx(100 * 0.9 / 3600))
    book.store.close()


def test_a_failed_launchs_leftover_billed_after_a_takeover_adds_to_the_lives_sum(
    tmp_path: Path,
) -> None:
    """Its instance would not terminate: the drain bills it up to now on its open record (a
    leftover). Before: the trial's row was written first, with this run's cost alone."""
    book = _taken(tmp_path)
    prov = LaunchProv()
    t = _failed_launch(book, prov)
    prov.held, prov.refuse_terminate = [_orphan(book, t)], True
    book._close_failed_launch(t, "l-1", 0.0, AWS)  # before the takeover: found, left open
    assert book.unconfirmed["l-1"].ids == ["i-9"]
    ids = _take_over(book.store, book.job_id)
    book._settle_unconfirmed(100.0)
    assert book.leftovers() == ["i-9"]
    (mine,) = _check_rows(book.store, book.job_id, ids)
    _heard(book)  # found by that write, and heard at once
    assert (mine.state, mine.cost_usd) == ("requested", pytest.approx(100 * 0.9 / 3600))
    book.store.close()


def test_another_attempts_reports_taken_after_a_takeover_are_not_written(
    tmp_path: Path,
) -> None:
    """A copy's reports taken in as the trial's (``resumed_end._take``) after the takeover
    landed: neither its progress nor its observations are written. Before: step 5 and two
    observations over the other run's row."""
    book = _taken(tmp_path)
    row = book.store.add_trial(book.job_id, 0, {"lr": 0.01})
    t = TrialRun(row.id, 0, {"lr": 0.01}, 6, 2)
    book.trials.append(t)
    ids = _take_over(book.store, book.job_id)
    reports = [{"type": "report", "step": s, "metric": s / 10, "time": 9.0} for s in (4, 5)]
    assert resumed_end._take(book, t, [*reports, {"type": "checkpoint", "step": 5}], 50.0) == 2
    assert t.step == 5  # this run's own view
    assert _check_rows(book.store, book.job_id, ids) == []
    _heard(book)  # found by that write, and heard at once
    assert book.store.observations(t.trial_id) == []
    book.store.close()


def test_a_cancel_before_the_takeover_is_heard_leaves_a_waiting_trials_row(
    tmp_path: Path,
) -> None:
    """The run is cancelled (Ctrl-C) after the takeover landed, before it was heard: its
    waiting trial is cancelled here only. Before: ``cancelled`` and an end over the row."""
    book = _taken(tmp_path)
    row = book.store.add_trial(book.job_id, 0, {"lr": 0.01})
    t = TrialRun(row.id, 0, {"lr": 0.01}, 6, 2)
    t.phase, t.state = Phase.WAITING, "waiting"
    book.trials.append(t)
    ids = _take_over(book.store, book.job_id)
    Orchestrator.cancel(book)  # type: ignore[arg-type]
    assert (t.phase, t.state) == (Phase.DONE, "cancelled")
    _check_rows(book.store, book.job_id, ids)
    _heard(book)  # found by that write, and heard at once
    assert book.store.get_trial(t.trial_id).ended_at is None
    book.store.close()
