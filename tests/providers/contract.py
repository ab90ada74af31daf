"""The provider contract: one suite of tests every provider must pass (local, replay, AWS on
moto, GCP and Azure on their fakes, ...), in the manner of Optuna's ``StorageTestCase``.

Subclass :class:`ProviderContract` in ``tests/providers/test_contract_<provider>.py`` and give
it a ``provider`` fixture returning ``(catalog, provisioner)``. Everything else has a default
that a subclass may override with a fixture of the same name:

* ``region`` — the region the tests use (default: the first of ``catalog.regions()`` that has
  offers).
* ``history_window`` — ``(start, end)`` in the catalog's clock (default: the last 6 h of wall
  time).
* ``launch_argv`` / ``launch_env`` / ``launch_workdir`` — what a launched instance runs.
* ``foreign_instance_id`` — the id of an instance that is *not* ours (default: a made-up id;
  cloud fakes should create a real untagged instance so refusal is tested against one).
* ``inject_notice`` — a callable ``(instance_id) -> None`` that makes the provider deliver an
  interruption notice for that instance (default: the notice test is skipped).
* ``settle_s`` — how long asynchronous state changes may take to show (default 20 s).

Keep this base stable: other providers' test files subclass it.
"""

from __future__ import annotations

import math
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from spotwise.errors import ProviderError
from spotwise.providers.base import (
    TAG_JOB,
    TAG_LAUNCH,
    TAG_MANAGED,
    TAG_TRIAL,
    Catalog,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    NoticeKind,
    Offer,
    Provisioner,
    is_ours,
    our_tags,
)

