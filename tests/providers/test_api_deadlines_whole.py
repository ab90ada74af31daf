"""``api_deadline_s`` bounds a whole call, not each of its parts (see test_api_deadlines.py for
one request and its retries).

Before:
- GCP: api_core's pagers send each page of a listing as a call of its own, with the first
  one's ``retry`` and ``timeout``: a listing of slow pages took pages × the deadline, and a
  page that answered 503 was retried for a whole deadline of its own after the others;
- GCP: requests' ``timeout`` bounds each socket read, so a server trickling its answer held the
  caller for as long as it trickled;
- Azure: the credential's token request (azure-identity's own pipeline, or ``az``) ran with no
  bound at all: a hung token endpoint hung every ARM call, and so the orchestrator.

The real clients run over the ``responses`` fakes of test_api_deadlines.py, with
``api_deadline_s`` 0.5 s; a slow request lasts its read timeout when that is shorter (then
raises requests' ReadTimeout, as requests would), a trickled one lasts what it lasts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
import requests
from cloudfakes import AzureCredential, azure_config, fake_gce, gcp_config, gcp_credentials, serve
from test_api_deadlines import (
    DEADLINE,
    FOREVER,
    GCP_503,
    LISTING,
    UNAVAILABLE,
    OutageARM,
    OutageGCE,
    _gives_up,
)
from test_gcp_errors import LAUNCHES

from spotwise.errors import TransientError
from spotwise.providers import azure, gcp
from spotwise.providers.base import TAG_JOB

SLACK = 0.3  # scheduling slack on a busy machine (the old code took seconds more)
GCP_PASSING = "a passing failure of the Compute Engine API"
NO_ANSWER = f"no complete answer within api_deadline_s = {DEADLINE:g} s"


def _read_timeout(request: Any) -> float:
    timeout = request.req_kwargs.get("timeout")
    return float(timeout[1] if isinstance(timeout, tuple) else timeout)


def _slow(request: Any, seconds: float) -> None:
    """A server that takes ``seconds`` to answer: past the read timeout, requests gives up."""
    read = _read_timeout(request)
    time.sleep(min(seconds, read))
    if read < seconds:
        raise requests.ReadTimeout("HTTPSConnectionPool(host='x', port=443): Read timed out.")


# ---- GCP ----------------------------------------------------------------------------------------
@dataclass
class PagedGCE(OutageGCE):
    """OutageGCE whose instance listing comes in ``pages`` pages (the instances on the last),
    each taking ``page_s`` (``trickle_s``: as long whatever the timeout, as a server that
    trickles its answer does); ``fail_page``: the page that answers the queued ``list``
    failures (at once); the first machine-type page takes ``page_s``, the second trickles for
    ``trickle_s``."""

    pages: int = 1
    page_s: float = 0.0
    trickle_s: float = 0.0
    fail_page: int = 0
    sent: list[int] = field(default_factory=list)  # the page each listing request asked for
    timeouts: list[float] = field(default_factory=list)  # the read timeout of each page asked

    def _list_instances(self, request: Any) -> tuple[int, dict[str, str], str]:
        token = parse_qs(urlparse(request.url).query).get("pageToken", ["p1"])[0]
        page = int(token[1:])
        self.sent.append(page)
        self.timeouts.append(_read_timeout(request))
        time.sleep(self.trickle_s)
        _slow(request, self.page_s if page != self.fail_page else 0.0)
        if page == self.fail_page:
            failed = self._queued("list")
            if failed:
                return failed
        if page == self.pages:
            return fake_gce.FakeGCE._list_instances(self, request)
        return fake_gce._ok({"items": {}, "nextPageToken": f"p{page + 1}"})

    def _machine_types(self, request: Any) -> tuple[int, dict[str, str], str]:
        self.timeouts.append(_read_timeout(request))
        if "pageToken=page-2" in request.url:
            time.sleep(self.trickle_s)
        else:
            _slow(request, self.page_s)
        return super()._machine_types(request)


@pytest.fixture
def gce() -> Iterator[PagedGCE]:
    yield from serve(PagedGCE)


def _gcp_provisioner() -> Any:
    prov = gcp.open_provisioner(
        gcp_config(api_deadline_s=str(DEADLINE)), credentials=gcp_credentials("ya29.whole")
    )
    prov.poll_interval_s = 0.0
    prov.clients.get("InstancesClient")  # built (and timed) apart
    return prov


def test_the_pages_of_a_gcp_listing_share_one_deadline(gce: PagedGCE) -> None:
    """6 pages of 0.15 s each: before, the listing took 0.9 s (each page had 0.5 s of its own)."""
    prov = _gcp_provisioner()
    gce.pages, gce.page_s = 6, 0.15
    err, took = _gives_up(lambda: prov.describe({TAG_JOB: "Job-A"}))
    assert type(err) is TransientError
    assert err.message.startswith(f"gcp: listing instances failed: {GCP_PASSING} (")
    assert took < DEADLINE + SLACK
    assert 2 <= len(gce.sent) < 6 and gce.sent == list(range(1, len(gce.sent) + 1))
    assert gce.timeouts[0] == DEADLINE / 2
    assert gce.timeouts[-1] < DEADLINE - 0.15 * (len(gce.sent) - 1) + 0.01  # what was left


def test_a_gcp_machine_type_listing_of_slow_pages_gives_up_at_the_deadline(gce: PagedGCE) -> None:
    """The fixture's two pages: 0.2 s, then 0.5 s trickled: before, both came (0.7 s); now the
    listing is given up when its 0.5 s are gone."""
    catalog = gcp.open_catalog(
        gcp_config(api_deadline_s=str(DEADLINE)), credentials=gcp_credentials("ya29.x")
    )
    catalog.clients.get("MachineTypesClient")
    gce.page_s, gce.trickle_s = 0.2, 0.5
    err, took = _gives_up(catalog.instance_types)
    assert type(err) is TransientError
    assert err.message == f"gcp: listing machine types failed: {GCP_PASSING} ({NO_ANSWER})"
    assert took < DEADLINE + SLACK / 2
    assert gce.timeouts[0] == DEADLINE / 2 and len(gce.timeouts) <= 2  # no page asked again


def test_a_later_page_that_answers_503_is_retried_only_until_the_listing_deadline(
    gce: PagedGCE,
) -> None:
    """Pages 1 and 2 take 0.15 s each, page 3 answers 503 forever: before, page 3 was retried
    for 0.5 s of its own (0.8 s in all); the error names the 503 the listing retried."""
    prov = _gcp_provisioner()
    gce.pages, gce.fail_page = 3, 3
    gce.fail("list", 503, "backendError", UNAVAILABLE, FOREVER)
    gce.page_s = 0.15
    start = time.monotonic()
    with pytest.raises(TransientError) as e:
        prov.describe({TAG_JOB: "Job-A"})
    took = time.monotonic() - start
    assert e.value.message == f"gcp: listing instances failed: {GCP_503}"
    # retried until the listing's deadline, less at most one backoff (a quarter of it)
    assert DEADLINE * 0.7 < took < DEADLINE + SLACK / 2
    assert gce.sent[:3] == [1, 2, 3] and set(gce.sent) == {1, 2, 3}


def test_a_gcp_answer_trickled_past_the_deadline_is_given_up_at_the_deadline(
    gce: PagedGCE,
) -> None:
    """Every read within its timeout, the answer 2 s long: before, the caller waited 2 s."""
    prov = _gcp_provisioner()
    gce.trickle_s = 2.0
    err, took = _gives_up(lambda: prov.describe({TAG_JOB: "Job-A"}))
    assert type(err) is TransientError
    assert err.message == f"gcp: listing instances failed: {GCP_PASSING} ({NO_ANSWER})"
    assert took < DEADLINE + SLACK / 2


def test_a_gcp_listing_of_quick_pages_still_returns_every_page(gce: PagedGCE) -> None:
    prov = _gcp_provisioner()
    inst = prov.launch(LAUNCHES.request())
    gce.pages = 5
    assert [i.instance_id for i in prov.describe({TAG_JOB: "Job-A"})] == [inst.instance_id]
    assert gce.sent == [1, 2, 3, 4, 5]
    assert "ya29.whole" not in repr(prov.clients.get("InstancesClient"))


# ---- Azure --------------------------------------------------------------------------------------
class HungCredential(AzureCredential):
    """A credential whose token request gets no answer until ``answer`` is set (at most 3 s)."""

    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.answer = threading.Event()

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        self.answer.wait(3.0)
        return super().get_token(*scopes, **kwargs)


class HungInfoCredential(HungCredential):
    """The newer protocol: azure-core asks ``get_token_info`` when a credential has it."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        raise AssertionError("get_token_info is there: get_token is not asked")

    def get_token_info(self, *scopes: str, options: Any = None) -> Any:
        from azure.core.credentials import AccessTokenInfo

        self.answer.wait(3.0)
        self.calls += 1
        return AccessTokenInfo(self.token, 4_102_444_800)


