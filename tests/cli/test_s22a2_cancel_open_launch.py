"""`spotwise cancel`'s release of a job's open records bills every instance of a launch it
terminates, each once (s22 helper A's notes 1 and 3).

1. ``_release`` billed one instance per open record (the one ``reconcile``'s ``_settle``
   matched) but terminated every instance of the launch: a retried create of an open launch
   was terminated and billed by nobody. Each other instance of the launch it terminates is
   now a part of the record naming it, from its start to the cancel; a record bill naming no
   instance beyond its own life's seconds (a failed launch's leftovers, billed together up to
   the drain) is taken off those first, so that none is billed twice.
3. Its close wrote the bill computed from its first read while the record was merely still
   open: a drain's bill of a stray written to the open record between the read and the close
   was overwritten (lost). The close is now a compare-and-set on the bill: it reads the
   record again and bills on that (the stray, named by the drain's part, is not billed again).

The real ``_release`` and ``reconcile_records`` (``_settle``), over a fake AWS that lists the
job's instances and takes their terminates; a real store. Prices: $0.90/h (a second, $0.00025).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import record_launch

from spotwise import release
from spotwise.providers import registry
from spotwise.providers.base import TAG_JOB, Instance, InstanceState, Market, Offer, our_tags
from spotwise.release import _release
from spotwise.spec import parse_spec
from spotwise.store import Store
from spotwise.store.bills import InstanceBills

T, PRICE, JOB = 1_700_000_000.0, 0.9, "j-aws"
OFFER = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, PRICE, 3.06)
SPEC = parse_spec(
    {
        "name": "j",
        "command": ["python", "train.py"],
        "metric": {"name": "acc"},
        "steps": 3,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}},
        "providers": [{"name": "aws", "regions": ["us-east-1"]}],
        "checkpoint": {"location": "s3://bucket/ckpt"},
    }
).model_dump_json()


class _Cloud:
    """A fake AWS: lists the instances given (by the job's tag), takes every terminate;
    ``while_listing`` runs once, inside the first listing (another process meanwhile)."""

    def __init__(self, instances: list[Instance]) -> None:
        self.instances = instances
        self.terminated: list[str] = []
        self.while_listing: Callable[[], None] | None = None

    def open_provisioner(self, config: Any) -> _Cloud:
        return self

    def describe(self, tags: dict[str, str]) -> list[Instance]:
        other, self.while_listing = self.while_listing, None
        if other is not None:
            other()
        return [i for i in self.instances if i.tags.get(TAG_JOB) == tags.get(TAG_JOB)]

    def terminate(self, ids: list[str]) -> None:
        self.terminated += ids


def _instance(iid: str, started: float, state: InstanceState = InstanceState.RUNNING) -> Instance:
    """An instance of launch l-1 (its ClientToken: the launch), up since ``started``."""
    tags = our_tags(JOB, "t", "l-1")
    ended = T - 1800 if state.is_terminal() else None
    return Instance(
        iid, OFFER, state, tags, launched_at=started, ended_at=ended, launch_identity="l-1"
    )


def _job(db: str, **l1: Any) -> str:
    """The running job (its orchestrator gone) whose trial holds the open record ``l-1``
    (``l1``: its columns); the trial's id."""
    with Store.open(db) as s:
        s.create_job("j", SPEC, "job.yaml", "spot-greedy", "maximize", job_id=JOB)
        s.update_job(JOB, state="running", pid=0)
        trial = s.add_trial(JOB, 0, {"lr": 0.1})
        record_launch(
            s, JOB, trial.id, price_per_hour=PRICE, id="l-1", requested_at=T - 3700, **l1
        )  # fmt: skip
        row = s.get_instance("l-1")
        s.update_trial(trial.id, cost_usd=row.cost_usd)
        s.update_job(JOB, cost_usd=row.cost_usd)
    return trial.id


def _cancel(db: str, monkeypatch: pytest.MonkeyPatch, cloud: _Cloud) -> dict[str, Any]:
    monkeypatch.setattr(registry, "cloud_module", lambda name: cloud)
    monkeypatch.setattr(release, "wall_now", lambda: T)
    with Store.open_existing(db) as s:
        return _release(s, s.get_job(JOB), orchestrator_died=True)


def _parts(row: Any) -> dict[str, tuple[float, float]]:
    parts = json.loads(row.extra_bills_json or "[]")
    return {p.get("instance", "?"): (p["cost_usd"], p["market_seconds"]) for p in parts}


def _totals(db: str, trial: str) -> tuple[Any, float, float]:
    with Store.open_existing(db) as s:
        return s.get_instance("l-1"), s.get_trial(trial).cost_usd, s.get_job(JOB).cost_usd


def test_a_retried_create_of_an_open_launch_is_billed_by_the_cancel_that_terminates_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead orchestrator's life l-1 (i-1, up an hour, $0 billed) and a retried create of
    its launch, i-2 (up half an hour): the cancel terminates both and bills both, i-1 as the
    record's own life, i-2 as a part naming it (was: i-2 terminated, billed by nobody: the
    record, trial and job $0.90)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = _job(db, state="running", provider_instance_id="i-1", launched_at=T - 3600)
    cloud = _Cloud([_instance("i-1", T - 3600), _instance("i-2", T - 1800)])
    out = _cancel(db, monkeypatch, cloud)
    row, trial_usd, job_usd = _totals(db, trial)
    assert sorted(out["terminated_instances"]) == ["i-1", "i-2"] == sorted(cloud.terminated)
    assert out["closed_records"] == 1
    assert (row.state, row.end_reason, row.provider_instance_id) == (
        "terminated",
        "reconciled",
        "i-1",
    )
    assert (row.cost_usd, row.market_seconds) == (pytest.approx(1.35), 5400.0)  # was 0.90, 3600
    assert _parts(row) == {"i-2": (pytest.approx(0.45), 1800.0)}
    assert json.loads(row.extra_bills_json)[0]["at"] == T  # counted with its close
    assert trial_usd == pytest.approx(1.35) and job_usd == pytest.approx(1.35)


