"""The drain's stray sweep decides each stray of a launch on its own when the launch's record
was open as the sweep read it and a `spotwise cancel` closed it meanwhile (s21 helper A's note,
gap (b)).

The record of a failed launch the drain could not confirm clean (``l-1``: no instance, no
start, a leftover named by its launch) is open when the stray sweep reads it. A cancel of the
job (``--force``: its orchestrator taken for gone) settles it meanwhile: the cancel terminates
what it lists and closes the record with the bill of the one instance it matched by the
launch's tag, naming it. The drain's compare-and-set then lost, and a close is no part naming
an instance, so the record was left to the cancel ("blind"): the launch's other stray, which
the cancel terminated but never billed, was billed by nobody. The cancel's close now counts as
the bill of the instance it names where it billed that life alone (its seconds are that life's,
from the start it wrote to its end); the drain bills the others as parts.

The real StraySweep methods, the cancel's real ``_release``, a real store: the job's trial has
life l-0 (i-0, an hour, $0.95, closed) and the open l-1, whose strays i-s1 and i-s2 run at
$0.95/h from T-30min (T-40min where said) until the drain's (and the cancel's) T."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import record_launch, record_life

from spotwise import release
from spotwise.planner import reconcile as rec
from spotwise.planner.launch_cleanup import LaunchCleanup, Unconfirmed
from spotwise.planner.stray_sweep import launch_leftover
from spotwise.providers.base import Instance, InstanceState, Market, Offer, our_tags
from spotwise.providers.billing import rule_for
from spotwise.release import _release
from spotwise.spec import parse_spec
from spotwise.store import Store

T, PRICE = 1_700_000_000.0, 0.95  # record_life's price
HALF = PRICE / 2  # a stray up half an hour
OFFER = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, PRICE, 3.0)
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


def _job(db: str) -> str:
    """The running job "j-aws" ($0.95 spent: l-0), l-1 open and unconfirmed; its trial's id."""
    with Store.open(db) as s:
        s.create_job("j", SPEC, "job.yaml", "spot-greedy", "maximize", job_id="j-aws")
        s.update_job("j-aws", state="running", cost_usd=PRICE)
        record_life(
            s, "j-aws", 0, "l-0", requested_at=T - 7200, launched_at=T - 7200,
            provider_instance_id="i-0", state="terminated", end_reason="completed",
            ended_at=T - 3600, cost_usd=PRICE, market_seconds=3600.0,
        )  # fmt: skip
        trial_id: str = s.get_instance("l-0").trial_id
        s.update_trial(trial_id, cost_usd=PRICE)
        record_launch(
            s, "j-aws", trial_id, price_per_hour=PRICE, id="l-1", requested_at=T - 2400,
            end_reason="unconfirmed",
        )  # fmt: skip
    return trial_id


def _strays(starts: dict[str, float]) -> list[Instance]:
    tags = our_tags("j-aws", "t", "l-1")
    return [
        Instance(iid, OFFER, InstanceState.RUNNING, tags, launched_at=at, launch_identity="l-1")
        for iid, at in starts.items()
    ]


def _cancel(db: str, monkeypatch: pytest.MonkeyPatch, strays: list[Instance], how: str) -> None:
    """A cancel's real ``_release`` of the job while the drain lists: it lists ``strays`` and
    settles l-1 ``how``: "terminated <id>" (matched by the launch's tag), "open <id>" (its
    terminate refused: the record kept open, the instance named), "not found"."""
    outcome, _, iid = how.partition(" ") if how != rec.NOT_FOUND else (how, "", "")
    by_id = {i.instance_id: i for i in strays}

    def settle(spec: Any, job_id: str, held: list[rec.Held], spare: Any, **_: Any) -> Any:
        (h,) = held
        if not iid:
            one = rec.Settled(h, rec.NOT_FOUND, h.launch_id)
        else:
            one = rec.Settled(h, outcome, iid, launched_at=by_id[iid].launched_at, found=True)
        done = [i.instance_id for i in strays] if outcome == rec.TERMINATED else []
        return rec.Reconciled(terminated=done, records=[one], listed=list(strays))

    with monkeypatch.context() as m:
        m.setattr(rec, "reconcile_records", settle)
        m.setattr(release, "wall_now", lambda: T)
        with Store.open_existing(db) as o:
            _release(o, o.get_job("j-aws"), orchestrator_died=True)


