"""A cloud job whose filters leave it no offer is refused before it is recorded
(:func:`spotwise.planner.preflight.check_offers`; the clouds' own cases are in
``test_preflight.py`` and ``tests/providers/test_gcp_azure_preflight.py``), and a running job
left without a usable offer can say so (:class:`spotwise.planner.offer_watch.NoOfferWatch`).

Here the market is a stub: what the check asks of it, and what it does when listing fails."""

from __future__ import annotations

from typing import Any, NoReturn

import pytest

from spotwise.errors import ProviderError, SpecError
from spotwise.planner.backend import Backend
from spotwise.planner.offer_watch import NoOfferWatch
from spotwise.planner.preflight import check_offers
from spotwise.providers.base import Market, Offer
from spotwise.spec import JobSpec, parse_spec


def job(*providers: dict[str, Any]) -> JobSpec:
    return parse_spec(
        {
            "name": "offers",
            "command": ["python", "train.py"],
            "metric": {"name": "score"},
            "steps": 4,
            "trials": 1,
            "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}},
            "providers": list(providers),
        }
    )


def offer(provider: str = "aws", available: bool = True) -> Offer:
    return Offer(
        provider, "us-east-1", "us-east-1a", "c5.xlarge", Market.SPOT, 0.07, 0.17,
        available=available,
    )  # fmt: skip


class StubCatalog:
    name = "aws"

    def offers(self, *args: Any, **kwargs: Any) -> list[Offer]:
        raise ProviderError("aws: listing offers again failed")

    def instance_types(self, region: str | None = None) -> list[Any]:
        return []


def backend(list_offers: Any, provider: str = "aws") -> Backend:
    def no(*args: Any) -> NoReturn:
        raise AssertionError("not called by the check")

    return Backend(
        provider=provider,
        catalog=StubCatalog(),  # type: ignore[arg-type]
        provisioner=None,  # type: ignore[arg-type]
        rules={},
        now=lambda: 1000.0,
        list_offers=list_offers,
        segments=no,
        close=lambda: None,
    )


AWS = {"name": "aws", "regions": ["us-east-1"], "instance_types": ["c5.xlarge"]}


def test_a_provider_error_while_listing_stays_a_provider_error() -> None:
    """The cloud cannot be reached: that is not a fault of the spec (exit 2) but the
    provider's error, as it was."""

    def unreachable(t: float) -> list[Offer]:
        raise ProviderError("aws: describing spot prices failed (RequestLimitExceeded)")

    with pytest.raises(ProviderError) as info:
        check_offers(job(AWS), backend(unreachable))
    assert type(info.value) is ProviderError
    assert str(info.value) == "aws: describing spot prices failed (RequestLimitExceeded)"


def test_offers_are_listed_once_at_the_market_s_time() -> None:
    asked: list[float] = []

    def listing(t: float) -> list[Offer]:
        asked.append(t)
        return [offer()]

    check_offers(job(AWS), backend(listing))
    assert asked == [1000.0]


def test_no_offer_names_the_field_and_the_filters_even_when_nothing_more_can_be_said() -> None:
    """Finding out what the cloud offers nearby failed (a ProviderError on the error path):
    the refusal still says which provider and which filters left nothing."""
    with pytest.raises(SpecError) as info:
        check_offers(job({**AWS, "markets": ["spot"]}), backend(lambda t: []))
    assert str(info.value) == (
        "spec field 'providers.0': no aws offer matches its filters (regions: us-east-1; "
        "instance_types: c5.xlarge; markets: spot)"
    )
    assert info.value.exit_code == 2


def test_a_local_job_is_not_listed_again() -> None:
    """``open_backend`` refuses a replayed market without a matching offer already."""

    def never(t: float) -> list[Offer]:
        raise AssertionError("a local job's offers were listed again")

    check_offers(job({"name": "local"}), backend(never, provider="local"))


# ---- a running job without a usable offer -------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_watch_says_so_after_ten_minutes_then_every_ten_while_it_lasts() -> None:
    clock = Clock()
    watch = NoOfferWatch("j-1", clock=clock)
    assert watch.after_s == 600.0
    said = []
    for t in (0.0, 300.0, 599.0, 600.0, 900.0, 1199.0, 1200.0):
        clock.t = t
        said.append((t, watch.note([])))
    tail = (
        "; spotwise keeps polling (`spotwise prices` shows the market; `spotwise cancel j-1`, "
        "then widen the providers' filters)"
    )
    assert [(t, m) for t, m in said if m] == [
        (600.0, f"no offer has matched the job's providers for 10 min{tail}"),
        (1200.0, f"no offer has matched the job's providers for 20 min{tail}"),
    ]
    clock.t = 1300.0
    assert watch.note([offer()]) is None  # an offer again: the count starts over
    for t in (1400.0, 1999.0):
        clock.t = t
        assert watch.note([offer(available=False)] * 3) is None
    clock.t = 2000.0
    assert watch.note([offer(available=False)] * 3) == (
        f"none of the 3 matching offers has had capacity for 10 min{tail}"
    )
    clock.t = 2600.0
    assert watch.note([offer(available=False)]) == (
        f"the one matching offer has had no capacity for 20 min{tail}"
    )


def test_the_watch_is_quiet_while_no_trial_waits() -> None:
    clock = Clock()
    watch = NoOfferWatch(after_s=60.0, clock=clock)
    for t in (0.0, 100.0, 1000.0):
        clock.t = t
        assert watch.note([], waiting=False) is None
    clock.t = 1001.0
    assert watch.note([]) is None  # the wait starts now, not when the offers went
    clock.t = 1061.0
    assert watch.note([]) is not None


def test_the_watch_refuses_a_period_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match=r"^after_s must be > 0 seconds, got 0$"):
        NoOfferWatch(after_s=0)


@pytest.mark.timeout(120)
def test_a_running_job_without_an_offer_says_so_and_goes_on_when_one_comes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Spot in its one zone is gone for the job's first 4 wall seconds: the job used to poll
    in silence; now a warning (and a ``no_offers`` event) says why nothing runs, and the job
    still completes once spot comes back."""
    import csv
    import functools
    import logging
    from datetime import timedelta

    from test_orchestrator import GAP_S, T0, spec_dict, write_spec

    from spotwise import jobs
    from spotwise.planner import orchestrator
    from spotwise.store import Store

    with (tmp_path / "trace.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "availability_zone", "instance_type", "spot_available",
                    "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"])  # fmt: skip
        for i in range(400):
            stamp = (T0 + timedelta(seconds=GAP_S * i)).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([stamp, "us-east-1a", "p3.2xlarge", int(i >= 4), "1.0", "5.0"])
    spec = spec_dict(tmp_path, steps=4)
    spec["providers"][0].update(zones=["us-east-1a"], markets=["spot"])
    monkeypatch.setattr(orchestrator, "NoOfferWatch", functools.partial(NoOfferWatch, after_s=1.0))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with caplog.at_level(logging.WARNING, logger="spotwise.planner"):
        summary = jobs.tune(write_spec(tmp_path, spec), db=db, run_root=tmp_path / "runs")
    assert summary["state"] == "succeeded" and summary["completed"] == 1, summary
    with Store.open_existing(db) as store:
        said = [e.detail["message"] for e in store.events(summary["job_id"], kind="no_offers")]
    assert said, "no warning while the only offer had no capacity"
    assert said[0].startswith("the one matching offer has had no capacity for ")
    assert f"`spotwise cancel {summary['job_id']}`" in said[0]
    assert any("the one matching offer has had no capacity" in r.message for r in caplog.records)
