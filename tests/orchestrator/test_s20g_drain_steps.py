"""Every step of the drain runs whatever an earlier one raised, and the job still ends.

Only the close of one trial was failure-isolated (fd7e14e): a bug or a store error in the wait
for noticed lives, the terminate of the running ones, the settling of failed launches, the
stray sweep or the backend's close left the drain, so the job was never finished and stayed
"running (orchestrator gone)" until `spotwise cancel`. Now each failed step is logged and an
``error`` event, the later steps still run, the job ends ``failed`` with its error naming the
step, and the first exception is raised after (the exit code still says a bug happened).
Money first: a life whose terminate was not confirmed, and a failed launch not confirmed
clean, are named as leftovers by the job's end even where their step failed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from shared_helpers import record_launch
from test_orchestrator import spec_dict, write_spec, write_trace

from spotwise import jobs
from spotwise.planner import orchestrator
from spotwise.planner.launch_cleanup import Unconfirmed
from spotwise.planner.ledger import Ledger
from spotwise.planner.policy import Phase
from spotwise.planner.runstate import Life, TrialRun
from spotwise.providers.base import Instance, Market, Offer
from spotwise.providers.billing import RULES
from spotwise.store import Store

PRICE = 0.9
SPOT = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, PRICE, 3.0)
STEPS = {
    "wait": "waiting for the noticed instances",
    "terminate": "terminating the running instances",
    "settle": "settling the failed launches",
    "sweep": "sweeping for stray instances",
    "backend": "closing the backend",
}


class _Search:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: None


class Prov:
    """A provider whose instances run until terminated; ``*_fails``: what a call raises."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.terminated: list[list[str]] = []
        self.describe_fails: Exception | None = None  # raised once
        self.terminate_fails: Exception | None = None  # raised every time

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        if (e := self.describe_fails) is not None:
            self.describe_fails = None
            raise e
        return []  # a life's own instance is known by its record: the sweep skips it

    def terminate(self, ids: Sequence[str]) -> None:
        self.terminated.append(list(ids))
        if self.terminate_fails is not None:
            raise self.terminate_fails
        self.running -= set(ids)


class Book(Ledger):
    """The drain over a real store and :class:`Prov`, without a market (its clock reads 100)."""

    def __init__(self, store: Store, job_id: str, trials: list[TrialRun]) -> None:
        self.store, self.job_id, self.trials = store, job_id, trials
        self.lives, self.leftover_ids, self.unconfirmed, self.budget_stops = {}, [], {}, []
        self.revocations = self.early_stopped = self.migrations = 0
        self.spent_usd = self.on_demand_usd = 0.0
        self.search = _Search()  # type: ignore[assignment]
        self.spec = SimpleNamespace(metric=SimpleNamespace(direction="maximize"))  # type: ignore[assignment]
        self.opts = SimpleNamespace(poll_s=0.0)
        self.prov = Prov()
        self.close_fails: Exception | None = None
        self.closed = 0
        self.backend = SimpleNamespace(  # type: ignore[assignment]
            now=lambda: 100.0,
            provisioner=self.prov,
            close=self._close,
            speedup=1.0,
            rule_of=lambda offer: RULES["aws"],
            segments=lambda offer, t0, t1: [(max(t1 - t0, 0.0), offer.price_per_hour)],
        )

    def _close(self) -> None:
        self.closed += 1
        if self.close_fails is not None:
            raise self.close_fails

    def _event(self, kind: str, now: float, t: TrialRun | None = None, **detail: Any) -> None:
        self.store.add_event(self.job_id, kind, now, trial_id=t.trial_id if t else None, **detail)

    def live(self, n: int, *, noticed: bool = False) -> TrialRun:
        """A running trial ``n`` with a life launched at 0 (launch ``l-n``, instance ``i-n``)."""
        row = self.store.add_trial(self.job_id, n, {"lr": 0.01})
        t = TrialRun(row.id, n, {"lr": 0.01}, 6, 2)
        t.phase, t.state = Phase.RUNNING, "running"
        record_launch(
            self.store, self.job_id, row.id, price_per_hour=PRICE, id=f"l-{n}",
            state="running", launched_at=0.0, provider_instance_id=f"i-{n}",
        )  # fmt: skip
        t.life = Life(f"l-{n}", f"i-{n}", SPOT, 0.0, 0, 0, 120.0 if noticed else None)
        self.lives[f"i-{n}"] = (t, t.life)
        self.prov.running.add(f"i-{n}")
        self.trials.append(t)
        return t


def _book(tmp_path: Path) -> Book:
    store = Store.open(f"sqlite:///{tmp_path / 'state.db'}")
    job = store.create_job("drain", "{}", "", "spot-greedy", "maximize")
    return Book(store, job.id, [])


