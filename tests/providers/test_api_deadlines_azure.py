"""``api_deadline_s`` bounds a whole Azure call (see test_api_deadlines_whole.py for GCP's and for
the compute client's token requests).

Before:
- each page of an ARM listing (``virtual_machines.list``, ``resource_skus.list``) was a call of
  its own to azure-core, with a retry timeout of its own: a listing of slow pages took pages ×
  the per-page bounds; requests' read timeout bounds each socket read, so ARM trickling its
  answer held the caller for as long as it trickled; the Retail Prices API's pages had 30 s
  each, whatever ``api_deadline_s``;
- the blob store's token requests (``DefaultAzureCredential``, or one passed in) had no bound,
  and the storage SDK retried a call that got no token 3 times, backing off 15 s, 18 s and 24 s:
  a hung token endpoint held a checkpoint or channel call for minutes, and a missing credential
  was reported after a minute and 4 asks; ``spotwise check`` waited on a hung token endpoint as
  long as it hung, and then called the credential missing.

The real clients run over the ``responses`` fakes, with ``api_deadline_s`` 0.5 s. A slow page
lasts its read timeout when that is shorter (then raises requests' ReadTimeout, as requests
would); a trickled one lasts what it lasts (each read within its timeout)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import responses
from cloudfakes import AzureCredential, azure_config, fake_arm, serve
from test_api_deadlines import DEADLINE, _gives_up
from test_api_deadlines_whole import NO_ANSWER, SLACK, HungCredential, _read_timeout, _slow

from spotwise.errors import ProviderUnavailable, TransientError
from spotwise.providers import azure
from spotwise.providers.azure_blobs import AzureBlobs
from spotwise.providers.base import TAG_JOB

PASSING = "a passing failure of the Azure API"
BLOB = "az://acct1/cont1/p"


@dataclass
class SlowARM(fake_arm.FakeARM):
    """FakeARM whose VM listing comes in ``pages`` pages (the VMs on the last), each taking
    ``page_s``; whose SKU and Retail Prices pages and VM reads are trickled for ``trickle_s``."""

    pages: int = 1
    page_s: float = 0.0
    trickle_s: float = 0.0
    sent: list[int] = field(default_factory=list)  # the page each listing request asked for
    timeouts: list[float] = field(default_factory=list)  # the read timeout of each one

    def _list(self, request: Any) -> tuple[int, dict[str, str], str]:
        page = int(request.url.rsplit("skiptoken=p", 1)[1]) if "skiptoken=p" in request.url else 1
        self.sent.append(page)
        self.timeouts.append(_read_timeout(request))
        _slow(request, self.page_s)
        if page == self.pages:
            return super()._list(request)
        rg = f"{fake_arm.ARM}/subscriptions/{self.subscription}/resourceGroups/{self.group}"
        link = f"{rg}/providers/Microsoft.Compute/virtualMachines?api-version=2024-07-01"
        body = {"value": [], "nextLink": f"{link}&$skiptoken=p{page + 1}"}
        return 200, fake_arm.JSON, json.dumps(body)

    def _skus(self, request: Any) -> tuple[int, dict[str, str], str]:
        time.sleep(self.trickle_s)
        return super()._skus(request)

    def _get(self, request: Any) -> tuple[int, dict[str, str], str]:
        time.sleep(self.trickle_s)
        return super()._get(request)

    def _retail(self, request: Any) -> tuple[int, dict[str, str], str]:
        time.sleep(self.trickle_s)
        return super()._retail(request)


@pytest.fixture
def arm() -> Iterator[SlowARM]:
    yield from serve(SlowARM)


def _provisioner(arm: SlowARM) -> Any:
    config = azure_config(arm, api_deadline_s=str(DEADLINE))
    return azure.open_provisioner(config, credential=AzureCredential("t0ken"))


# ---- ARM ---------------------------------------------------------------------------------------
def test_the_pages_of_an_azure_vm_listing_share_one_deadline(arm: SlowARM) -> None:
    """6 pages of 0.2 s each, each within its own bounds (0.25 s a read, 0.5 s a page): before,
    the listing took 1.2 s; now it is given up within its 0.5 s, and the page under way when
    they run out is read only for what is left of them."""
    prov = _provisioner(arm)
    arm.pages, arm.page_s = 6, 0.2
    err, took = _gives_up(lambda: prov.describe({TAG_JOB: "job-a"}))
    assert type(err) is TransientError
    assert err.message == f"azure: listing VMs in spotwise-rg: {PASSING} ({NO_ANSWER})"
    assert took < DEADLINE + SLACK / 2
    assert 2 <= len(arm.sent) < 6 and arm.sent == list(range(1, len(arm.sent) + 1))
    assert arm.timeouts[0] == DEADLINE / 2
    assert arm.timeouts[-1] < DEADLINE - 0.2 * (len(arm.sent) - 1)  # cut to what was left
    arm.page_s = 0.0  # quick pages: every one is read
    arm.sent.clear()
    assert prov.describe({TAG_JOB: "job-a"}) == []
    assert arm.sent == [1, 2, 3, 4, 5, 6]


def test_an_azure_sku_listing_of_trickled_pages_gives_up_at_the_deadline(arm: SlowARM) -> None:
    """The fake's two SKU pages, each trickled for 0.35 s (every read within its timeout):
    before, both came (0.7 s)."""
    catalog = azure.open_catalog(
        azure_config(arm, api_deadline_s=str(DEADLINE)), credential=AzureCredential("t0ken")
    )
    arm.trickle_s = 0.35
    err, took = _gives_up(lambda: catalog.skus("eastus"))
    assert type(err) is TransientError
    assert err.message == f"azure: listing VM sizes in eastus failed: {PASSING} ({NO_ANSWER})"
    assert took < DEADLINE + SLACK / 2


def test_an_arm_answer_trickled_past_the_deadline_is_given_up_at_the_deadline(
    arm: SlowARM,
) -> None:
    """`spotwise cancel` reads the VM first: ARM trickles that answer for 1.5 s, every read
    within its timeout; before, the caller waited the 1.5 s."""
    prov = _provisioner(arm)
    arm.trickle_s = 1.5
    err, took = _gives_up(lambda: prov.terminate(["sw-x"]))
    assert type(err) is TransientError
    assert err.message == f"azure: reading VM sw-x: {PASSING} ({NO_ANSWER})"
    assert took < DEADLINE + SLACK / 2


def test_retail_price_pages_share_one_deadline_then_the_shipped_prices_serve(
    arm: SlowARM, caplog: pytest.LogCaptureFixture
) -> None:
    """Two Retail Prices pages trickled for 0.4 s each: before, 30 s a request, and both came
    (0.8 s); now the shipped catalog's prices serve once the 0.5 s are gone."""
    catalog = azure.open_catalog(
        azure_config(arm, api_deadline_s=str(DEADLINE)), credential=AzureCredential("t0ken")
    )
    arm.trickle_s = 0.4
    caplog.set_level(logging.WARNING, logger="spotwise.providers.azure_catalog")
    start = time.monotonic()
    table = catalog.prices("eastus")
    assert time.monotonic() - start < DEADLINE + SLACK / 2
    assert table is catalog.fallback
    assert (
        f"azure: Retail Prices API request failed: {NO_ANSWER}; using the shipped Azure price "
        "catalog" in caplog.messages
    )


