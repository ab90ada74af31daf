"""The AWS catalog against moto, with real spot prices and a real-shaped Pricing API injected."""

from __future__ import annotations

import time
from typing import Any

import pytest

from spotwise.errors import NotFoundError, ProviderError
from spotwise.providers.aws_catalog import AwsCatalog, zone_region
from spotwise.providers.aws_offline import (
    API_SOURCE,
    OFFLINE_SOURCE,
    offline_hardware,
    offline_prices,
    parse_price_list,
)
from spotwise.providers.base import Market
from spotwise.providers.registry import ProviderConfig

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _catalog(**options: str) -> AwsCatalog:
    return AwsCatalog(ProviderConfig(name="aws", options=options))


def test_offers_join_real_spot_prices_with_on_demand_from_the_pricing_api(
    spot_prices: Any, pricing_api: Any
) -> None:
    cat = _catalog()
    offers = cat.offers("us-east-1")
    assert cat.on_demand_source("us-east-1") == API_SOURCE
    spot = {(o.zone, o.instance_type): o for o in offers if o.market is Market.SPOT}
    # real rows of the 2022-05-31 slice (use1-az4 = us-east-1d, use1-az1 = us-east-1b in moto)
    assert spot[("us-east-1d", "c5.xlarge")].price_per_hour == pytest.approx(0.0824)
    assert spot[("us-east-1b", "p3.2xlarge")].price_per_hour == pytest.approx(3.06)
    assert spot[("us-east-1d", "c5.xlarge")].on_demand_price_per_hour == pytest.approx(0.17)
    g5 = spot[("us-east-1d", "g5.xlarge")]
    assert g5.on_demand_price_per_hour == pytest.approx(1.006)  # only the API knows g5
    assert (g5.gpus, g5.gpu_name, g5.vcpus) == (1, "A10G", 4)  # from describe_instance_types
    p3 = spot[("us-east-1b", "p3.2xlarge")]
    assert (p3.gpus, p3.gpu_name, p3.vcpus) == (1, "V100", 8)  # moto lacks p3: offline hardware
    assert all(o.region == "us-east-1" for o in offers)
    on_demand = [o for o in offers if o.market is Market.ON_DEMAND]
    assert on_demand and all(o.price_per_hour == o.on_demand_price_per_hour for o in on_demand)
    assert {o.instance_type for o in on_demand} >= {"c5.xlarge", "g5.xlarge", "m5.4xlarge"}
    # zones of on-demand offers come from describe_instance_type_offerings ∪ the spot zones
    assert len({o.zone for o in on_demand if o.instance_type == "m5.4xlarge"}) >= 5
    # the fake answered several pages, and only Linux/UNIX was asked for
    assert len(pricing_api.requests) > 1
    assert all(c["products"] == ["Linux/UNIX"] for c in spot_prices.calls)


def test_spot_prices_are_the_price_in_effect_now_one_per_zone_and_type(spot_prices: Any) -> None:
    prices = _catalog(pricing="offline").spot_prices("us-east-1", ["m5.4xlarge"])
    by_zone = {p.zone: p.price_per_hour for p in prices}
    # use1-az6 (us-east-1a) changed 0.3705 → 0.3702 inside the window; the later one holds
    assert by_zone["us-east-1a"] == pytest.approx(0.3702)
    assert len(prices) == len(by_zone)
    assert [p.price_per_hour for p in prices] == sorted(p.price_per_hour for p in prices)


def test_windows_rows_and_other_regions_are_left_out(spot_prices: Any) -> None:
    cat = _catalog(pricing="offline")
    east1 = cat.offers("us-east-1", market=Market.SPOT)
    c5 = [o for o in east1 if o.instance_type == "c5.xlarge"]
    assert sorted(o.price_per_hour for o in c5) == [0.0824, 0.085]  # Linux only, no Windows
    east2 = cat.offers("us-east-2", market=Market.SPOT)
    assert {o.instance_type for o in east2} == {"c5.xlarge", "m4.large"}
    assert all(o.zone.startswith("us-east-2") for o in east2)


def test_spot_price_history_is_paginated(spot_prices: Any) -> None:
    assert spot_prices.page_size == 10  # the fake's page when no MaxResults is sent
    n0 = len(spot_prices.calls)
    prices = _catalog(pricing="offline").spot_prices("us-east-1")
    assert len(prices) > 30
    assert len(spot_prices.calls) - n0 >= 4  # one call per page, all read