def _spy(monkeypatch: pytest.MonkeyPatch, ran: list[str], name: str, what: str) -> None:
    real = getattr(Book, name)

    def spy(self: Book, *a: Any) -> Any:
        ran.append(what)
        return real(self, *a)

    monkeypatch.setattr(Book, name, spy)


def _raising(ran: list[str], what: str, error: Exception) -> Callable[..., None]:
    def boom(self: Book, *a: Any) -> None:
        ran.append(what)
        raise error

    return boom


@pytest.mark.parametrize("step", list(STEPS))
def test_a_drain_step_that_raises_leaves_the_others_done_and_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    book = _book(tmp_path)
    t = book.live(0, noticed=step == "wait")  # a notice makes the drain wait and list first
    boom = RuntimeError(f"{step} bug")
    ran: list[str] = []
    methods = {"terminate": "_terminate_running", "settle": "_settle_unconfirmed"}
    methods["sweep"] = "_sweep_strays"
    for what, name in methods.items():
        if what == step:
            monkeypatch.setattr(Book, name, _raising(ran, what, boom))
        else:
            _spy(monkeypatch, ran, name, what)
    if step == "wait":
        book.prov.describe_fails = boom  # not a ProviderError: a bug
    if step == "backend":
        book.close_fails = boom

    failed = book._drain(book.backend)  # type: ignore[arg-type]

    assert failed is boom  # for the caller to end the job with, then raise (exit 70)
    said = f"{STEPS[step]} failed: RuntimeError: {step} bug"
    assert book.drain_error(boom) == said
    assert ran == ["terminate", "settle", "sweep"]  # every step ran, the failing one too
    assert book.closed == 1
    store = book.store
    trial = store.get_trial(t.trial_id)
    assert trial.state == "cancelled" and trial.ended_at is not None  # the trials closed
    (error,) = store.events(book.job_id, kind="error")
    assert error.detail == {"error": said}
    row = store.get_instance("l-0")
    if step == "terminate":  # never asked: still held, said so, billed so far, record open
        assert book.prov.terminated == [] and book.leftovers() == ["i-0"]
        assert (row.state, row.end_reason) == ("running", "not terminated")
        assert book.leftover_error(None) == (
            "1 instance(s) could not be terminated and may still be billed: i-0; "
            f"retry with `spotwise cancel {book.job_id}`"
        )
    else:
        assert book.prov.terminated == [["i-0"]] and book.leftovers() == []
        assert (row.state, row.end_reason) == ("terminated", "stopped")
    assert row.cost_usd == pytest.approx(100.0 * PRICE / 3600.0)  # 100 s from 0: the minimum
    assert book.lives == {}
    store.close()


def test_a_terminate_that_raises_a_bug_names_every_life_it_did_not_confirm(
    tmp_path: Path,
) -> None:
    """Not a refusal (a ProviderError): the batch and then each life's own call raise. Each
    life is billed up to its request, its record open, and named a leftover; the first error
    is returned (was: raised out of the drain, no life billed, none named)."""
    book = _book(tmp_path)
    t0, t1 = book.live(0), book.live(1)
    bug = KeyError("i-0")
    book.prov.terminate_fails = bug

    assert book._drain(book.backend) is bug  # type: ignore[arg-type]
    assert book.prov.terminated == [["i-0", "i-1"], ["i-0"], ["i-1"]]
    assert book.leftovers() == ["i-0", "i-1"]
    for n, t in enumerate((t0, t1)):
        row = book.store.get_instance(f"l-{n}")
        assert (row.state, row.end_reason) == ("running", "not terminated")
        assert row.cost_usd == pytest.approx(100.0 * PRICE / 3600.0)
        assert book.store.get_trial(t.trial_id).state == "cancelled"
    assert book.drain_error(bug) == "terminating the running instances failed: KeyError: 'i-0'"
    book.store.close()


