"""The composite provisioner and catalog of a job on several clouds (spotwise.providers.multi),
over fake members: routing, merging, refusal of ids no member owns (with nothing terminated),
failures reported rather than hidden; and the backend's billing rule per provider."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from spotwise.errors import NotFoundError, ProviderError
from spotwise.planner.backend import Backend, _several
from spotwise.planner.report import life_cost, release_is_cheaper
from spotwise.planner.runstate import Life, TrialRun, build_view
from spotwise.providers.base import (
    TAG_JOB,
    Instance,
    InstanceState,
    InstanceType,
    LaunchRequest,
    Market,
    Notice,
    NoticeKind,
    Offer,
    PricePoint,
    Provisioner,
    our_tags,
)
from spotwise.providers.billing import rule_for
from spotwise.providers.multi import MultiCatalog, MultiProvisioner


def offer(provider: str, price: float = 1.0, zone: str = "z-a") -> Offer:
    return Offer(provider, "r", f"{provider}-{zone}", "vm", Market.SPOT, price, price * 3)


class FakeMember:
    """A provisioner that records every call; ``fail`` makes describe/notices/terminate raise."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.live: dict[str, Instance] = {}
        self.terminated: list[list[str]] = []
        self.pending: list[Notice] = []
        self.fail = False
        self.n = 0

    def launch(self, request: LaunchRequest) -> Instance:
        self.n += 1
        inst = Instance(
            f"{self.name}-{self.n}", request.offer, InstanceState.RUNNING, dict(request.tags)
        )
        self.live[inst.instance_id] = inst
        return inst

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        if self.fail:
            raise ProviderError(f"{self.name} API down")
        return [
            i
            for i in self.live.values()
            if all(i.tags.get(k) == v for k, v in (tags or {}).items())
        ]

    def terminate(self, instance_ids: Sequence[str]) -> None:
        if self.fail:
            raise ProviderError(f"{self.name} API down")
        self.terminated.append(list(instance_ids))
        for iid in instance_ids:
            self.live[iid].state = InstanceState.TERMINATED

    def notices(self) -> list[Notice]:
        if self.fail:
            raise ProviderError(f"{self.name} API down")
        out, self.pending = self.pending, []
        return out

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        return [{"type": "report", "step": 1, "from": self.name, "id": instance_id}]


def request(o: Offer, launch: str = "l1") -> LaunchRequest:
    return LaunchRequest(o, ("python", "t.py"), {}, our_tags("j1", "t1", launch), launch)


@pytest.fixture
def members() -> dict[str, FakeMember]:
    return {"gcp": FakeMember("gcp"), "azure": FakeMember("azure")}


@pytest.fixture
def multi(members: dict[str, FakeMember]) -> MultiProvisioner:
    return MultiProvisioner(members)


def test_members_satisfy_the_protocol_and_so_does_the_composite(
    members: dict[str, FakeMember], multi: MultiProvisioner
) -> None:
    assert all(isinstance(m, Provisioner) for m in members.values())
    assert isinstance(multi, Provisioner)
    assert multi.name == "gcp+azure"


def test_launch_goes_to_the_offers_provider_and_progress_to_the_owner(
    members: dict[str, FakeMember], multi: MultiProvisioner
) -> None:
    a = multi.launch(request(offer("azure")))
    g = multi.launch(request(offer("gcp"), "l2"))
    assert (a.instance_id, g.instance_id) == ("azure-1", "gcp-1")
    assert list(members["azure"].live) == ["azure-1"] and list(members["gcp"].live) == ["gcp-1"]
    assert multi.progress("azure-1")[0]["from"] == "azure"
    assert multi.progress("gcp-1")[0]["from"] == "gcp"
    with pytest.raises(ProviderError, match="owns nobody-1"):
        multi.progress("nobody-1")


def test_launch_on_a_provider_the_job_does_not_name_is_refused(
    members: dict[str, FakeMember], multi: MultiProvisioner
) -> None:
    with pytest.raises(ProviderError, match=r"no provider 'aws' in this job; it names gcp, azure"):
        multi.launch(request(offer("aws")))
    assert all(m.live == {} for m in members.values())