# ---- the blob store's and check's token requests ----------------------------------------------
class Asked(HungCredential):
    """HungCredential that counts every token request (``calls`` counts those answered)."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.asked = 0

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        self.asked += 1
        return super().get_token(*scopes, **kwargs)


class Missing:
    """No credential anywhere: the chain refuses at once (as DefaultAzureCredential does)."""

    def __init__(self) -> None:
        self.asked = 0

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.exceptions import ClientAuthenticationError

        self.asked += 1
        raise ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token")


@pytest.fixture
def blob_service(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The public Blob endpoint, with nothing answering: no request may leave the process."""
    monkeypatch.delenv("SPOTWISE_AZURE_BLOB_ENDPOINT", raising=False)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        yield rs


QUICK_RETRIES = {"initial_backoff": 0, "increment_base": 0, "random_jitter_range": 0}


@pytest.mark.parametrize("passed", [True, False], ids=["passed-in", "default-chain"])
def test_a_blob_token_request_that_hangs_is_given_up_and_named(
    blob_service: Any, monkeypatch: pytest.MonkeyPatch, passed: bool
) -> None:
    """Before: no bound (here 3 s, the fake's longest hang), asked 4 times. The deadline is
    the one passed in, else the azure provider's default."""
    cred = Asked("blob-t0ken")
    if passed:
        blobs = AzureBlobs.from_uri(
            BLOB, credential=cred, client_options=dict(QUICK_RETRIES), api_deadline_s=DEADLINE
        )
    else:  # the DefaultAzureCredential the blob store makes itself
        monkeypatch.setattr(azure, "default_credential", lambda: cred)
        monkeypatch.setattr(azure, "DEFAULT_API_DEADLINE_S", DEADLINE)
        blobs = AzureBlobs.from_uri(BLOB, client_options=dict(QUICK_RETRIES))
    assert blobs.client is not None  # built (and azure-storage-blob imported) apart
    try:
        err, took = _gives_up(lambda: blobs.get("x"))
        assert type(err) is TransientError
        assert err.message == (
            f"azure: reading {BLOB}/x failed: no token from the Azure credential within "
            f"{DEADLINE / 2:g} s (a passing failure of its token endpoint)"
        )
        assert DEADLINE / 2 - 0.05 < took < DEADLINE / 2 + SLACK
        assert cred.asked == 1  # not asked again: the storage SDK does not retry it
        assert len(blob_service.calls) == 0  # nothing sent without a token
    finally:
        cred.answer.set()