CatalogAndProvisioner = tuple[Catalog, Provisioner]


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class ProviderContract:
    """The behaviour every (catalog, provisioner) pair must have. Subclass; do not collect."""

    # ---- fixtures a subclass may override ---------------------------------------------
    @pytest.fixture
    def provider(self) -> CatalogAndProvisioner:  # pragma: no cover - always overridden
        raise NotImplementedError("subclasses provide a `provider` fixture")

    @pytest.fixture
    def region(self, provider: CatalogAndProvisioner) -> str:
        catalog = provider[0]
        for r in catalog.regions():
            if catalog.offers(region=r):
                return r
        pytest.fail(f"{catalog.name}: no region has offers")

    @pytest.fixture
    def history_window(self) -> tuple[float, float]:
        now = time.time()
        return now - 6 * 3600, now

    @pytest.fixture
    def launch_argv(self) -> tuple[str, ...]:
        return (sys.executable, "-c", "import time; time.sleep(60)")

    @pytest.fixture
    def launch_env(self) -> dict[str, str]:
        return {}

    @pytest.fixture
    def launch_workdir(self) -> str:
        return ""

    @pytest.fixture
    def foreign_instance_id(self) -> str:
        return "i-0f0e0d0c0b0a09080"

    @pytest.fixture
    def inject_notice(self) -> Callable[[str], None] | None:
        return None

    @pytest.fixture
    def settle_s(self) -> float:
        return 20.0

    # ---- helpers ----------------------------------------------------------------------
    @pytest.fixture
    def launcher(
        self,
        provider: CatalogAndProvisioner,
        region: str,
        launch_argv: tuple[str, ...],
        launch_env: dict[str, str],
        launch_workdir: str,
    ) -> Any:
        """``launch(job=..., trial=...) -> (Instance, LaunchRequest)``; terminates leftovers."""
        catalog, prov = provider
        launched: list[str] = []

        def launch(job: str | None = None, trial: str | None = None) -> tuple[Any, Any]:
            job, trial = job or new_id("job"), trial or new_id("trial")
            launch_id = uuid.uuid4().hex[:16]
            offer = cheapest_launchable(catalog, region)
            env = {
                "SPOTWISE_JOB_ID": job,
                "SPOTWISE_TRIAL_ID": trial,
                "SPOTWISE_ATTEMPT": "1",
                **launch_env,
            }
            req = LaunchRequest(
                offer, launch_argv, env, our_tags(job, trial, launch_id), launch_id, launch_workdir
            )
            inst = prov.launch(req)
            launched.append(inst.instance_id)
            return inst, req

        yield launch
        live = [
            i.instance_id
            for i in prov.describe()
            if i.instance_id in launched and not i.state.is_terminal()
        ]
        if live:
            prov.terminate(live)

    # ---- catalog ----------------------------------------------------------------------
    def test_catalog_and_provisioner_satisfy_the_protocols(
        self, provider: CatalogAndProvisioner
    ) -> None:
        catalog, prov = provider
        assert isinstance(catalog, Catalog)
        assert isinstance(prov, Provisioner)
        assert catalog.name and prov.name

    def test_regions_are_known(self, provider: CatalogAndProvisioner, region: str) -> None:
        regions = provider[0].regions()
        assert regions and region in regions
        assert all(isinstance(r, str) and r for r in regions)

    def test_offers_are_nonempty_with_positive_prices(
        self, provider: CatalogAndProvisioner, region: str
    ) -> None:
        offers = provider[0].offers(region=region)
        assert offers, "a region with offers must list them"
        for o in offers:
            assert isinstance(o, Offer)
            assert o.region == region
            assert o.zone and o.instance_type
            assert math.isfinite(o.price_per_hour) and o.price_per_hour > 0, o
            assert o.on_demand_price_per_hour >= 0, o
            if o.market is Market.ON_DEMAND:
                assert o.price_per_hour == pytest.approx(o.on_demand_price_per_hour), o

    def test_on_demand_is_not_cheaper_than_spot(
        self, provider: CatalogAndProvisioner, region: str
    ) -> None:
        offers = provider[0].offers(region=region)
        on_demand = {
            (o.zone, o.instance_type): o.price_per_hour
            for o in offers
            if o.market is Market.ON_DEMAND
        }
        spot = [o for o in offers if o.market is Market.SPOT]
        assert spot, "the contract needs at least one spot offer in the test region"
        for o in spot:
            if o.on_demand_price_per_hour > 0:  # 0.0 = on-demand price unknown
                assert o.on_demand_price_per_hour >= o.price_per_hour, o
            od = on_demand.get((o.zone, o.instance_type))
            if od is not None:
                assert od >= o.price_per_hour, (o, od)

    def test_offers_filter_by_market_and_instance_type(
        self, provider: CatalogAndProvisioner, region: str
    ) -> None:
        catalog = provider[0]
        for market in (Market.SPOT, Market.ON_DEMAND):
            assert all(o.market is market for o in catalog.offers(region=region, market=market))
        some = catalog.offers(region=region)[0].instance_type
        picked = catalog.offers(region=region, instance_types=[some])
        assert picked and all(o.instance_type == some for o in picked)

    def test_instance_types_describe_hardware(
        self, provider: CatalogAndProvisioner, region: str
    ) -> None:
        types = provider[0].instance_types(region)
        assert types
        for t in types:
            assert t.name and t.region == region
            assert t.vcpus > 0 and t.memory_gb > 0, t
            assert t.gpus >= 0
            assert t.on_demand_price_per_hour is None or t.on_demand_price_per_hour > 0

    def test_price_history_is_ordered_within_each_zone(
        self,
        provider: CatalogAndProvisioner,
        region: str,
        history_window: tuple[float, float],
    ) -> None:
        catalog = provider[0]
        spot = [o for o in catalog.offers(region=region, market=Market.SPOT)]
        assert spot
        start, end = history_window
        hist = catalog.price_history(region, spot[0].instance_type, start, end)
        assert hist, "the history of an offered spot instance type must not be empty"
        by_zone: dict[str, list[float]] = {}
        for p in hist:
            by_zone.setdefault(p.zone, []).append(p.timestamp)
        for zone, times in by_zone.items():
            assert times == sorted(times), f"history of {zone} is not in time order"
        for p in hist:
            assert p.instance_type == spot[0].instance_type
            assert p.price_per_hour > 0
            assert p.timestamp <= end

    # ---- provisioner ------------------------------------------------------------------
    def test_launch_describe_terminate(
        self, provider: CatalogAndProvisioner, launcher: Any, settle_s: float
    ) -> None:
        prov = provider[1]
        inst, req = launcher()
        assert inst.instance_id
        assert is_ours(inst.tags)
        found = _find(prov.describe({TAG_LAUNCH: req.client_token}), inst.instance_id)
        assert found is not None, "a launched instance must show in describe()"
        for key in (TAG_MANAGED, TAG_JOB, TAG_TRIAL, TAG_LAUNCH):
            assert found.tags[key] == req.tags[key]
        assert found.offer.instance_type == req.offer.instance_type
        assert found.offer.market is req.offer.market
        assert found.holds_resource(), "a launched instance holds a resource until terminated"
        prov.terminate([inst.instance_id])
        gone = wait_for(
            lambda: _terminal(prov.describe({TAG_LAUNCH: req.client_token}), inst.instance_id),
            settle_s,
            "the terminated instance to show a terminal state",
        )
        assert gone.state in (InstanceState.TERMINATED, InstanceState.REVOKED)
        assert not gone.holds_resource(), "a terminated instance must hold nothing any more"
        prov.terminate([inst.instance_id])  # terminating twice is harmless

    def test_launch_is_idempotent_by_client_token(
        self, provider: CatalogAndProvisioner, launcher: Any
    ) -> None:
        prov = provider[1]
        inst, req = launcher()
        again = prov.launch(req)
        assert again.instance_id == inst.instance_id
        assert len(prov.describe({TAG_LAUNCH: req.client_token})) == 1

    def test_launch_without_our_tags_is_refused(
        self, provider: CatalogAndProvisioner, region: str, launch_argv: tuple[str, ...]
    ) -> None:
        catalog, prov = provider
        offer = cheapest_launchable(catalog, region)
        req = LaunchRequest(offer, launch_argv, {}, {"owner": "someone"}, uuid.uuid4().hex[:16])
        with pytest.raises(ProviderError):
            prov.launch(req)

    def test_terminate_of_a_foreign_id_is_refused(
        self, provider: CatalogAndProvisioner, foreign_instance_id: str, launcher: Any
    ) -> None:
        prov = provider[1]
        inst, _ = launcher()
        with pytest.raises(ProviderError):
            prov.terminate([foreign_instance_id])
        with pytest.raises(ProviderError):  # a mix is refused as a whole
            prov.terminate([inst.instance_id, foreign_instance_id])
        mine = _find(prov.describe(), inst.instance_id)
        assert mine is not None and not mine.state.is_terminal()
        assert all(i.instance_id != foreign_instance_id for i in prov.describe())

    def test_describe_is_scoped_to_the_job(
        self, provider: CatalogAndProvisioner, launcher: Any
    ) -> None:
        prov = provider[1]
        a, ra = launcher(job=new_id("job-a"))
        b, rb = launcher(job=new_id("job-b"))
        in_a = {i.instance_id for i in prov.describe({TAG_JOB: ra.tags[TAG_JOB]})}
        in_b = {i.instance_id for i in prov.describe({TAG_JOB: rb.tags[TAG_JOB]})}
        assert a.instance_id in in_a and b.instance_id not in in_a
        assert b.instance_id in in_b and a.instance_id not in in_b
        assert all(is_ours(i.tags) for i in prov.describe())

    def test_progress_of_a_new_instance_is_a_list(
        self, provider: CatalogAndProvisioner, launcher: Any
    ) -> None:
        prov = provider[1]
        inst, _ = launcher()
        events = prov.progress(inst.instance_id)
        assert isinstance(events, list)
        assert all(isinstance(e, dict) for e in events)

    def test_interruption_notice_is_reported(
        self,
        provider: CatalogAndProvisioner,
        launcher: Any,
        inject_notice: Callable[[str], None] | None,
        settle_s: float,
    ) -> None:
        if inject_notice is None:
            pytest.skip("this provider's test gives no way to inject a notice")
        prov = provider[1]
        inst, _ = launcher()
        inject_notice(inst.instance_id)
        notice = wait_for(
            lambda: next((n for n in prov.notices() if n.instance_id == inst.instance_id), None),
            settle_s,
            "the injected interruption notice",
        )
        assert notice.kind is NoticeKind.INTERRUPTION
        assert notice.deadline >= notice.received_at
        assert all(n.instance_id != inst.instance_id for n in prov.notices()), "reported twice"


def cheapest_launchable(catalog: Catalog, region: str) -> Offer:
    """The cheapest available spot offer of the region (on-demand if it has no spot offer)."""
    offers = [o for o in catalog.offers(region=region) if o.available]
    spot = [o for o in offers if o.market is Market.SPOT]
    pool = spot or offers
    assert pool, f"{catalog.name}: no available offer in {region}"
    return min(pool, key=lambda o: (o.price_per_hour, o.key))


def _find(instances: list[Instance], instance_id: str) -> Instance | None:
    return next((i for i in instances if i.instance_id == instance_id), None)


def _terminal(instances: list[Instance], instance_id: str) -> Instance | None:
    i = _find(instances, instance_id)
    return i if i is not None and i.state.is_terminal() else None


def tags_subset(small: Mapping[str, str], big: Mapping[str, str]) -> bool:
    return all(big.get(k) == v for k, v in small.items())