def test_price_history_is_ordered_and_includes_the_price_in_effect_at_the_start(
    spot_prices: Any,
) -> None:
    cat = _catalog(pricing="offline")
    end = time.time()
    hist = cat.price_history("us-east-1", "m5.4xlarge", end - 3600, end)
    times = [p.timestamp for p in hist]
    assert times == sorted(times)
    assert {p.zone for p in hist} == {
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
        "us-east-1f",
    }
    assert min(times) < end - 3600  # the in-effect price at the window start
    full = cat.price_history("us-east-1", "m5.4xlarge", end - 7 * 3600, end)
    assert len(full) == 9  # every record of the slice
    assert all(p.instance_type == "m5.4xlarge" and p.market is Market.SPOT for p in full)


def test_pricing_api_unreachable_falls_back_to_the_offline_2017_catalog(spot_prices: Any) -> None:
    cat = _catalog()  # moto has no Pricing API: 404 → offline
    offers = cat.offers("us-east-1", market=Market.SPOT)
    assert cat.on_demand_source("us-east-1") == OFFLINE_SOURCE
    by_type = {o.instance_type: o.on_demand_price_per_hour for o in offers}
    assert by_type["p3.2xlarge"] == pytest.approx(3.06)
    assert by_type["c4.large"] == pytest.approx(0.10)
    assert by_type["g5.xlarge"] == 0.0  # unknown in 2017: not invented


def test_pricing_api_required_but_unreachable_is_a_provider_error(spot_prices: Any) -> None:
    with pytest.raises(ProviderError, match="Pricing API"):
        _catalog(pricing="api").on_demand_prices("us-east-1")
    with pytest.raises(ProviderError, match="pricing must be"):
        _catalog(pricing="sometimes")


def test_offline_pricing_never_calls_the_api(spot_prices: Any, pricing_api: Any) -> None:
    cat = _catalog(pricing="offline")
    assert cat.on_demand_prices("us-east-1")["p3.2xlarge"] == pytest.approx(3.06)
    assert pricing_api.requests == []


def test_unknown_names_get_did_you_mean(spot_prices: Any) -> None:
    cat = _catalog(pricing="offline")
    with pytest.raises(NotFoundError, match="did you mean 'us-east-1'"):
        cat.offers("us-eats-1")
    with pytest.raises(NotFoundError, match=r"did you mean 'm5\.xlarge'"):
        cat.offers("us-east-1", instance_types=["m5.xlarg"])
    assert cat.check_instance_type("p3.2xlarge", "us-east-1") == "p3.2xlarge"  # offline-known