def test_describe_merges_every_member_and_teaches_ownership(
    members: dict[str, FakeMember], multi: MultiProvisioner
) -> None:
    # instances launched by an earlier orchestrator (reconcile): known only through describe
    members["gcp"].launch(request(offer("gcp")))
    members["azure"].launch(request(offer("azure")))
    members["azure"].launch(LaunchRequest(offer("azure"), (), {}, our_tags("j2", "t", "x"), "x"))
    found = multi.describe({TAG_JOB: "j1"})
    assert sorted(i.instance_id for i in found) == ["azure-1", "gcp-1"]
    assert sorted(i.offer.provider for i in found) == ["azure", "gcp"]
    multi.terminate(["gcp-1", "azure-1"])
    assert members["gcp"].terminated == [["gcp-1"]]
    assert members["azure"].terminated == [["azure-1"]]


def test_an_id_no_member_owns_is_refused_and_nothing_is_terminated(
    members: dict[str, FakeMember], multi: MultiProvisioner
) -> None:
    multi.launch(request(offer("gcp")))
    multi.launch(request(offer("azure"), "l2"))
    # azure-9 exists at the member but was never launched or listed through the composite
    members["azure"].live["azure-9"] = Instance("azure-9", offer("azure"), InstanceState.RUNNING)
    with pytest.raises(ProviderError) as info:
        multi.terminate(["gcp-1", "azure-9", "azure-1", "stranger"])
    msg = str(info.value)
    assert "azure-9, stranger" in msg and "nothing was terminated" in msg
    assert "gcp-1" not in msg and "\n" not in msg
    assert members["gcp"].terminated == [] and members["azure"].terminated == []
    assert members["gcp"].live["gcp-1"].state is InstanceState.RUNNING


def test_an_id_claimed_by_two_members_is_never_terminated(
    members: dict[str, FakeMember], multi: MultiProvisioner
) -> None:
    members["gcp"].live["vm-1"] = Instance("vm-1", offer("gcp"), InstanceState.RUNNING)
    members["azure"].live["vm-1"] = Instance("vm-1", offer("azure"), InstanceState.RUNNING)
    assert len(multi.describe()) == 2
    with pytest.raises(ProviderError, match="refusing to terminate vm-1"):
        multi.terminate(["vm-1"])
    assert members["gcp"].terminated == members["azure"].terminated == []


def test_a_failing_member_is_reported_after_the_others_were_read(
    members: dict[str, FakeMember], multi: MultiProvisioner
) -> None:
    members["gcp"].launch(request(offer("gcp")))
    members["azure"].fail = True
    with pytest.raises(
        ProviderError, match=r"describe failed on 1 provider\(s\): azure: azure API"
    ):
        multi.describe({TAG_JOB: "j1"})
    assert multi.owner_of("gcp-1") == "gcp"  # what gcp listed was still learned


def test_notices_merge_and_survive_a_failing_member(
    members: dict[str, FakeMember], multi: MultiProvisioner
) -> None:
    g = Notice("gcp-1", NoticeKind.INTERRUPTION, 10.0, 40.0)
    a = Notice("azure-1", NoticeKind.INTERRUPTION, 11.0, 41.0)
    members["gcp"].pending = [g]
    members["azure"].pending = [a]
    assert multi.notices() == [g, a]
    assert multi.notices() == []
    members["gcp"].pending = [g]
    members["azure"].fail = True
    with pytest.raises(ProviderError, match="notices failed on 1 provider"):
        multi.notices()
    members["azure"].fail = False
    assert multi.notices() == [g]  # held back, not lost


def test_terminate_on_each_member_even_when_one_fails(
    members: dict[str, FakeMember], multi: MultiProvisioner
) -> None:
    multi.launch(request(offer("gcp")))
    multi.launch(request(offer("azure"), "l2"))
    members["azure"].fail = True
    with pytest.raises(ProviderError, match="terminate failed on 1 provider"):
        multi.terminate(["azure-1", "gcp-1"])
    assert members["gcp"].terminated == [["gcp-1"]]


class FakeCatalog:
    def __init__(self, name: str, region: str, prices: list[float]) -> None:
        self.name, self.region, self.prices = name, region, prices

    def regions(self) -> list[str]:
        return [self.region]

    def instance_types(self, region: str | None = None) -> list[InstanceType]:
        return []

    def offers(
        self,
        region: str | None = None,
        instance_types: Sequence[str] | None = None,
        market: Market | None = None,
    ) -> list[Offer]:
        return [offer(self.name, p, f"z{i}") for i, p in enumerate(self.prices)]

    def price_history(
        self, region: str, instance_type: str, start: float, end: float
    ) -> list[PricePoint]:
        return []


