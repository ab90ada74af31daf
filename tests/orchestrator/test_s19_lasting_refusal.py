"""A lasting refusal of an offer (Azure's Spot price above the job's max price, a size without
Spot, EC2's ``Unsupported`` type in the zone: :attr:`CapacityError.lasting`) blocks the offer
for a backoff that doubles per such refusal of it, reset by a launch on it that goes through.
It was blocked for one pass, as a plain capacity refusal still is: the catalog keeps the live
price, so the same refused request went to the cloud about once a tick for the whole job.

The market here is a single offer (us-east-1a, Spot) replayed at 120x; the first lasting block
is 0.5 wall s (60 market s), the cap 1 wall s; a pass of the loop is a few market s."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_orchestrator import GAP_S, T0, TRACE_TICKS, tiny_spec, write_spec

from spotwise import jobs
from spotwise.errors import CapacityError
from spotwise.planner import actions, orchestrator
from spotwise.providers.base import Instance, LaunchRequest
from spotwise.store import Store

SPEEDUP = 120.0
PRICE_CAP = (
    "azure: launching Standard_NC4as_T4_v3 in eastus-1: SpotPriceGreaterThanProvidedMaxPrice: "
    "the provided max price '0.05 USD' is lower than the current spot price"
)
NO_CAPACITY = "azure: launching Standard_NC4as_T4_v3 in eastus-1: AllocationFailed: no capacity"


class Refusing:
    """The local provisioner, answering its launch calls as ``answers`` says, in turn
    (``lasting`` or ``plain`` refusals, ``ok``: launched), then launching; the market time and
    the answer of each call are kept."""

    def __init__(self, inner: Any, answers: list[str]) -> None:
        self.inner = inner
        self.name = inner.name
        self.answers = list(answers)
        self.calls: list[tuple[float, str]] = []  # (market time, answer)

    def launch(self, request: LaunchRequest) -> Instance:
        answer = self.answers.pop(0) if self.answers else "ok"
        self.calls.append((self.inner.clock.now(), answer))
        if answer == "ok":
            return self.inner.launch(request)
        e = CapacityError(PRICE_CAP if answer == "lasting" else NO_CAPACITY)
        if answer == "lasting":
            e.lasting = True  # set as an attribute: the test runs against older code too
        raise e

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _one_offer_trace(path: Path) -> None:
    rows = ["timestamp,availability_zone,instance_type,spot_available,"
            "spot_price_usd_per_hour,on_demand_price_usd_per_hour"]  # fmt: skip
    for i in range(TRACE_TICKS):
        stamp = (T0 + timedelta(seconds=GAP_S * i)).strftime("%Y-%m-%d %H:%M:%S")
        rows.append(f"{stamp},us-east-1a,p3.2xlarge,1,1.0,5.0")
    path.write_text("\n".join(rows) + "\n")


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: list[str], trials: int = 1
) -> tuple[dict[str, Any], Refusing, list[dict[str, Any]]]:
    monkeypatch.setattr(actions, "LASTING_BLOCK_WALL_S", 0.5, raising=False)
    monkeypatch.setattr(actions, "LASTING_BLOCK_MAX_WALL_S", 1.0, raising=False)
    _one_offer_trace(tmp_path / "trace.csv")
    seen: list[Refusing] = []
    real = orchestrator.open_backend

    def open_backend(*args: Any, **kwargs: Any) -> Any:
        backend = real(*args, **kwargs)
        backend.provisioner = Refusing(backend.provisioner, answers)
        seen.append(backend.provisioner)
        return backend

    monkeypatch.setattr(orchestrator, "open_backend", open_backend)
    spec = tiny_spec(tmp_path, 2)
    spec["trials"] = trials
    spec["providers"][0]["replay"]["speedup"] = SPEEDUP
    spec["providers"][0]["markets"] = ["spot"]  # one offer: its on-demand twin is not tried
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    (prov,) = seen
    with Store.open_existing(db) as store:
        failed = [e.detail for e in store.events(summary["job_id"], kind="launch_failed")]
    return summary, prov, failed


def _gaps(calls: list[tuple[float, str]]) -> list[float]:
    return [b - a for (a, _), (b, _) in itertools.pairwise(calls)]


@pytest.mark.timeout(120)
def test_a_lasting_refusal_is_asked_again_only_after_a_doubling_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, prov, failed = _run(tmp_path, monkeypatch, ["lasting"] * 3)

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    assert [a for _, a in prov.calls] == ["lasting", "lasting", "lasting", "ok"]
    # blocked 60, 120, then 120 market s (the cap): one call per block, not one per pass
    first, second, third = _gaps(prov.calls)
    assert first >= 60 and second >= 120 and third >= 120
    assert [e["blocked_wall_s"] for e in failed] == [0.5, 1.0, 1.0]
    assert all(e["lasting"] is True for e in failed)
    for (at, _), e in zip(prov.calls, failed, strict=False):
        assert e["blocked_until"] >= at + e["blocked_wall_s"] * SPEEDUP - 1
    assert [e["error"] for e in failed] == [PRICE_CAP] * 3


@pytest.mark.timeout(120)
def test_a_launch_that_goes_through_resets_the_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = ["lasting", "lasting", "ok", "lasting"]
    summary, prov, failed = _run(tmp_path, monkeypatch, answers, trials=2)

    assert summary["state"] == "succeeded" and summary["completed"] == 2, summary
    assert [a for _, a in prov.calls] == [*answers, "ok"]
    # the second trial's refusal is blocked for the first step again, not for the cap
    assert [e["blocked_wall_s"] for e in failed] == [0.5, 1.0, 0.5]
    assert _gaps(prov.calls)[-1] >= 60


@pytest.mark.timeout(120)
def test_a_plain_capacity_refusal_is_still_asked_again_the_next_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary, prov, failed = _run(tmp_path, monkeypatch, ["plain"] * 3)

    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    assert [a for _, a in prov.calls] == ["plain", "plain", "plain", "ok"]
    # blocked one pass each: a few market s here, quiet; under 5 wall s (600 market s) on a
    # busy machine, against the 300 wall s first block of a lasting refusal
    assert all(0 < gap < 600 for gap in _gaps(prov.calls)), prov.calls
    assert [sorted(e) for e in failed] == [["error", "offer"]] * 3  # as before: no block noted
    assert [e["error"] for e in failed] == [NO_CAPACITY] * 3
