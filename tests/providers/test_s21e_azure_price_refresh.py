"""Azure's live prices are read again, and a failed read pins nothing (review-an F2).

``AzureCatalog.prices`` kept a region's live Retail Prices for the catalog's life, and after
one failed call (a passing 503) the shipped catalog for the whole job. Now: live prices are
read again once :data:`LIVE_TTL_S` old (the planner refreshes its offers every 5 minutes); a
failure serves the last live prices while recent, else the shipped catalog, for that call
only, and the API is asked again :data:`RETRY_AFTER_S` later (not at every call)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
import responses
from cloudfakes import AzureCredential, azure_config, fake_arm, serve

from spotwise.price_rows import price_source
from spotwise.providers import azure
from spotwise.providers.azure_catalog import AzureCatalog
from spotwise.providers.base import Market

URL = "https://retail.s21e.example/api/retail/prices"  # page 1; page 2 is the fake's own route
T4 = "Standard_NC4as_T4_v3"


class Retail:
    """The first page of the Retail Prices API: fails while ``failing``, else the fake's page
    with the T4 Spot meter at ``spot``; ``calls`` counts the requests."""

    def __init__(self, fake: Any) -> None:
        self.fake, self.calls, self.failing, self.spot = fake, 0, False, 0.062699
        fake.rs.add_callback(responses.GET, re.compile(re.escape(URL) + r".*"), self.answer)

    def answer(self, request: Any) -> tuple[int, dict[str, str], str]:
        self.calls += 1
        if self.failing:
            return 503, {}, "busy"
        status, headers, body = self.fake._retail(request)
        page = json.loads(body)
        for item in page["Items"]:
            if item.get("armSkuName") == T4 and item.get("retailPrice") == 0.062699:
                item["retailPrice"] = item["unitPrice"] = self.spot
        return status, headers, json.dumps(page)


@pytest.fixture
def fake() -> Iterator[Any]:
    yield from serve(fake_arm.FakeARM)


@pytest.fixture
def now() -> list[float]:
    return [1000.0]


@pytest.fixture
def cat(fake: Any, now: list[float]) -> AzureCatalog:
    c = azure.open_catalog(
        azure_config(fake, retail_prices_url=URL), credential=AzureCredential("t")
    )
    c.clock = lambda: now[0]
    return c


def _t4_spot(cat: AzureCatalog) -> float:
    offers = cat.offers("eastus", [T4], Market.SPOT)
    return {o.price_per_hour for o in offers}.pop()


def test_one_failed_read_uses_the_shipped_catalog_for_a_while_then_asks_again(
    fake: Any, cat: AzureCatalog, now: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    retail = Retail(fake)
    retail.failing = True
    with caplog.at_level(logging.WARNING, logger="spotwise.providers.azure_catalog"):
        assert cat.prices("eastus") is cat.fallback
    assert price_source(cat, "eastus", None) == "offline" and retail.calls == 1
    retail.failing, retail.spot = False, 0.0655  # (the shipped catalog has 0.062699 too)
    now[0] += 59  # within the pause: no call, the shipped catalog still
    assert cat.prices("eastus") is cat.fallback and retail.calls == 1
    now[0] += 1  # the pause is over: the API answers, the job trades on live prices again
    assert _t4_spot(cat) == 0.0655 and retail.calls == 2
    assert cat.prices("eastus") is not cat.fallback
    assert price_source(cat, "eastus", None) == "live" and retail.calls == 2
    assert "; using the shipped Azure price catalog" in caplog.text


def test_live_prices_are_read_again_once_five_minutes_old(
    fake: Any, cat: AzureCatalog, now: list[float]
) -> None:
    retail = Retail(fake)
    assert _t4_spot(cat) == 0.062699 and retail.calls == 1
    retail.spot = 0.0701
    now[0] += 299  # the backend's listings within 5 minutes share one read
    assert _t4_spot(cat) == 0.062699 and retail.calls == 1
    now[0] += 1
    assert _t4_spot(cat) == 0.0701 and retail.calls == 2  # Azure's new Spot price is seen


def test_a_failure_after_live_prices_keeps_them_while_recent(
    fake: Any, cat: AzureCatalog, now: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    retail = Retail(fake)
    live = cat.prices("eastus")
    retail.failing = True
    now[0] += 300
    with caplog.at_level(logging.WARNING, logger="spotwise.providers.azure_catalog"):
        assert cat.prices("eastus") is live and retail.calls == 2
    assert "; using the live prices read 300 s ago" in caplog.text
    now[0] += 3300  # an hour after the live read: the shipped catalog, not older live prices
    assert cat.prices("eastus") is cat.fallback and retail.calls == 3
