"""GCP ``notices()`` reads only its own jobs' VMs, and one VM's failing guest read loses no
other notice (review-an F4): the real google-cloud-compute client over the mocked transport."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cloudfakes import fake_gce, gcp_config, gcp_credentials, gcp_provisioner, serve
from test_gcp import request

from spotwise.errors import ProviderError
from spotwise.providers.base import TAG_JOB, NoticeKind, our_tags
from spotwise.providers.file_blobs import FileBlobs
from spotwise.providers.gcp_provisioner import GcpProvisioner

TOKEN = "ya29.s21f-test-token"
REASONS = {403: "forbidden", 429: "rateLimitExceeded", 500: "backendError"}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake GCE, where ``fake.failing_guest[(zone, name)] = code`` answers that VM's guest
    reads with that status and ``fake.failing_list = code`` the instance listing."""
    real_guest, real_list = fake_gce.FakeGCE._guest, fake_gce.FakeGCE._list_instances

    def guest(self: Any, req: Any) -> tuple[int, dict[str, str], str]:
        for (zone, name), code in self.failing_guest.items():
            if f"/zones/{zone}/instances/{name}/" in req.url:
                return fake_gce._err(code, REASONS[code], f"guest read refused ({code})")
        return real_guest(self, req)

    def listing(self: Any, req: Any) -> tuple[int, dict[str, str], str]:
        if self.failing_list:
            code = self.failing_list
            return fake_gce._err(code, REASONS[code], f"listing refused ({code})")
        return real_list(self, req)

    monkeypatch.setattr(fake_gce.FakeGCE, "_guest", guest)
    monkeypatch.setattr(fake_gce.FakeGCE, "_list_instances", listing)
    for f in serve(fake_gce.FakeGCE):
        f.failing_guest, f.failing_list = {}, 0
        yield f


def _guest_reads(fake: Any, since: int) -> list[str]:
    urls = [c.request.url for c in fake.rs.calls[since:] if "getGuestAttributes" in c.request.url]
    return [u.split("/instances/")[1].split("/")[0] for u in urls]


def _notice(fake: Any, instance_id: str, at: float) -> None:
    zone, name = instance_id.split("/")
    rec = {"received_at": at, "deadline": at + 30.0}
    fake.guest[(zone, name)] = {"spotwise/notice": json.dumps(rec)}


def _launch(prov: GcpProvisioner, token: str, job: str = "Job-A") -> str:
    req = replace(request(token), tags=our_tags(job, f"t-{token}", token))
    return prov.launch(req).instance_id


def test_another_jobs_vms_are_never_read(fake: Any) -> None:
    creds = gcp_credentials(TOKEN)
    theirs = gcp_provisioner(gcp_config(), creds)
    their_ids = [_launch(theirs, f"other-{n}", job="Job-B") for n in range(3)]
    mine = gcp_provisioner(gcp_config(), creds)
    my_id = _launch(mine, "mine-1")
    for iid in [*their_ids, my_id]:
        _notice(fake, iid, 100.0)

    before = len(fake.rs.calls)
    (n,) = mine.notices()
    assert (n.instance_id, n.kind, n.received_at, n.deadline) == (
        my_id,
        NoticeKind.INTERRUPTION,
        100.0,
        130.0,
    )
    assert _guest_reads(fake, before) == [my_id.split("/")[1]]  # one read: our only VM

    # a controller that launched nothing and described no job reads nothing at all
    idle = gcp_provisioner(gcp_config(), creds)
    before = len(fake.rs.calls)
    assert idle.notices() == [] and len(fake.rs.calls) == before

    # a restarted controller of Job-A reads its own VM's attributes only
    fresh = gcp_provisioner(gcp_config(), creds)
    fresh.describe({TAG_JOB: "Job-A"})
    before = len(fake.rs.calls)
    assert [x.instance_id for x in fresh.notices()] == [my_id]
    assert _guest_reads(fake, before) == [my_id.split("/")[1]]


@pytest.mark.parametrize("code", [403, 429, 500])
def test_one_failing_guest_read_loses_no_other_notice(
    fake: Any, code: int, caplog: pytest.LogCaptureFixture
) -> None:
    prov = gcp_provisioner(gcp_config(), gcp_credentials(TOKEN))
    bad, good = _launch(prov, "bad-1"), _launch(prov, "good-1")
    fake.failing_guest[tuple(bad.split("/"))] = code
    _notice(fake, good, 200.0)
    caplog.set_level(logging.WARNING)

    (n,) = prov.notices()  # the failing read does not fail the pass
    assert (n.instance_id, n.received_at, n.deadline) == (good, 200.0, 230.0)
    assert prov.notices() == []  # still failing: the bad VM is read again, good noticed once
    said = [r.getMessage() for r in caplog.records if bad in r.getMessage()]
    assert len(said) == 1 and "guest attributes" in said[0]  # logged once, not each pass

    del fake.failing_guest[tuple(bad.split("/"))]  # it answers again, with its notice
    _notice(fake, bad, 300.0)
    (later,) = prov.notices()
    assert (later.instance_id, later.received_at) == (bad, 300.0)


def test_a_failing_listing_does_not_hold_back_the_agents_notices(
    fake: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent's notice read from its folder needs no listing: handed out at once though the
    listing fails (review-ap AP4: held for the next call, it waited behind every later scan
    that failed too, past a 30 s preemption notice); with nothing to hand out the failure is
    raised, so the orchestrator pauses."""
    prov = gcp_provisioner(gcp_config(artifacts=tmp_path.as_uri()), gcp_credentials(TOKEN))
    iid = prov.launch(request()).instance_id
    notice = {"kind": "interruption", "received_at": 10.0, "deadline": 40.0}
    status = {"state": "running", "notices": [notice]}
    FileBlobs(tmp_path / "Job-A" / "t1").put("agent-0.json", json.dumps(status).encode())
    fake.failing_list = 403
    with caplog.at_level(logging.WARNING, logger="spotwise.providers"):
        (n,) = prov.notices()
    assert (n.instance_id, n.received_at, n.deadline) == (iid, 10.0, 40.0)
    assert "the agents' notices are handed out" in caplog.text
    prov._last_scan = -1e18  # the next pass's scan
    with pytest.raises(ProviderError, match="listing"):
        prov.notices()  # nothing to hand out: the failure is the orchestrator's to see
    fake.failing_list = 0
    prov._last_scan = -1e18
    assert prov.notices() == []  # handed out once
