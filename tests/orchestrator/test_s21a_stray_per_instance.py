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
from shared_helpers import record_life

from spotwise.planner.launch_cleanup import LaunchCleanup
from spotwise.providers.base import Instance, InstanceState, Market, Offer, our_tags
from spotwise.providers.billing import rule_for
from spotwise.release_sweep import _bill_outlived
from spotwise.store import Store

PRICE = 0.95  # record_life's
HALF = PRICE / 2  # a stray up half an hour
OFFER = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, PRICE, 3.0)
SPEC = json.dumps({"providers": [{"name": "aws", "regions": ["us-east-1"]}]})


def _job(db: str, now: float) -> str:
    """A running AWS job with one trial whose life l-0 (instance i-0) ran an hour, $0.95."""
    with Store.open(db) as s:
        s.create_job("j", SPEC, "job.yaml", "spot-greedy", "maximize", job_id="j-aws")
        s.update_job("j-aws", state="running", cost_usd=PRICE)
        record_life(
            s, "j-aws", 0, "l-0", requested_at=now - 7200, launched_at=now - 7200,
            provider_instance_id="i-0", state="terminated", end_reason="completed",
            ended_at=now - 3600, cost_usd=PRICE, market_seconds=3600.0,
        )  # fmt: skip
        trial_id: str = s.get_instance("l-0").trial_id
        s.update_trial(trial_id, cost_usd=PRICE)
    return trial_id


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

    lc = object.__new__(LaunchCleanup)
    lc.store, lc.job_id, lc.leftover_ids, lc.unconfirmed = store, "j-aws", [], {}
    lc.spent_usd, lc.trials = PRICE, [trial]
    lc._event = lambda *a, **k: None  # type: ignore[method-assign]
    lc.backend = types.SimpleNamespace(  # type: ignore[assignment]
        provisioner=types.SimpleNamespace(describe=describe, terminate=terminate),
        segments=lambda o, a, b: [(b - a, o.price_per_hour)],
        rule_of=lambda o: rule_for("aws"),
    )
    lc._sweep_strays(now)
    return lc


def _after(tmp_path: Path, cancel: dict[str, str]) -> tuple[Any, LaunchCleanup, float, Any]:
    now = time.time()
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = types.SimpleNamespace(trial_id=_job(db, now), cost_usd=PRICE)
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
    trial = types.SimpleNamespace(trial_id=_job(db, now), cost_usd=PRICE)
    with Store.open_existing(db) as store:
        store.update_instance("l-0", market=market)
        lc = object.__new__(LaunchCleanup)
        lc.store, lc.job_id, lc.leftover_ids, lc.unconfirmed = store, "j-aws", [], {}
        lc.spent_usd, lc.trials = PRICE, [trial]
        lc._event = lambda *a, **k: None  # type: ignore[method-assign]
        lc.backend = types.SimpleNamespace(  # type: ignore[assignment]
            provisioner=types.SimpleNamespace(
                describe=lambda _: [_stray("i-s1", now)], terminate=lambda ids: None
            ),
            segments=_price_at_launch,
            rule_of=lambda o: rule_for("aws"),
        )
        lc._sweep_strays(now)
        row = store.get_instance("l-0")
    assert row.cost_usd == pytest.approx(PRICE + HALF)  # on-demand was $0.95: the stray free
    assert lc.spent_usd == pytest.approx(PRICE + HALF)
