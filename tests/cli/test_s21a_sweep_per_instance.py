"""`spotwise cancel`'s sweep of a finished job decides each instance of a launch on its own
(review-al F7, the sweep's side).

After one instance of launch L lost its compare-and-set (another cancel billed L's record
first), the sweep kept the record as read before its listing, so every later instance of L
lost too and was reported "billed by another cancel". An other cancel that listed before the
second instance showed billed only the first: nobody billed the second. Each instance's bill
is now a part naming it; a lost write reads the record again and bills what the other's parts
do not name."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from test_s19_cancel_race_sweep import HOUR, PRICE, _finished, _ReadBefore

from spotwise.planner import reconcile
from spotwise.providers.base import TAG_JOB, TAG_LAUNCH, Instance, InstanceState, Market, Offer
from spotwise.release_sweep import sweep_finished
from spotwise.store import Store


def _cloud(monkeypatch: pytest.MonkeyPatch, job: str, launch: str = "l-lost") -> list[list[str]]:
    """Each sweep's listing, in turn: the instance ids of its entry (instances of ``launch``,
    up an hour), all terminated by that sweep."""
    listings: list[list[str]] = []
    started = time.time() - HOUR

    def listed(spec: Any, job_id: str, held: list[Any], spare: Any, **_: Any) -> Any:
        offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, PRICE, 3.06)
        tags = {TAG_JOB: job, TAG_LAUNCH: launch}
        found = [
            Instance(iid, offer, InstanceState.RUNNING, tags, started, launch_identity=launch)
            for iid in listings.pop(0)
        ]
        return reconcile.Reconciled(terminated=[i.instance_id for i in found], listed=found)

    monkeypatch.setattr(reconcile, "reconcile_records", listed)
    return listings


def _two_sweeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: list[str], second: list[str]
) -> tuple[dict[str, Any], dict[str, Any], Any, float, float]:
    """Two cancels of the finished job, the second having read its records when the first did
    (before the first wrote); ``first`` and ``second``: what each listed."""
    db, job_id, trial = _finished(tmp_path)
    _cloud(monkeypatch, job_id).extend([first, second])
    with Store.open(db) as s:
        job = s.get_job(job_id)
        late = _ReadBefore(s, job_id)
        one = sweep_finished(s, job, "succeeded")
        two = sweep_finished(late, job, "succeeded")
        row = s.get_instance("l-lost")
        trial_cost, job_cost = s.get_trial(trial).cost_usd, s.get_job(job_id).cost_usd
    return one, two, row, trial_cost, job_cost


def _outcomes(out: dict[str, Any]) -> dict[str, tuple[bool, float]]:
    return {
        f["instance_id"]: (bool(f["billed_by_another"]), round(f["billed_usd"], 2))
        for f in out["found_instances"]
    }


def _parts(row: Any) -> list[str]:
    return sorted(p.get("instance", "?") for p in json.loads(row.extra_bills_json or "[]"))


@pytest.mark.parametrize("order", [["i-a", "i-b"], ["i-b", "i-a"]], ids=["a-first", "b-first"])
def test_the_instance_the_other_cancel_did_not_list_is_billed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: list[str]
) -> None:
    """The first cancel listed only i-a and billed it; the second lists both: i-a is the
    first's, i-b is billed here, once (was: "billed by another cancel", and nobody billed
    its hour: the record, trial and job $0.90 short)."""
    one, two, row, trial_cost, job_cost = _two_sweeps(tmp_path, monkeypatch, ["i-a"], order)
    assert _outcomes(one) == {"i-a": (False, PRICE)}
    assert _outcomes(two) == {"i-a": (True, 0.0), "i-b": (False, PRICE)}  # i-b was (True, 0.0)
    assert row.cost_usd == pytest.approx(2 * PRICE, abs=0.01)  # was $0.90
    assert _parts(row) == ["i-a", "i-b"]
    assert trial_cost == pytest.approx(row.cost_usd)
    assert job_cost == pytest.approx(PRICE + row.cost_usd)  # l-ok's hour and l-lost's two


def test_instances_the_other_cancel_billed_are_not_billed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both listed both: the first billed each, the second neither."""
    one, two, row, trial_cost, job_cost = _two_sweeps(
        tmp_path, monkeypatch, ["i-a", "i-b"], ["i-b", "i-a"]
    )
    assert _outcomes(one) == {"i-a": (False, PRICE), "i-b": (False, PRICE)}
    assert _outcomes(two) == {"i-a": (True, 0.0), "i-b": (True, 0.0)}
    assert row.cost_usd == pytest.approx(2 * PRICE, abs=0.01)
    assert _parts(row) == ["i-a", "i-b"]
    assert trial_cost == pytest.approx(row.cost_usd)
    assert job_cost == pytest.approx(PRICE + row.cost_usd)


def test_an_instance_listed_again_after_it_was_billed_is_not_billed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later cancel (its records read after the first's bill) whose listing still shows
    i-x, a retried create of l-ok (the cloud's listing lags its terminate): the record's part
    names i-x, so it is not billed a second time (was: its compare-and-set, on a record read
    after the first's bill, applied: $1.80 for its hour, on top of l-ok's own $0.90)."""
    db, job_id, _ = _finished(tmp_path)
    _cloud(monkeypatch, job_id, "l-ok").extend([["i-x"], ["i-x"]])
    with Store.open(db) as s:
        first = sweep_finished(s, s.get_job(job_id), "succeeded")
        again = sweep_finished(s, s.get_job(job_id), "succeeded")
        row = s.get_instance("l-ok")
        trial_cost, job_cost = s.get_trial(row.trial_id).cost_usd, s.get_job(job_id).cost_usd
    assert _outcomes(first) == {"i-x": (False, PRICE)}
    assert _outcomes(again) == {"i-x": (True, 0.0)}  # was (False, 0.9)
    assert row.cost_usd == pytest.approx(2 * PRICE, abs=0.01)  # was $2.70
    assert _parts(row) == ["i-x"]
    assert trial_cost == pytest.approx(row.cost_usd)
    assert job_cost == pytest.approx(row.cost_usd)