def test_a_bill_that_fails_for_one_life_does_not_leave_the_others_unbilled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both terminated in one call; writing the first life's bill fails (the store): the
    second is billed all the same, and no life is a leftover (the provider confirmed both)."""
    book = _book(tmp_path)
    book.live(0), book.live(1)
    real = book.store.rebill_instance_if_unchanged  # the bill's write: a compare-and-set
    locked = RuntimeError("database is locked")

    def rebill(seen: Any, **fields: Any) -> Any:
        if seen.id == "l-0":
            raise locked
        return real(seen, **fields)

    monkeypatch.setattr(book.store, "rebill_instance_if_unchanged", rebill)

    assert book._drain(book.backend) is locked  # type: ignore[arg-type]
    assert book.prov.terminated == [["i-0", "i-1"]] and book.leftovers() == []
    row = book.store.get_instance("l-1")
    assert (row.state, row.end_reason) == ("terminated", "stopped")
    assert row.cost_usd == pytest.approx(100.0 * PRICE / 3600.0)
    assert book.store.get_instance("l-0").state == "running"  # unbilled: the error says it
    book.store.close()


def test_a_settle_that_fails_still_names_the_failed_launches_not_confirmed_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three failed launches not confirmed clean: l-7 is confirmed now, then the settle
    raises at l-8. l-8 (an instance found) and l-9 (none found) are leftovers all the same, as
    the settle would have named them; l-7 is not (was: raised out of the drain, none named)."""
    book = _book(tmp_path)
    t = book.live(0)
    book.lives.clear()  # no life: only the failed launches
    for n, ids in ((7, ["i-7"]), (8, ["i-8"]), (9, [])):
        record_launch(book.store, book.job_id, t.trial_id, price_per_hour=PRICE, id=f"l-{n}")
        book.unconfirmed[f"l-{n}"] = Unconfirmed(t, ids, 10.0, SPOT)
    bug = RuntimeError("settle bug")

    def close(self: Book, t: TrialRun, launch_id: str, *a: Any, **kw: Any) -> None:
        if launch_id == "l-8":
            raise bug
        if launch_id == "l-7":  # confirmed clean: its record closed, no longer unconfirmed
            del self.unconfirmed[launch_id]
            self.store.update_instance(launch_id, state="failed", end_reason="failed")

    monkeypatch.setattr(Book, "_close_failed_launch", close)

    assert book._drain(book.backend) is bug  # type: ignore[arg-type]
    assert book.leftovers() == ["i-8", "launch l-9 (no instance id known)"]
    assert book.drain_error(bug) == "settling the failed launches failed: RuntimeError: settle bug"
    assert book.closed == 1 and book.store.get_trial(t.trial_id).state == "cancelled"
    book.store.close()


# ---- the whole job -----------------------------------------------------------------------
TRIAL = """
from spotwise import sdk
for step in range(1, sdk.steps() + 1):
    sdk.report(step, step / 100)
sdk.done(sdk.steps())
"""


def _tiny_job(tmp_path: Path) -> Path:
    write_trace(tmp_path / "trace.csv")
    (tmp_path / "trial.py").write_text(TRIAL)
    spec = spec_dict(tmp_path, command=["python", str(tmp_path / "trial.py")], steps=3)
    return write_spec(tmp_path, spec)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("step", ["terminate", "settle", "sweep", "backend"])
def test_a_job_whose_drain_step_raises_ends_failed_naming_it_and_raises_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """A completed trial, then a drain step raises: the job's record is complete (ended,
    failed, its error naming the step), the later steps ran, and the error is raised after
    (`tune` exits 70). Was: the error left the drain, and the job stayed "running"."""
    boom = RuntimeError(f"{step} bug")
    ran: list[str] = []
    names = {"terminate": "_terminate_running", "settle": "_settle_unconfirmed"}
    names["sweep"] = "_sweep_strays"
    for what, name in names.items():
        real = getattr(Ledger, name)

        def spy(self: Ledger, *a: Any, _real: Any = real, _what: str = what) -> Any:
            ran.append(_what)
            if _what == step:
                raise boom
            return _real(self, *a)

        monkeypatch.setattr(Ledger, name, spy)
    if step == "backend":
        opened = orchestrator.open_backend

        def open_backend(*a: Any, **kw: Any) -> Any:
            backend = opened(*a, **kw)

            def close() -> None:
                backend.close()
                raise boom

            return dataclasses.replace(backend, close=close)

        monkeypatch.setattr(orchestrator, "open_backend", open_backend)
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"

    with pytest.raises(RuntimeError, match=f"{step} bug"):
        jobs.tune(_tiny_job(tmp_path), db=db, run_root=tmp_path / "runs")

    with Store.open_existing(db) as store:
        (job,) = store.list_jobs()
        (trial,) = store.list_trials(job.id)
        errors = store.events(job.id, kind="error")
    said = f"{STEPS[step]} failed: RuntimeError: {step} bug"
    assert (job.state, job.error) == ("failed", said)  # was: "running", no error
    assert job.ended_at is not None
    assert ran == ["terminate", "settle", "sweep"]
    assert [e.detail for e in errors] == [{"error": said}]
    assert trial.state == "completed"  # the trial's own end stands
    assert job.cost_usd == pytest.approx(trial.cost_usd) and job.cost_usd > 0