@pytest.fixture
def arm() -> Iterator[OutageARM]:
    yield from serve(OutageARM)


TOKEN_TIMEOUT = (
    f"{LISTING}: no token from the Azure credential within {DEADLINE / 2:g} s "
    "(a passing failure of its token endpoint)"
)


@pytest.mark.parametrize("kind", [HungCredential, HungInfoCredential])
def test_an_azure_token_request_that_hangs_is_given_up_and_joined_by_the_next_call(
    arm: OutageARM, kind: type[HungCredential]
) -> None:
    """Before: the ARM call waited for the token as long as the credential took (here 3 s)."""
    cred = kind("t0ken-whole")
    prov = azure.open_provisioner(azure_config(arm, api_deadline_s=str(DEADLINE)), credential=cred)
    try:
        for _ in range(2):
            err, took = _gives_up(lambda: prov.describe({TAG_JOB: "job-a"}))
            assert type(err) is TransientError
            assert err.message == TOKEN_TIMEOUT
            assert DEADLINE / 2 - 0.05 < took < DEADLINE / 2 + SLACK
        assert arm.calls("GET") == 0  # nothing was sent without a token
        cred.answer.set()  # the endpoint answers the request still under way: one, not two
        assert prov.describe({TAG_JOB: "job-a"}) == []
        assert cred.calls == 1
        sent = arm.rs.calls[-1].request.headers["Authorization"]
        assert sent == "Bearer t0ken-whole"
        bounded = prov.client._config.credential
        assert "t0ken-whole" not in repr(bounded) and "t0ken-whole" not in repr(vars(bounded))
    finally:
        cred.answer.set()