@pytest.mark.parametrize(
    ("drain_at", "billed_s"),
    [(T - 1800, 3600.0), (T - 600, 6000.0)],
)
def test_a_failed_launchs_leftovers_billed_together_are_each_billed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drain_at: float, billed_s: float
) -> None:
    """A failed launch the drain could not clean: two instances of it (i-a, i-b, both up an
    hour) refused their terminate; the drain billed both up to ``drain_at`` on the open record
    (``billed_s``, naming neither). The cancel matches i-b by the launch's tag and terminates
    both: the record ends at their two hours, $1.80, never more (was: i-a's bill after the
    drain was nobody's: $0.90 at 3600 s, $1.50 at 6000 s)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = _job(
        db, end_reason="unconfirmed", cost_usd=PRICE * billed_s / 3600, market_seconds=billed_s
    )
    cloud = _Cloud([_instance("i-a", T - 3600), _instance("i-b", T - 3600)])
    out = _cancel(db, monkeypatch, cloud)
    row, trial_usd, job_usd = _totals(db, trial)
    assert sorted(out["terminated_instances"]) == ["i-a", "i-b"]
    assert (row.state, row.provider_instance_id, row.launched_at) == ("terminated", "i-b", T - 3600)
    assert (row.cost_usd, row.market_seconds) == (pytest.approx(1.8), 7200.0)
    assert _parts(row) == {
        "i-a": (pytest.approx(PRICE * (7200 - billed_s) / 3600), 7200 - billed_s)
    }
    assert trial_usd == pytest.approx(1.8) and job_usd == pytest.approx(1.8)


def _drain_bills_stray(db: str) -> None:
    """The drain's stray sweep (another process) bills i-x, a stray of l-1 up ten minutes
    until it terminated it ($0.15, 600 s), to the open record, as it does: a compare-and-set
    naming the stray (:class:`InstanceBills`)."""
    with Store.open_existing(db) as o:
        bills = InstanceBills(o, {"l-1": o.get_instance("l-1")})
        add = {"cost_usd": 0.15, "market_seconds": 600.0}
        assert bills.bill("l-1", "i-x", add).written is not None


def test_a_stray_bill_written_while_the_cancel_lists_is_kept_and_not_billed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """l-1 is a leftover of the drain (i-1, up an hour, billed its first half hour: $0.45).
    While the cancel lists, the drain bills l-1's stray i-x $0.15 (600 s) to the record. The
    cancel (which listed i-x still running and terminates it too) closes the record on the
    record as it is now: i-1's whole hour ($0.90) and the drain's part for i-x, once: $1.05 at
    4200 s (was: its close wrote $0.90 at 3600 s over the drain's bill, lost)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = _job(
        db, state="running", end_reason="not terminated", provider_instance_id="i-1",
        launched_at=T - 3600, cost_usd=0.45, market_seconds=1800.0,
    )  # fmt: skip
    cloud = _Cloud([_instance("i-1", T - 3600), _instance("i-x", T - 2400)])
    cloud.while_listing = lambda: _drain_bills_stray(db)
    out = _cancel(db, monkeypatch, cloud)
    row, trial_usd, job_usd = _totals(db, trial)
    assert out["closed_records"] == 1 and sorted(cloud.terminated) == ["i-1", "i-x"]
    assert (row.cost_usd, row.market_seconds) == (pytest.approx(1.05), 4200.0)
    assert _parts(row) == {"i-x": (pytest.approx(0.15), 600.0)}  # the drain's, once
    assert trial_usd == pytest.approx(1.05) and job_usd == pytest.approx(1.05)