def test_the_catalog_merges_offers_by_price_and_routes_by_region() -> None:
    cat = MultiCatalog(
        {
            "gcp": FakeCatalog("gcp", "us-central1", [0.5, 0.2]),
            "azure": FakeCatalog("azure", "eastus", [0.3]),
        }
    )
    assert [(o.provider, o.price_per_hour) for o in cat.offers()] == [
        ("gcp", 0.2),
        ("azure", 0.3),
        ("gcp", 0.5),
    ]
    assert [o.provider for o in cat.offers("eastus")] == ["azure"]
    assert cat.regions() == ["us-central1", "eastus"]
    with pytest.raises(NotFoundError, match="westeurope"):
        cat.offers("westeurope")


# ---- the backend: one rule per provider -------------------------------------------------------
def cloud_backend(name: str, offers: list[Offer]) -> Backend:
    return Backend(
        provider=name,
        catalog=FakeCatalog(name, "r", []),
        provisioner=FakeMember(name),
        rules={name: rule_for(name)},
        now=lambda: 0.0,
        list_offers=lambda t: offers,
        segments=lambda o, t0, t1: [(t1 - t0, o.price_per_hour)],
        close=lambda: None,
    )


@pytest.fixture
def backend() -> Backend:
    parts = [
        cloud_backend(n, [offer(n, p)]) for n, p in (("aws", 1.0), ("gcp", 0.8), ("azure", 0.6))
    ]
    return _several(parts)


def test_the_backend_unites_offers_and_bills_each_life_by_its_own_provider(
    backend: Backend,
) -> None:
    assert backend.provider == "aws+gcp+azure"
    assert isinstance(backend.provisioner, MultiProvisioner)
    assert [o.provider for o in backend.list_offers(0.0)] == ["aws", "gcp", "azure"]
    assert {n: backend.rule_of(offer(n)).provider for n in ("aws", "gcp", "azure")} == {
        "aws": "aws",
        "gcp": "gcp",
        "azure": "azure",
    }
    with pytest.raises(ProviderError, match="no billing rule for provider 'local'"):
        backend.rule_of(offer("local"))

    # a 30-minute life revoked by the provider: AWS refunds its first hour, GCP only a first
    # minute, Azure nothing
    def bill(name: str, secs: float) -> float:
        o = offer(name, 1.2)
        life = Life("l", "i", o, 0.0, 0, 0, max_step=10)
        cost, _, _ = life_cost(life, backend.segments(o, 0.0, secs), backend.rule_of(o), True, 10)
        return cost

    assert bill("aws", 1800) == 0.0
    assert bill("gcp", 1800) == pytest.approx(0.6)
    assert bill("gcp", 50) == 0.0
    assert bill("azure", 1800) == pytest.approx(0.6)
    # Azure's 5-minute minimum (s22, review-au F5; this pinned 50 s before): 300 s at $1.2/h
    assert bill("azure", 50) == pytest.approx(300 * 1.2 / 3600)


def test_release_on_notice_follows_the_providers_own_rule(backend: Backend) -> None:
    """A noticed instance whose trial has left, 10 minutes into its life, 20 s before its
    deadline: on AWS waiting earns the free first hour (keep it); on Azure and on GCP past its
    first minute waiting only costs more (release it now)."""

    def cheaper(name: str) -> bool:
        o = offer(name)
        rule = backend.rule_of(o)
        return release_is_cheaper(
            rule, backend.segments(o, 0.0, 600.0), backend.segments(o, 0.0, 620.0)
        )

    assert (cheaper("aws"), cheaper("gcp"), cheaper("azure")) == (False, True, True)


def test_the_policy_view_carries_each_offers_rule(backend: Backend) -> None:
    t = TrialRun("t1", 0, {}, 10, 2)
    view = build_view(
        0.0,
        backend.list_offers(0.0),
        {},
        [t],
        direction="maximize",
        parallel=1,
        trials_total=1,
        spent_usd=0.0,
        max_cost_usd=None,
        started_at=0.0,
        deadline=None,
        rules=backend.rules,
    )
    by = {o.offer.provider: o for o in view.offers}
    assert {n: view.lead_of(o) for n, o in by.items()} == {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
    assert {n: view.refund_of(o) for n, o in by.items()} == {
        "aws": 3600.0,
        "gcp": 60.0,
        "azure": 0.0,
    }
    # the view-wide values are the most conservative of the providers'
    assert (view.notice_lead_s, view.free_if_revoked_within_s) == (30.0, 0.0)
    assert view.lead_of(None) == 30.0 and view.refund_of(None) == 0.0