def test_a_missing_blob_credential_is_still_reported_as_one_at_once(blob_service: Any) -> None:
    """Before: the storage SDK asked the credential 4 times (and backed off 15 s, 18 s, 24 s
    between, but for the quick backoff set here) before saying so."""
    cred = Missing()
    blobs = AzureBlobs.from_uri(BLOB, credential=cred, client_options=dict(QUICK_RETRIES))
    assert blobs.client is not None
    err, took = _gives_up(lambda: blobs.get("x"))
    assert type(err) is ProviderUnavailable
    assert err.message == (
        f"azure: reading {BLOB}/x failed: no Azure credential could get a token "
        "(ClientAuthenticationError)"
    )
    assert err.hint == "az login"
    assert cred.asked == 1 and took < DEADLINE / 2
    assert len(blob_service.calls) == 0


def test_check_gives_up_on_a_hung_token_endpoint_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: check waited as long as the token endpoint hung (here 3 s); a missing credential
    still says "no Azure credential resolved". Check has no provider options: it takes half of
    the default ``api_deadline_s``."""
    monkeypatch.setattr(azure, "DEFAULT_API_DEADLINE_S", DEADLINE)
    cred = HungCredential("check-t0ken")
    try:
        start = time.monotonic()
        res = azure.check(credential=cred)
        took = time.monotonic() - start
    finally:
        cred.answer.set()
    assert not res.usable
    assert res.reason.startswith(
        f"no token from the Azure credential within {DEADLINE / 2:g} s via "
    )
    assert "its token endpoint did not answer" in res.reason
    assert "no Azure credential resolved" not in res.reason
    assert DEADLINE / 2 - 0.05 < took < DEADLINE / 2 + SLACK
    missing = azure.check(credential=Missing())
    assert not missing.usable
    assert missing.reason.startswith("no Azure credential resolved (ClientAuthenticationError)")
