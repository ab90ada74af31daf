"""`spotwise cancel` of a dead cloud job: a VM already gone is billed to when it went, counted as
revoked when its provider took it, and referenced at its known on-demand price (s24 helper L:
review-bb F2, F4, F5).

F2: an Azure VM evicted after its notice (or deleted by a drain killed just after its delete)
is gone, and ARM keeps nothing of it: the cancel billed it "up to now, an upper bound" (a
cancel the next morning: ~12 h of a VM that lived minutes), though the store held the life's
``notice`` event and its deadline. It now ends there, ``revoked``; a drain now writes when it
asks for the delete (a ``terminating`` event) and a cancel ends a gone record there.
F4: a life the provider took (GCE's preempted operation, the notice case) was closed
``reconciled``: the job's and the report's revocation counts left it out.
F5: the on-demand price of every gone VM was said unknown, though its launch had it (its
``launch`` event now records it) and a sibling of the same offer carried it (an older job's).
No catalog is read during a cancel.

The real ``_release`` and ``reconcile_records`` over a fake cloud (one module: a provisioner
that lists what it is given, a catalog it counts reads of), a real store as a dead
orchestrator leaves it.
Prices: spot $0.36/h (a second: $0.0001), on demand $1.44/h (a second: $0.0004).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from spotwise import release
from spotwise.costs import report
from spotwise.errors import ProviderError
from spotwise.providers import registry
from spotwise.providers.base import TAG_JOB, Instance, InstanceState, Market, Offer, our_tags
from spotwise.release import _release
from spotwise.release_text import released_text
from spotwise.spec import parse_spec
from spotwise.store import Store

ORCH_TESTS = str(Path(__file__).resolve().parents[1] / "orchestrator")
if ORCH_TESTS not in sys.path:
    sys.path.insert(0, ORCH_TESTS)
from test_s20g_drain_steps import _book  # noqa: E402 (the path above)

T0, SPOT_PH, OD_PH, JOB = 1_800_000_000.0, 0.36, 1.44, "j-s24l"
CANCEL = T0 + 12 * 3600  # the next morning
ZONE, VM = "eastus-1", "Standard_E8s_v5"


def _offer(cloud: str, market: Market = Market.SPOT) -> Offer:
    price = SPOT_PH if market is Market.SPOT else OD_PH
    return Offer(cloud, "eastus", ZONE, VM, market, price, OD_PH)


def _spec(cloud: str) -> str:
    return parse_spec(
        {
            "name": "j",
            "command": ["python", "train.py"],
            "metric": {"name": "acc"},
            "steps": 4,
            "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1}},
            "providers": [{"name": cloud}],
        }
    ).model_dump_json()


class _Cloud:
    """A fake cloud module: its provisioner lists ``instances`` (by the job's tag) and takes
    every terminate; ``ends``: what it still says of a gone one (GCE's operations); its
    catalog offers ``catalog`` (None: it cannot be reached)."""

    def __init__(
        self,
        instances: list[Instance] | None = None,
        ends: dict[str, tuple[float, bool]] | None = None,
        catalog: list[Offer] | None = None,
    ) -> None:
        self.instances, self.ends, self.catalog = instances or [], ends, catalog
        self.terminated: list[str] = []
        self.catalog_reads = 0
        if ends is not None:
            self.ended_unlisted = lambda ids: {i: self.ends[i] for i in ids if i in self.ends}  # type: ignore[index]

    def open_provisioner(self, config: Any) -> _Cloud:
        return self

    def open_catalog(self, config: Any) -> _Cloud:
        self.catalog_reads += 1
        if self.catalog is None:
            raise ConnectionError("the price API cannot be reached")
        return self

    def offers(self, region: str | None = None, types: Any = None, market: Any = None) -> Any:
        return [o for o in self.catalog or [] if o.region == region and o.instance_type in types]

    def describe(self, tags: dict[str, str]) -> list[Instance]:
        return [i for i in self.instances if i.tags.get(TAG_JOB) == tags.get(TAG_JOB)]

    def terminate(self, ids: list[str]) -> None:
        self.terminated += ids


def _dead_job(db: str, cloud: str, lives: int = 1, on_demand: float | None = None) -> str:
    """A running job whose orchestrator is gone, its trial's open records ``l-1``.. (VMs
    ``vm-1``.., up since T0, $0 billed yet), with two reports of ``l-1`` (steps 1 and 2 at
    T0+600 and T0+1200; its checkpoint: step 2); the trial's id."""
    with Store.open(db) as s:
        s.create_job("j", _spec(cloud), "job.yaml", "spot-greedy", "maximize", job_id=JOB)
        s.update_job(JOB, state="running", pid=0)
        trial = s.add_trial(JOB, 0, {"lr": 0.1}).id
        for n in range(1, lives + 1):
            o = _offer(cloud)
            s.record_launch(
                id=f"l-{n}", job_id=JOB, trial_id=trial, provider=cloud, region=o.region,
                zone=o.zone, instance_type=o.instance_type, market="spot", offer_key=o.key,
                price_per_hour=SPOT_PH, requested_at=T0 - 30, state="running",
                provider_instance_id=f"vm-{n}", launched_at=T0,
            )  # fmt: skip
            od = {} if on_demand is None else {"on_demand": on_demand}  # as launches write it
            s.add_event(
                JOB, "launch", T0, trial_id=trial, instance_id=f"l-{n}", resume_step=0, **od
            )
        s.add_observation(trial, 1, 0.5, T0 + 600, instance_id="l-1")
        s.add_observation(trial, 2, 0.6, T0 + 1200, instance_id="l-1")
        s.update_trial(trial, checkpoint_step=2, step=2)
    return trial


def _cancel(db: str, monkeypatch: pytest.MonkeyPatch, cloud: _Cloud) -> dict[str, Any]:
    monkeypatch.setattr(registry, "cloud_module", lambda name: cloud)
    monkeypatch.setattr(release, "wall_now", lambda: CANCEL)
    with Store.open_existing(db) as s:
        return _release(s, s.get_job(JOB), orchestrator_died=True)


def _db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state.db'}"


def _row(db: str, launch: str = "l-1") -> Any:
    with Store.open_existing(db) as s:
        return s.get_instance(launch)


def _job(db: str) -> Any:
    with Store.open_existing(db) as s:
        return s.get_job(JOB)


def _revoked_count(db: str) -> int:
    return int(report(since="all", db=db, now=CANCEL + 3600)["totals"]["revoked"])


# ---- F2: an Azure VM evicted after its notice, its orchestrator dead ------------------------
def test_an_evicted_azure_vm_is_billed_to_its_notices_deadline_as_revoked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent read Scheduled Events ``Preempt`` (NotBefore T0+1800), the orchestrator wrote
    the notice and was killed; ARM evicted (deleted) the VM; the cancel runs 12 h later. Was:
    ended at the cancel, 43200 s, $4.32, ``reconciled``, revocations 0."""
    db = _db(tmp_path)
    trial = _dead_job(db, "azure")
    with Store.open_existing(db) as s:
        s.add_event(JOB, "notice", T0 + 1795, trial_id=trial, instance_id="l-1", deadline=T0 + 1800)

    out = _cancel(db, monkeypatch, _Cloud(catalog=[_offer("azure")]))

    row = _row(db)
    assert (row.state, row.end_reason, row.ended_at) == ("terminated", "revoked", T0 + 1800)
    assert row.market_seconds == pytest.approx(1800.0)
    assert row.cost_usd == pytest.approx(0.18)  # 1800 s at $0.36/h (Azure refunds nothing)
    assert _job(db).cost_usd == pytest.approx(0.18)
    assert _job(db).revocations == 1 and _revoked_count(db) == 1  # F4: counted
    with Store.open_existing(db) as s:
        (ev,) = s.events(JOB, kind="revoked")
    assert (ev.time, ev.instance_id, ev.trial_id) == (T0 + 1800, "l-1", trial)
    (rec,) = out["records"]
    assert rec["note"] == (
        "vm-1 is gone after azure's notice: billed up to the notice's deadline, as a life "
        "azure took"
    )
    assert "upper bound" not in released_text(JOB, out)


def test_a_report_after_the_deadline_raises_the_end_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The VM reported at T0+1200, after a deadline of T0+900 (the eviction came late): it
    ran then, so it is billed to T0+1200, never less."""
    db = _db(tmp_path)
    trial = _dead_job(db, "azure")
    with Store.open_existing(db) as s:
        s.add_event(JOB, "notice", T0 + 870, trial_id=trial, instance_id="l-1", deadline=T0 + 900)

    _cancel(db, monkeypatch, _Cloud(catalog=[_offer("azure")]))

    row = _row(db)
    assert (row.end_reason, row.ended_at) == ("revoked", T0 + 1200)
    assert row.cost_usd == pytest.approx(0.12)


def test_a_vm_the_killed_drain_deleted_is_billed_to_the_drains_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C; the drain wrote its ``terminating`` event (T0+1500), deleted the VM and was
    killed before its bill. Was: billed to the cancel, 12 h, $4.32."""
    db = _db(tmp_path)
    _dead_job(db, "azure")
    with Store.open_existing(db) as s:
        s.add_event(JOB, "terminating", T0 + 1500, launches=["l-1"])

    out = _cancel(db, monkeypatch, _Cloud(catalog=[_offer("azure")]))

    row = _row(db)
    assert (row.end_reason, row.ended_at) == ("reconciled", T0 + 1500)  # we deleted it
    assert row.cost_usd == pytest.approx(0.15)  # 1500 s at $0.36/h
    assert _job(db).revocations == 0 and _revoked_count(db) == 0
    assert out["records"][0]["note"] == (
        "vm-1 is gone and azure does not say when it ended: billed up to the job's drain's "
        "request to delete it"
    )


def test_a_drains_delete_before_the_notices_deadline_is_ours_not_revoked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _db(tmp_path)
    trial = _dead_job(db, "azure")
    with Store.open_existing(db) as s:
        s.add_event(JOB, "notice", T0 + 1780, trial_id=trial, instance_id="l-1", deadline=T0 + 1810)
        s.add_event(JOB, "terminating", T0 + 1790, launches=["l-1"])

    _cancel(db, monkeypatch, _Cloud(catalog=[_offer("azure")]))

    row = _row(db)
    assert (row.end_reason, row.ended_at) == ("reconciled", T0 + 1790)
    assert row.cost_usd == pytest.approx(0.179)


def test_a_gone_vm_nothing_dates_is_still_billed_up_to_now_an_upper_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _db(tmp_path)
    _dead_job(db, "azure")

    out = _cancel(db, monkeypatch, _Cloud(catalog=[_offer("azure")]))

    row = _row(db)
    assert (row.end_reason, row.ended_at) == ("reconciled", CANCEL)
    assert row.cost_usd == pytest.approx(4.32)
    assert "billed up to now, an upper bound" in out["records"][0]["note"]


def test_the_drain_notes_the_deletes_its_provider_accepted_after_they_are_asked(
    tmp_path: Path,
) -> None:
    """The drain's ``terminating`` event names the lives whose deletes the provider accepted,
    at the request's time, written once they are asked (review-bg BG1: written before, it held
    every delete up to a busy timeout while another process held the database) and before
    their bills (a kill after the delete still leaves it)."""
    book = _book(tmp_path)
    book.live(0), book.live(1)
    at_terminate: list[list[Any]] = []
    terminate = book.prov.terminate

    def asked(ids: Any) -> None:  # what the store holds when the provider is asked
        at_terminate.append(book.store.events(book.job_id, kind="terminating"))
        terminate(ids)

    book.prov.terminate = asked  # type: ignore[method-assign]

    assert book._drain(book.backend) is None  # type: ignore[arg-type]

    assert book.prov.terminated == [["i-0", "i-1"]]
    assert at_terminate == [[]]  # nothing written before the delete was asked
    (ev,) = book.store.events(book.job_id, kind="terminating")
    assert (ev.time, ev.detail["launches"]) == (100.0, ["l-0", "l-1"])
    book.store.close()


def test_a_delete_the_provider_refused_is_not_noted(tmp_path: Path) -> None:
    """review-bg BG2: the event was written whatever the provider answered, so a VM whose
    delete was refused (it ran on, a leftover) was billed by a later cancel only up to the
    refused request, hours short. Now only accepted deletes are noted."""
    book = _book(tmp_path)
    book.live(0), book.live(1)
    terminate = book.prov.terminate

    def refuse_i1(ids: Any) -> None:
        if "i-1" in ids:
            raise ProviderError("terminate refused: i-1 (UnauthorizedOperation)")
        terminate(ids)

    book.prov.terminate = refuse_i1  # type: ignore[method-assign]

    book._drain(book.backend)  # type: ignore[arg-type]

    noted = [e.detail["launches"] for e in book.store.events(book.job_id, kind="terminating")]
    assert noted == [["l-0"]]  # the batch was refused; i-0's own delete went through
    book.store.close()


# ---- F4: GCE's preempted operation ----------------------------------------------------------
def test_a_gcp_vm_gce_preempted_is_closed_revoked_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GCE keeps the ``compute.instances.preempted`` operation (T0+1800): billed to it (right
    before) and now closed ``revoked``, counted by the job and the report (was 0 and 0)."""
    db = _db(tmp_path)
    _dead_job(db, "gcp")

    out = _cancel(db, monkeypatch, _Cloud(ends={"vm-1": (T0 + 1800, True)}, catalog=[]))

    row = _row(db)
    assert (row.end_reason, row.ended_at) == ("revoked", T0 + 1800)
    assert row.cost_usd == pytest.approx(0.18)
    assert _job(db).revocations == 1 and _revoked_count(db) == 1
    assert [r["outcome"] for r in out["records"]] == ["ended"]
    _cancel(db, monkeypatch, _Cloud(ends={"vm-1": (T0 + 1800, True)}, catalog=[]))
    assert _job(db).revocations == 1  # a second cancel counts it no more


