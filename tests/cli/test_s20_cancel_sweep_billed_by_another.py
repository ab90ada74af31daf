"""A finished cloud job's sweep that another process beat to an outlived instance's bill says
so (s20 brief gap 3), and never bills it again (gap 4's other side).

The sweep that lost the race said "i-… terminated, billed $0.0000 to trial T": as if the
instance had cost nothing. It now says another cancel billed it (``billed_by_another`` in its
``found_instances`` entry). And a sweep compared the record's bill with the record read again
*after* its listing: a bill another process wrote while it listed (another cancel, or the
drain's stray sweep of a resumed run) was in that copy, and the instance was billed twice
($1.80 for its $0.90 hour). The compare is now with the record read before the listing."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from test_s19_cancel_race_sweep import HOUR, PRICE, _finished, _listing, _ReadBefore

from spotwise.planner import reconcile
from spotwise.release_sweep import sweep_finished
from spotwise.store import Store


def test_the_sweep_that_lost_the_race_says_another_cancel_billed_the_instance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, job_id, trial = _finished(tmp_path)
    _listing(monkeypatch, job_id, time.time() - HOUR)["launches"].append("l-lost")
    with Store.open(db) as s:
        job = s.get_job(job_id)
        late = _ReadBefore(s, job_id)
        first = sweep_finished(s, job, "succeeded")
        second = sweep_finished(late, job, "succeeded")
    (won,), (lost,) = first["found_instances"], second["found_instances"]
    assert "$0.0000" not in second["message"]  # was: "billed $0.0000 to trial …"
    assert (
        f"i-l-lost terminated, billed to trial {trial} by another cancel (or the job's resumed "
        "run) (launch l-lost)" in second["message"]
    )
    assert (
        f"i-l-lost terminated, billed ${won['billed_usd']:.4f} to trial {trial}"
        in (first["message"])
    )
    assert (won.get("billed_by_another"), won["billed_usd"]) == (False, pytest.approx(PRICE, 0.01))
    assert (lost.get("billed_by_another"), lost["billed_usd"], lost["trial"]) == (True, 0.0, trial)


@pytest.mark.parametrize(
    ("launch", "record_usd"),
    [
        ("l-ok", 2 * PRICE),  # another instance of a launch (a retried create): was $2.70
        ("l-lost", PRICE),  # a failed launch's own instance: was a second part (0.02 s)
    ],
)
def test_a_bill_written_while_the_sweep_listed_is_not_billed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launch: str, record_usd: float
) -> None:
    """While this sweep lists the cloud, another finds ``launch``'s instance (up an hour) and
    bills it $0.90; this one then terminates it too and bills it only if the record is as it
    read it before listing: it is not. It compared with the record read again after the
    listing, the other's bill in it: l-ok's retried create (not the record's own instance)
    was billed a second $0.90, to the record, its trial and the job; l-lost's own instance
    got a second part of its bill (the 0.02 s between the two sweeps)."""
    db, job_id, _ = _finished(tmp_path)
    _listing(monkeypatch, job_id, time.time() - HOUR)["launches"].append(launch)
    inner = reconcile.reconcile_records
    calls: list[int] = []

    def while_listing(*a: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the other cancel, start to end, while this one lists
            with Store.open(db) as other:
                sweep_finished(other, other.get_job(job_id), "succeeded")
        return inner(*a, **kw)

    monkeypatch.setattr(reconcile, "reconcile_records", while_listing)
    with Store.open(db) as s:
        out = sweep_finished(s, s.get_job(job_id), "succeeded")
        row = s.get_instance(launch)
        trial_cost, job_cost = s.get_trial(row.trial_id).cost_usd, s.get_job(job_id).cost_usd
        records = sum(r.cost_usd for r in s.list_instances(job_id))
    assert row.cost_usd == pytest.approx(record_usd, abs=0.01)
    assert len(json.loads(row.extra_bills_json or "[]")) == 1  # the other's part only
    assert trial_cost == pytest.approx(row.cost_usd)
    assert job_cost == pytest.approx(records) and records == pytest.approx(2 * PRICE, abs=0.01)
    assert out["found_instances"][0].get("billed_by_another") is True