def test_did_you_mean_lists_the_regions_names_not_every_types_hardware(
    aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown type's suggestions need the region's names only: one
    ``describe_instance_type_offerings`` by region (names, up to 1,000 a page), not
    ``describe_instance_types`` of every type (~9 pages of hardware records on EC2, 6 s a call
    on moto), which `spotwise tune` of a mistyped spec read before saying so. Once per process."""
    from spotwise.providers import aws, aws_listings

    monkeypatch.setattr(aws_listings, "_FULL_LISTINGS", {})
    monkeypatch.setattr(aws_listings, "_OFFERED_NAMES", {}, raising=False)
    calls: list[tuple[str, dict[str, Any]]] = []
    real = aws.client

    def recording(service: str, region: str, **kwargs: Any) -> Any:
        client = real(service, region, **kwargs)
        client.meta.events.register(
            "before-parameter-build.ec2.*",
            lambda model, params, **_: calls.append((model.name, dict(params))),
        )
        return client

    monkeypatch.setattr(aws, "client", recording)
    for _ in range(2):  # a second catalog (a second spec check) asks for no listing again
        with pytest.raises(NotFoundError, match=r"did you mean 'm5\.xlarge'"):
            _catalog(pricing="offline").check_instance_type("m5.xlarg", "us-east-1")
    listings = [name for name, params in calls if "InstanceTypes" not in params]
    assert listings == ["DescribeInstanceTypeOfferings"]
    assert [p["InstanceTypes"] for n, p in calls if n == "DescribeInstanceTypes"] == [
        ["m5.xlarg"],
        ["m5.xlarg"],
    ]


def test_instance_types_from_describe_instance_types(spot_prices: Any, pricing_api: Any) -> None:
    types = {t.name: t for t in _catalog().instance_types("us-east-1")}
    assert len(types) > 500
    g5 = types["g5.xlarge"]
    assert (g5.vcpus, g5.memory_gb, g5.gpus, g5.gpu_name, g5.architecture) == (
        4,
        16.0,
        1,
        "A10G",
        "x86_64",
    )
    assert g5.on_demand_price_per_hour == pytest.approx(1.006)
    assert types["m6g.large"].architecture == "arm64"
    assert types["t3.nano"].on_demand_price_per_hour is None  # not in the price fixture


def test_instance_types_offline_when_ec2_is_unreachable(
    aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    cat = AwsCatalog(
        ProviderConfig(name="aws", regions=("eu-west-1",), options={"pricing": "offline"})
    )
    from spotwise.providers import aws

    monkeypatch.setattr(aws, "_config", lambda *a, **k: _fast_config())
    types = {t.name: t for t in cat.instance_types("eu-west-1")}
    assert types["p3.2xlarge"].on_demand_price_per_hour == pytest.approx(3.305)
    assert types["p3.2xlarge"].gpu_name == "V100"
    with pytest.raises(ProviderError, match="spot prices"):
        cat.offers("eu-west-1")


def test_a_current_type_is_not_called_unknown_when_ec2_is_unreachable(
    aws_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without EC2 only the 2017 offline list was left: m5.xlarge (and every later type) was
    "unknown (did you mean 'm4.xlarge'?)", a spec error steering users to an older type."""
    from spotwise.errors import ProviderUnavailable
    from spotwise.providers import aws

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr(aws, "_config", lambda *a, **k: _fast_config())
    cat = AwsCatalog(
        ProviderConfig(name="aws", regions=("eu-west-1",), options={"pricing": "offline"})
    )
    assert cat.check_instance_type("p3.2xlarge", "eu-west-1") == "p3.2xlarge"  # offline-known
    with pytest.raises(ProviderUnavailable) as e:
        cat.check_instance_type("m5.xlarge", "eu-west-1")
    assert e.value.message == (
        "aws: cannot check instance type 'm5.xlarge' in eu-west-1: EC2 cannot be reached and "
        "the offline catalog (2017) does not list it"
    )


def _fast_config() -> Any:
    from botocore.config import Config

    return Config(connect_timeout=0.5, read_timeout=0.5, retries={"total_max_attempts": 1})


def test_parse_price_list_reads_on_demand_hours_only() -> None:
    doc = {
        "product": {"attributes": {"instanceType": "x.large"}},
        "terms": {
            "OnDemand": {
                "A": {
                    "priceDimensions": {
                        "1": {"unit": "Hrs", "pricePerUnit": {"USD": "0.5000000000"}},
                        "2": {"unit": "Quantity", "pricePerUnit": {"USD": "0.0100000000"}},
                    }
                }
            },
            "Reserved": {
                "B": {
                    "priceDimensions": {
                        "3": {"unit": "Hrs", "pricePerUnit": {"USD": "0.0010000000"}}
                    }
                }
            },
        },
    }
    import json

    assert parse_price_list([json.dumps(doc)]) == {"x.large": 0.5}
    assert parse_price_list([{"product": {}}]) == {}


def test_offline_catalog_is_the_shipped_linux_subset() -> None:
    prices = offline_prices("us-east-1")
    assert prices["p3.2xlarge"] == pytest.approx(3.06)
    assert prices["m3.medium"] == pytest.approx(0.067)
    hw = offline_hardware()
    assert (hw["p2.xlarge"].gpus, hw["p2.xlarge"].gpu_name) == (1, "K80")
    assert hw["c4.large"].gpus == 0 and hw["c4.large"].gpu_name == ""


@pytest.mark.parametrize(
    ("zone", "region"),
    [
        ("us-east-1a", "us-east-1"),
        ("eu-central-1c", "eu-central-1"),
        ("us-east-1-bos-1a", "us-east-1"),
        ("ap-southeast-2b", "ap-southeast-2"),
    ],
)
def test_zone_region(zone: str, region: str) -> None:
    assert zone_region(zone) == region
