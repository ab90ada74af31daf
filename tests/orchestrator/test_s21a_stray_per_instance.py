"""The drain's stray sweep decides each stray of a launch on its own (review-al F7).

After its compare-and-set lost for one stray of launch L (a cancel's sweep billed the record
first), the sweep skipped billing L's later strays, assuming the cancel, which "listed them
too", billed them. A cancel that listed before the second stray showed billed only the first:
nobody billed the second. Each stray's bill is now a part of the record naming it; where the
write loses, the record is read again and a stray the cancel's parts name is not billed again,
the others are billed on the record as now read. The real StraySweep methods and the cancel's
real bill (:func:`~spotwise.release_sweep._bill_outlived`) on a real store."""

from __future__ import annotations

import json
import time
import types
from pathlib import Path
from typing import Any

import pytest
from stray_sweep_harness import OFFER, PRICE, aws_job, sweep

from spotwise.planner.launch_cleanup import LaunchCleanup
from spotwise.providers.base import Instance, InstanceState, our_tags
from spotwise.providers.billing import rule_for
from spotwise.release_sweep import _bill_outlived
from spotwise.store import Store

HALF = PRICE / 2  # a stray up half an hour


def _stray(name: str, now: float) -> Instance:
    """A stray of l-0 (a retried create), up half an hour."""
    tags = our_tags("j-aws", "t", "l-0")
    return Instance(
        name, OFFER, InstanceState.RUNNING, tags, launched_at=now - 1800, launch_identity="l-0"
    )


def _cancel_bills(db: str, trial_id: str, stray: Instance, now: float) -> None:
    """A cancel's sweep of the job bills ``stray`` (as :func:`sweep_finished` does: the record
    read, the part written by compare-and-set, then the trial's and the job's sums)."""
    with Store.open(db) as o:
        row, no_reference = o.get_instance("l-0"), types.SimpleNamespace(unknown=[])
        _bill_outlived(o, row, stray, now, rule_for("aws"), no_reference)  # type: ignore[arg-type]
        o.update_trial_cost_to_lives(trial_id)
        o.update_job_cost_to_records("j-aws")


def _sweep(store: Store, trial: Any, now: float, db: str, cancel: dict[str, str]) -> LaunchCleanup:
    """The drain's stray sweep over two strays of l-0, i-s1 and i-s2; ``cancel``: when the
    cancel bills which stray ("listing": while the drain lists; "terminate <id>": while the
    drain terminates that stray)."""
    strays = [_stray("i-s1", now), _stray("i-s2", now)]
    by_id = {s.instance_id: s for s in strays}

    def describe(_: object) -> list[Instance]:
        if "listing" in cancel:
            _cancel_bills(db, trial.trial_id, by_id[cancel["listing"]], now)
        return strays

    def terminate(ids: list[str]) -> None:
        for iid in ids:
            if cancel.get(f"terminate {iid}"):
                _cancel_bills(db, trial.trial_id, by_id[cancel[f"terminate {iid}"]], now)

    return sweep(store, trial, now, describe, terminate)


def _after(tmp_path: Path, cancel: dict[str, str]) -> tuple[Any, LaunchCleanup, float, Any]:
    now = time.time()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = types.SimpleNamespace(trial_id=aws_job(db, now), cost_usd=PRICE)
    with Store.open_existing(db) as store:
        lc = _sweep(store, trial, now, db, cancel)
        row = store.get_instance("l-0")
        trial_cost = store.get_trial(trial.trial_id).cost_usd
    return row, lc, trial_cost, trial


def _parts(row: Any) -> list[str]:
    return sorted(p.get("instance", "?") for p in json.loads(row.extra_bills_json or "[]"))


def test_the_second_stray_a_cancel_did_not_list_is_billed_by_the_drain(tmp_path: Path) -> None:
    """The cancel listed only i-s1 and billed it while the drain listed: the drain's write for
    i-s1 loses, and i-s2 is billed here, once (was: skipped, "the other process bills it":
    the record, the trial and the job's spend missed its $0.475)."""
    row, lc, trial_cost, trial = _after(tmp_path, {"listing": "i-s1"})
    assert row.cost_usd == pytest.approx(PRICE + 2 * HALF)  # was $1.425
    assert row.market_seconds == pytest.approx(3600.0 + 2 * 1800.0)
    assert _parts(row) == ["i-s1", "i-s2"]  # each stray one part, naming it
    assert trial_cost == pytest.approx(PRICE + 2 * HALF)
    assert lc.spent_usd == pytest.approx(PRICE + 2 * HALF)  # what the job's end writes
    assert trial.cost_usd == pytest.approx(PRICE + 2 * HALF)


@pytest.mark.parametrize(
    "cancel",
    [
        {"listing": "i-s2"},  # the cancel billed the second one: the drain bills the first
        {"listing": "i-s1", "terminate i-s2": "i-s2"},  # each billed by the cancel
        {"terminate i-s1": "i-s1", "terminate i-s2": "i-s2"},  # the same, later
        # the cancel lists i-s1 (listing lag) after the drain billed it: its record, read
        # after the drain's part, names it (was: billed a second time)
        {"terminate i-s2": "i-s1"},
    ],
    ids=["cancel-second", "cancel-both-listing", "cancel-both-terminate", "cancel-late"],
)
def test_each_stray_is_billed_exactly_once_whoever_bills_it(
    tmp_path: Path, cancel: dict[str, str]
) -> None:
    """However the cancel's bills interleave with the drain's (the cancel's part written while
    the drain lists, or just before the drain's own compare-and-set of that stray), each
    stray is one part of the record and the spend counts each once."""
    row, lc, trial_cost, _ = _after(tmp_path, cancel)
    assert row.cost_usd == pytest.approx(PRICE + 2 * HALF)
    assert _parts(row) == ["i-s1", "i-s2"]
    assert trial_cost == pytest.approx(PRICE + 2 * HALF)
    assert lc.spent_usd == pytest.approx(PRICE + 2 * HALF)


@pytest.mark.parametrize("market", ["spot", "on-demand"])
def test_a_stray_is_billed_at_its_records_price_on_either_market(
    tmp_path: Path, market: str
) -> None:
    """review-an F3: the stray's offer carried an on-demand price of 0.0, and a cloud bills an
    on-demand life at that price (backend._price_at_launch): an on-demand stray was billed $0.
    The real cloud pricing, one stray up half an hour."""
    from spotwise.planner.backend import _price_at_launch

    now = time.time()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = types.SimpleNamespace(trial_id=aws_job(db, now), cost_usd=PRICE)
    with Store.open_existing(db) as store:
        store.update_instance("l-0", market=market)
        strays = [_stray("i-s1", now)]
        lc = sweep(store, trial, now, lambda _: strays, lambda ids: None, _price_at_launch)
        row = store.get_instance("l-0")
    assert row.cost_usd == pytest.approx(PRICE + HALF)  # on-demand was $0.95: the stray free
    assert lc.spent_usd == pytest.approx(PRICE + HALF)