def test_a_stray_the_cancel_billed_first_is_not_billed_again_by_the_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other order (no bill twice): the cancel closes l-1 first, billing i-1's hour and
    i-x (a retried create it terminated, up 40 minutes: $0.60) as a part; the drain, which
    read the record open before, then loses its compare-and-set and cannot tell the close
    apart by instance: it bills nothing. $1.50 at 6000 s (was: $0.90, i-x billed by nobody)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = _job(
        db, state="running", end_reason="not terminated", provider_instance_id="i-1",
        launched_at=T - 3600, cost_usd=0.45, market_seconds=1800.0,
    )  # fmt: skip
    with Store.open_existing(db) as o:
        drain = InstanceBills(o, {"l-1": o.get_instance("l-1")})  # read before the cancel
        cloud = _Cloud([_instance("i-1", T - 3600), _instance("i-x", T - 2400)])
        _cancel(db, monkeypatch, cloud)
        lost = drain.bill("l-1", "i-x", {"cost_usd": 0.15, "market_seconds": 600.0})
    row, trial_usd, job_usd = _totals(db, trial)
    assert (row.cost_usd, row.market_seconds) == (pytest.approx(1.5), 6000.0)
    assert _parts(row) == {"i-x": (pytest.approx(0.6), 2400.0)}
    assert lost.written is None and lost.others_usd == pytest.approx(1.05)
    assert trial_usd == pytest.approx(1.5) and job_usd == pytest.approx(1.5)


def test_an_instance_of_the_launch_that_had_ended_is_not_billed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A guard: an instance of the launch listed ended (the drain terminated and billed it:
    in the record's bill) is not this cancel's to bill; only its own life's rest is: $0.90."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = _job(
        db, state="running", end_reason="not terminated", provider_instance_id="i-1",
        launched_at=T - 3600, cost_usd=0.45, market_seconds=1800.0,
    )  # fmt: skip
    gone = _instance("i-y", T - 2400, InstanceState.TERMINATED)
    out = _cancel(db, monkeypatch, _Cloud([_instance("i-1", T - 3600), gone]))
    row, trial_usd, _ = _totals(db, trial)
    assert out["terminated_instances"] == ["i-1"] and _parts(row) == {}
    assert (row.cost_usd, row.market_seconds) == (pytest.approx(0.9), 3600.0)
    assert trial_usd == pytest.approx(0.9)