def test_a_life_its_orchestrator_counted_revoked_gets_no_second_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _db(tmp_path)
    trial = _dead_job(db, "gcp")
    with Store.open_existing(db) as s:
        s.add_event(JOB, "revoked", T0 + 1800, trial_id=trial, instance_id="l-1", launch="l-1")
        s.update_trial(trial, revocations=1)

    _cancel(db, monkeypatch, _Cloud(ends={"vm-1": (T0 + 1800, True)}, catalog=[]))

    with Store.open_existing(db) as s:
        assert len(s.events(JOB, kind="revoked")) == 1
    assert _job(db).revocations == 1 and _row(db).end_reason == "revoked"


# ---- F5: the on-demand price of a gone VM ---------------------------------------------------
def test_a_gone_vms_on_demand_price_is_its_siblings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vm-2 of the same offer is still running: its on-demand price (a tag) is vm-1's too;
    vm-1 (gone, the drain's delete at T0+1500) is referenced up to its last report (T0+1200):
    1200 s at $1.44/h = $0.48. Was: $0 and "the on-demand price of 1 record(s) is unknown"."""
    db = _db(tmp_path)
    _dead_job(db, "azure", lives=2)
    with Store.open_existing(db) as s:
        s.add_event(JOB, "terminating", T0 + 1500, launches=["l-1"])
    sibling = Instance(
        "vm-2", _offer("azure"), InstanceState.RUNNING, our_tags(JOB, "t", "l-2"), T0,
        launch_identity="l-2",
    )  # fmt: skip
    cloud = _Cloud([sibling], catalog=None)  # the catalog cannot be reached: not needed

    out = _cancel(db, monkeypatch, cloud)

    assert "on_demand_unknown" not in out
    assert "is unknown" not in released_text(JOB, out)
    assert _row(db).on_demand_cost_usd == pytest.approx(0.48)
    assert cloud.catalog_reads == 0 and cloud.terminated == ["vm-2"]


def test_a_gone_vms_on_demand_price_is_the_one_its_launch_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No sibling listed: the launch event's on-demand price ($1.44/h, what the offer carried
    when it was launched) references vm-1's 1200 useful seconds: $0.48; no catalog is read."""
    db = _db(tmp_path)
    _dead_job(db, "azure", on_demand=1.44)
    with Store.open_existing(db) as s:
        s.add_event(JOB, "terminating", T0 + 1500, launches=["l-1"])
    cloud = _Cloud(catalog=None)

    out = _cancel(db, monkeypatch, cloud)

    assert "on_demand_unknown" not in out
    assert _row(db).on_demand_cost_usd == pytest.approx(0.48)
    assert _job(db).on_demand_cost_usd == pytest.approx(0.48)
    assert cloud.catalog_reads == 0


def test_a_gone_vm_whose_launch_recorded_no_price_is_unknown_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _db(tmp_path)
    _dead_job(db, "azure")
    with Store.open_existing(db) as s:
        s.add_event(JOB, "terminating", T0 + 1500, launches=["l-1"])

    out = _cancel(db, monkeypatch, _Cloud(catalog=None))

    assert out["on_demand_unknown"] == ["l-1"] and _row(db).on_demand_cost_usd == 0.0
    assert _row(db).cost_usd == pytest.approx(0.15)  # billed all the same