def _drain(
    db: str, monkeypatch: pytest.MonkeyPatch, starts: dict[str, float], cancels: list[str]
) -> tuple[LaunchCleanup, Any, Any]:
    """The drain's stray sweep at T over l-1's strays, the ``cancels`` run while it lists."""
    trial = types.SimpleNamespace(trial_id=_job(db), cost_usd=PRICE)
    strays = _strays(starts)

    def describe(_: object) -> list[Instance]:
        for how in cancels:
            _cancel(db, monkeypatch, strays, how)
        return strays

    with Store.open_existing(db) as store:
        lc = object.__new__(LaunchCleanup)
        lc.store, lc.job_id, lc.spent_usd, lc.trials = store, "j-aws", PRICE, [trial]
        lc.unconfirmed = {"l-1": Unconfirmed(trial, [], T - 2400, OFFER)}  # type: ignore[arg-type]
        lc.leftover_ids = [launch_leftover("l-1")]
        lc._event = lambda *a, **k: None  # type: ignore[method-assign]
        lc.backend = types.SimpleNamespace(  # type: ignore[assignment]
            provisioner=types.SimpleNamespace(describe=describe, terminate=lambda ids: None),
            segments=lambda o, a, b: [(b - a, o.price_per_hour)],
            rule_of=lambda o: rule_for("aws"),
        )
        lc._sweep_strays(T)
        row = store.get_instance("l-1")
        trial_row = store.get_trial(trial.trial_id)
    return lc, row, trial_row


def _parts(row: Any) -> dict[str, tuple[float, float]]:
    parts = json.loads(row.extra_bills_json or "[]")
    return {p.get("instance", "?"): (p["cost_usd"], p["market_seconds"]) for p in parts}


@pytest.mark.parametrize("named", ["i-s1", "i-s2"])
def test_the_stray_the_cancels_close_did_not_bill_is_billed_by_the_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    """The cancel closed l-1 with the half hour of the stray it matched (``named``): the drain
    bills the other one as a part, and its spend counts each stray once (was: the other
    unbilled, the record $0.475, the spend $1.425, l-1 still a leftover)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    starts = {"i-s1": T - 1800, "i-s2": T - 1800}
    lc, row, trial_row = _drain(db, monkeypatch, starts, [f"terminated {named}"])
    other = "i-s2" if named == "i-s1" else "i-s1"
    assert (row.state, row.end_reason, row.provider_instance_id) == (
        "terminated",
        "reconciled",  # the cancel's close stays (not the drain's "failed" over it)
        named,
    )
    assert _parts(row) == {other: (pytest.approx(HALF), 1800.0)}
    assert row.cost_usd == pytest.approx(2 * HALF)  # was $0.475
    assert row.market_seconds == 3600.0  # was 1800
    assert lc.spent_usd == pytest.approx(PRICE + 2 * HALF)  # was $1.425
    assert trial_row.cost_usd == pytest.approx(PRICE + 2 * HALF)
    assert lc.leftover_ids == [] and lc.unconfirmed == {}  # settled by the cancel


def test_strays_a_cancel_closed_unbilled_are_billed_by_the_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel's listing did not show l-1's strays yet: it closed l-1 "not found" at $0.
    The drain bills both, each a part (was: neither: $0 on the record, $0.95 spent)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    starts = {"i-s1": T - 1800, "i-s2": T - 1800}
    lc, row, trial_row = _drain(db, monkeypatch, starts, ["not found"])
    assert _parts(row) == {"i-s1": (pytest.approx(HALF), 1800.0), "i-s2": (HALF, 1800.0)}
    assert row.cost_usd == pytest.approx(2 * HALF)  # was $0
    assert lc.spent_usd == pytest.approx(PRICE + 2 * HALF)  # was $0.95
    assert trial_row.cost_usd == pytest.approx(PRICE + 2 * HALF)
    assert lc.leftover_ids == []  # was l-1, closed by the cancel


def test_a_close_that_billed_another_life_than_it_names_leaves_the_launch_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never twice (a guard: as before): a first cancel could not terminate i-s1 and named it
    on the open record with its start; a second matched i-s2 (up 40 min) by the launch's tag
    and closed the record billing its 40 minutes, the record still naming i-s1. Which life the
    close billed cannot be told from the record: the drain bills neither (naming i-s1 billed,
    it would bill i-s2's 40 minutes a second time); the cancel bills both lives it terminated,
    i-s2 as the record's and i-s1 as a part (s22 helper A2: i-s1 was billed by nobody)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    starts = {"i-s1": T - 1800, "i-s2": T - 2400}
    lc, row, trial_row = _drain(db, monkeypatch, starts, ["open i-s1", "terminated i-s2"])
    assert row.provider_instance_id == "i-s1"
    assert (row.cost_usd, row.market_seconds) == (pytest.approx(PRICE * 4200 / 3600), 4200.0)
    assert _parts(row) == {"i-s1": (pytest.approx(HALF), 1800.0)}  # the cancel terminated it
    assert lc.spent_usd == pytest.approx(PRICE + PRICE * 4200 / 3600)  # the cancel's bills
    assert trial_row.cost_usd == pytest.approx(PRICE + PRICE * 4200 / 3600)
