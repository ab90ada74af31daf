"""The drain's stray sweep and a `spotwise cancel` of the same failed launch (s22 helper A's
notes 2 and 4).

2. The drain bills a stray of a launch whose record stays open (a failed launch with an
   instance that refused its terminate, a leftover) to that record. Its bill on the open record
   named no instance: the cancel that later closed the record took its seconds for the own
   life's and billed the own instance that much short. The bill is now a part naming the
   stray (dated with the record's close, when `spotwise report` counts the record), and the
   cancel bills the own life less only what the parts naming other instances leave.
4. A failed launch the drain could not confirm clean, with no instance of it found, whose
   record a cancel closed meanwhile, stayed a leftover of the job where the drain found no
   stray of it to bill (only a stray's bill settled it).

The real ``StraySweep._sweep_strays`` and the cancel's real ``_release`` (and ``_settle``, over
a fake AWS), a real store. Prices: $0.90/h."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest
from test_s22a2_cancel_open_launch import JOB, OFFER, PRICE, SPEC, T, _Cloud, _instance

from spotwise import release
from spotwise.planner.launch_cleanup import LaunchCleanup, Unconfirmed
from spotwise.planner.stray_sweep import launch_leftover
from spotwise.providers import registry
from spotwise.providers.base import InstanceState
from spotwise.providers.billing import rule_for
from spotwise.release import _release
from spotwise.store import Store

D = T - 1800  # the drain


def _job(db: str, **l1: Any) -> str:
    """The job (its orchestrator gone after its drain) whose trial holds the failed launch
    l-1, open (``l1``: its columns); the trial's id."""
    with Store.open(db) as s:
        s.create_job("j", SPEC, "job.yaml", "spot-greedy", "maximize", job_id=JOB)
        s.update_job(JOB, state="running", pid=0)
        trial = s.add_trial(JOB, 0, {"lr": 0.1})
        s.record_launch(
            job_id=JOB, trial_id=trial.id, provider="aws", region="us-east-1",
            zone="us-east-1a", instance_type="p3.2xlarge", market="spot",
            offer_key=OFFER.key, price_per_hour=PRICE, id="l-1", requested_at=T - 3700,
            end_reason="unconfirmed", **l1,
        )  # fmt: skip
        cost = s.get_instance("l-1").cost_usd
        s.update_trial(trial.id, cost_usd=cost)
        s.update_job(JOB, cost_usd=cost)
    return trial.id


def _sweep(db: str, trial_id: str, ids: list[str], cloud: Any) -> LaunchCleanup:
    """The drain's stray sweep at ``D``; l-1 not confirmed clean (``ids``: its instances that
    refused their terminate), a leftover."""
    with Store.open_existing(db) as store:
        t = types.SimpleNamespace(trial_id=trial_id, cost_usd=store.get_trial(trial_id).cost_usd)
        lc = object.__new__(LaunchCleanup)
        lc.store, lc.job_id, lc.spent_usd, lc.trials = store, JOB, t.cost_usd, [t]
        lc.unconfirmed = {"l-1": Unconfirmed(t, ids, T - 3700, OFFER)}  # type: ignore[arg-type]
        lc.leftover_ids = list(ids) or [launch_leftover("l-1")]
        lc._event = lambda *a, **k: None  # type: ignore[method-assign]
        lc.backend = types.SimpleNamespace(  # type: ignore[assignment]
            provisioner=cloud,
            segments=lambda o, a, b: [(b - a, o.price_per_hour)],
            rule_of=lambda o: rule_for("aws"),
        )
        lc._sweep_strays(D)
    return lc


def _cancel(db: str, monkeypatch: pytest.MonkeyPatch, cloud: _Cloud) -> dict[str, Any]:
    monkeypatch.setattr(registry, "cloud_module", lambda name: cloud)
    monkeypatch.setattr(release, "wall_now", lambda: T)
    with Store.open_existing(db) as s:
        return _release(s, s.get_job(JOB), orchestrator_died=True)


def test_a_stray_the_drain_billed_to_the_open_record_leaves_the_own_life_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """l-1's instance i-1 (up since T-1h) refused its terminate: the drain billed it up to
    itself (D = T-30min: $0.45, 1800 s) and its stray sweep terminated and billed i-x (a
    retried create up ten minutes: $0.15, 600 s) to the open record. The cancel at T
    terminates i-1 and bills its whole hour: the record $1.05 at 4200 s, i-x's part once
    (was: i-x's 600 s taken for i-1's: $0.90 at 3600 s, i-1 ten minutes short)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = _job(db, provider_instance_id="i-1", cost_usd=0.45, market_seconds=1800.0)
    i1, ix = _instance("i-1", T - 3600), _instance("i-x", T - 2400)
    lc = _sweep(db, trial, ["i-1"], _Cloud([i1, ix]))
    assert lc.spent_usd == pytest.approx(0.6) and lc.leftover_ids == ["i-1"]
    with Store.open_existing(db) as s:
        drained = s.get_instance("l-1")
    assert (drained.state, drained.cost_usd, drained.market_seconds) == (
        "requested",
        pytest.approx(0.6),
        2400.0,
    )
    gone = _instance("i-x", T - 2400, InstanceState.TERMINATED)
    out = _cancel(db, monkeypatch, _Cloud([i1, gone]))
    with Store.open_existing(db) as s:
        row, trial_usd, job_usd = s.get_instance("l-1"), s.get_trial(trial).cost_usd, 0.0
        job_usd = s.get_job(JOB).cost_usd
    assert out["terminated_instances"] == ["i-1"] and out["closed_records"] == 1
    assert (row.cost_usd, row.market_seconds) == (pytest.approx(1.05), 4200.0)  # was 0.90, 3600
    parts = json.loads(row.extra_bills_json)
    assert parts == [
        {
            "at": T,  # counted with the record's close
            "cost_usd": pytest.approx(0.15),
            "on_demand_cost_usd": 0.0,
            "market_seconds": 600.0,
            "instance": "i-x",
        }
    ]
    assert (row.state, row.provider_instance_id, row.launched_at) == ("terminated", "i-1", T - 3600)
    assert trial_usd == pytest.approx(1.05) and job_usd == pytest.approx(1.05)


@pytest.mark.parametrize("when", ["while the drain lists", "before the drain's sweep"])
def test_a_launch_a_cancel_settled_is_no_leftover_of_the_drain(tmp_path: Path, when: str) -> None:
    """l-1 failed and its listings never found an instance (a leftover named by its launch).
    A cancel closes its record ("not found": its listing confirmed nothing is left), and the
    drain's last listing finds no stray of it: l-1 is settled, no leftover (was: still named
    in the job's error and summary, `tune` exiting 1)."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    trial = _job(db)

    def close() -> None:
        with Store.open_existing(db) as o:
            assert o.rebill_instance_if_unchanged(
                o.get_instance("l-1"), state="terminated", end_reason="reconciled", ended_at=D,
                billed_at=D,
            )  # fmt: skip

    cloud = _Cloud([])
    if when == "before the drain's sweep":
        close()
    else:
        cloud.while_listing = close
    lc = _sweep(db, trial, [], cloud)
    assert lc.leftover_ids == [] and lc.unconfirmed == {}


def test_a_launch_still_open_stays_a_leftover(tmp_path: Path) -> None:
    """A guard: no cancel closed l-1's record: it stays a leftover, as before."""
    db = f"sqlite:///{tmp_path / 'state.db'}"
    lc = _sweep(db, _job(db), [], _Cloud([]))
    assert lc.leftover_ids == [launch_leftover("l-1")] and list(lc.unconfirmed) == ["l-1"]
