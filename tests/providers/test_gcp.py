"""GCP adapter through the real google-cloud-compute client over a mocked HTTP transport."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import pytest
from cloudfakes import (
    GCP_FIXTURES,
    Launches,
    assert_import_loads_no_sdk,
    assert_registry_finds,
    fake_gce,
    gcp_config,
    gcp_credentials,
    gcp_provisioner,
    serve,
)
from forbidden import forbid

from spotwise.errors import CapacityError, ProviderError, ProviderUnavailable, SpecError
from spotwise.planner.runstate import write_control
from spotwise.providers import gcp, gcp_prices
from spotwise.providers.base import (
    TAG_JOB,
    TAG_LAUNCH,
    InstanceState,
    LaunchRequest,
    Market,
    NoticeKind,
    is_ours,
    our_tags,
)
from spotwise.providers.file_blobs import FileBlobs
from spotwise.providers.gcp_catalog import GcpCatalog
from spotwise.providers.gcp_launch import instance_name, request_id
from spotwise.providers.gcp_provisioner import GcpProvisioner
from spotwise.providers.registry import ProviderConfig

SECRET = "ya29.SPOTWISE-TEST-TOKEN-must-never-appear"
LAUNCHES = Launches(
    "gcp",
    zone="us-central1-a",
    instance_type="g2-standard-4",
    price_per_hour=0.28184,
    on_demand_price_per_hour=0.70683,
    vcpus=4,
    memory_gb=16.0,
    gpu_name="L4",
    job="Job-A",
    argv=("python", "train.py", "--lr", "0.1; rm -rf / $(whoami)"),
    env={"SPOTWISE_TRIAL": "t1", "QUOTE": 'it\'s "quoted"'},
)
offer = LAUNCHES.offer
request = LAUNCHES.request


@pytest.fixture
def fake() -> Iterator[Any]:
    yield from serve(fake_gce.FakeGCE)


@pytest.fixture
def catalog(fake: Any) -> GcpCatalog:
    return gcp.open_catalog(gcp_config(), credentials=gcp_credentials(SECRET))


@pytest.fixture
def prov(fake: Any) -> GcpProvisioner:
    return gcp_provisioner(gcp_config(), gcp_credentials(SECRET))


# ---- catalog ------------------------------------------------------------------------------------
def test_instance_types_follow_pagination_and_read_gpus(catalog: GcpCatalog, fake: Any) -> None:
    types = {(t.region, t.name): t for t in catalog.instance_types()}
    assert ("us-east4", "g2-standard-8") in types  # second page
    g2 = types[("us-central1", "g2-standard-4")]
    assert (g2.vcpus, g2.memory_gb, g2.gpus, g2.gpu_name) == (4, 16.0, 1, "L4")
    assert g2.on_demand_price_per_hour == pytest.approx(0.70683)
    assert ("us-central1", "c3-standard-4") not in types  # only priced types are listed by default
    assert {t.region for t in catalog.instance_types("us-east4")} == {"us-east4"}
    listings = [c for c in fake.rs.calls if "/aggregated/machineTypes" in c.request.url]
    assert len(listings) == 2  # two pages, fetched once and kept
    assert "g2-standard-4" in unquote_plus(listings[0].request.url)  # names go in the filter


def test_named_instance_types_are_listed_even_without_a_price(fake: Any) -> None:
    cfg = gcp_config()
    cfg = ProviderConfig(
        "gcp", instance_types=("t2a-standard-4", "c3-standard-4"), options=cfg.options
    )
    cat = gcp.open_catalog(cfg, credentials=gcp_credentials(SECRET))
    types = {t.name: t for t in cat.instance_types()}
    assert types["t2a-standard-4"].architecture == "arm64"
    assert types["c3-standard-4"].on_demand_price_per_hour is None
    assert cat.offers() == []  # unpriced: never offered
    with pytest.raises(SpecError, match="not GCP machine type names"):
        cat.offers(instance_types=['x" OR name != "y'])


def test_offers_join_hardware_with_prices_and_skip_unpriced(catalog: GcpCatalog) -> None:
    offers = catalog.offers(region="us-central1", market=Market.SPOT)
    keys = {o.key for o in offers}
    assert "gcp:us-central1-a:g2-standard-4:spot" in keys
    assert "gcp:us-central1-b:g2-standard-4:spot" in keys
    assert not any("c3-standard-4" in k for k in keys)  # no price → not offered
    g2 = next(o for o in offers if o.zone == "us-central1-a" and o.instance_type == "g2-standard-4")
    assert (g2.price_per_hour, g2.on_demand_price_per_hour, g2.gpus) == (0.28184, 0.70683, 1)
    both = catalog.offers(region="us-central1", instance_types=["e2-standard-2"])
    assert {o.market for o in both} == {Market.SPOT, Market.ON_DEMAND}
    assert [o.price_per_hour for o in both] == sorted(o.price_per_hour for o in both)


def test_price_history_is_the_dated_catalog_point(catalog: GcpCatalog) -> None:
    points = catalog.price_history("us-central1", "g2-standard-4", 0, 4_000_000_000)
    assert {p.market for p in points} == {Market.SPOT, Market.ON_DEMAND}
    assert all(
        p.timestamp == gcp_prices.load().lookup("g2-standard-4", "us-central1").as_of_epoch
        for p in points
    )  # type: ignore[union-attr]
    assert catalog.price_history("us-central1", "g2-standard-4", 0, 1) == []


def test_offline_catalog_uses_the_price_csv_without_api_calls() -> None:
    cfg = ProviderConfig("gcp", zones=("us-west4-a",), options={"offline": "true"})
    cat = gcp.open_catalog(cfg)
    assert cat.clients is None
    offers = cat.offers(region="us-west4", instance_types=["g2-standard-8"], market=Market.SPOT)
    assert [(o.zone, o.price_per_hour, o.gpus) for o in offers] == [("us-west4-a", 0.26385, 1)]
    assert "us-central1" in cat.regions()


def test_shipped_prices_are_dated_and_sourced() -> None:
    table = gcp_prices.load()
    assert table.rows and all(r.source.startswith("skypilot-v7@") and r.as_of for r in table.rows)
    assert all(r.spot is not None and r.spot < r.on_demand for r in table.rows)
    assert (gcp_prices.SHIPPED.parent / "SOURCE.md").exists()


def test_refresh_joins_bundled_gpus_and_drops_unpriced(tmp_path: Path) -> None:
    dest = gcp_prices.refresh(
        tmp_path / "p.csv", source=str(GCP_FIXTURES / "skypilot_vms_sample.csv")
    )
    table = gcp_prices.load(dest)
    g2 = table.lookup("g2-standard-4", "us-central1")
    assert g2 is not None and (g2.on_demand, g2.spot, g2.gpus, g2.gpu_name) == (
        0.70683,
        0.28184,
        1,
        "L4",
    )
    g48 = table.lookup("g2-standard-48", "us-central1")
    assert g48 is not None and g48.on_demand == pytest.approx(1.7615 + 2.24016) and g48.gpus == 4
    assert table.lookup("a2-highgpu-1g", "us-central1") is None  # no A100 row: never under-priced
    assert table.lookup("e2-standard-2", "us-west4").spot == 0.00688  # type: ignore[union-attr]


# ---- labels -----------------------------------------------------------------------------------
def test_tags_map_to_valid_labels_and_back() -> None:
    tags = our_tags("Job A/1", "t1", "launch-0001")
    labels = gcp.tags_to_labels(tags)
    assert labels["spotwise-managed"] == "true" and labels["spotwise-trial"] == "t1"
    assert all(len(v) <= 63 and v == v.lower() for v in labels.values())
    assert labels["spotwise-job"] != gcp.label_value("job_a_1")  # changed values get a hash
    assert gcp.labels_to_tags({"spotwise-trial": "t1"}) == {"spotwise:trial": "t1"}
    assert (
        gcp.label_filter({TAG_JOB: "j"})
        == '(labels.spotwise-job = "j") AND (labels.spotwise-managed = "true")'
    )


# ---- launch -----------------------------------------------------------------------------------
def test_launch_sends_spot_scheduling_labels_and_json_launch_spec(
    prov: GcpProvisioner, fake: Any
) -> None:
    fake.insert_polls = 2  # the operation is RUNNING twice before DONE
    inst = prov.launch(request())
    assert inst.instance_id == f"us-central1-a/{instance_name('launch-0001')}"
    assert (
        inst.state is InstanceState.RUNNING and is_ours(inst.tags) and inst.tags[TAG_JOB] == "Job-A"
    )
    assert inst.offer.price_per_hour == 0.28184
    body = fake.instances[("us-central1-a", instance_name("launch-0001"))]
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"
    assert body["labels"]["spotwise-launch"] == "launch-0001"
    meta = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    spec = json.loads(meta["spotwise-launch"])
    assert (
        spec["argv"][-1] == "0.1; rm -rf / $(whoami)" and spec["env"]["QUOTE"] == 'it\'s "quoted"'
    )
    assert "rm -rf" not in meta["startup-script"] and "train.py" not in meta["startup-script"]
    waits = [c for c in fake.rs.calls if "/wait" in c.request.url]
    assert len(waits) == 3


def test_request_id_is_a_deterministic_uuid(prov: GcpProvisioner, fake: Any) -> None:
    prov.launch(request())
    insert = next(
        c
        for c in fake.rs.calls
        if c.request.method == "POST" and c.request.url.split("?")[0].endswith("/instances")
    )
    rid = insert.request.url.split("requestId=")[1].split("&")[0]
    assert uuid.UUID(rid).version == 5 and rid == request_id("launch-0001")


def test_relaunch_with_the_same_token_is_idempotent(prov: GcpProvisioner, fake: Any) -> None:
    a = prov.launch(request())
    fake.by_request_id.clear()  # a new controller process: the name still collides (409)
    b = prov.launch(request())
    assert a.instance_id == b.instance_id and len(fake.instances) == 1


def test_capacity_errors_become_capacity_error(prov: GcpProvisioner, fake: Any) -> None:
    fake.fail_next_insert = "ZONE_RESOURCE_POOL_EXHAUSTED"
    with pytest.raises(CapacityError, match="ZONE_RESOURCE_POOL_EXHAUSTED"):
        prov.launch(request())


def test_a_launch_that_times_out_leaves_a_vm_its_launch_tag_finds(fake: Any) -> None:
    """What the orchestrator relies on to clean up after a failed launch: the VM the cloud
    accepted is listed under the launch's tag, and can be deleted."""
    prov = gcp_provisioner(gcp_config(operation_timeout_s="0.001"), gcp_credentials(SECRET))
    fake.insert_polls = 5
    with pytest.raises(ProviderError, match="still running at the deadline"):
        prov.launch(request())
    (left,) = prov.describe({TAG_JOB: "Job-A", TAG_LAUNCH: "launch-0001"})
    assert left.holds_resource()
    prov.terminate([left.instance_id])
    assert fake.instances == {}


@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf"])
def test_an_operation_timeout_that_is_not_a_positive_number_is_refused_when_opened(
    value: str,
) -> None:
    """It was read at each wait: "0" gave up on every operation at once, "abc" failed the
    launch with a ValueError after the VM was asked for."""
    with pytest.raises(SpecError) as info:
        gcp_provisioner(gcp_config(operation_timeout_s=value), gcp_credentials(SECRET))
    assert str(info.value) == (
        f"providers[].options.operation_timeout_s: {value!r} is not a number > 0"
    )


def test_on_demand_launch_is_standard(prov: GcpProvisioner, fake: Any) -> None:
    prov.launch(request(market=Market.ON_DEMAND))
    body = next(iter(fake.instances.values()))
    assert body["scheduling"]["provisioningModel"] == "STANDARD"
    assert "instanceTerminationAction" not in body["scheduling"]


def test_launch_refuses_untagged_requests(prov: GcpProvisioner) -> None:
    bad = LaunchRequest(offer(), ("true",), {}, {"owner": "me"}, "x")
    with pytest.raises(ProviderError, match="without spotwise tags"):
        prov.launch(bad)


# ---- describe / terminate / notices --------------------------------------------------------------
def test_describe_lists_only_ours_with_exact_tags(prov: GcpProvisioner, fake: Any) -> None:
    fake.add_foreign("us-central1-a", "someone-elses-vm")
    prov.launch(request("a"))
    prov.launch(request("b"))
    assert len(prov.describe()) == 2
    (only,) = prov.describe({"spotwise:launch": "b"})
    assert only.tags["spotwise:launch"] == "b"
    fresh = gcp.open_provisioner(gcp_config(), credentials=gcp_credentials(SECRET))
    assert {i.instance_id for i in fresh.describe({TAG_JOB: "Job-A"})} == {
        i.instance_id for i in prov.describe()
    }


def test_terminate_refuses_foreign_and_unknown_ids(prov: GcpProvisioner, fake: Any) -> None:
    inst = prov.launch(request())
    fake.add_foreign("us-central1-a", "someone-elses-vm")
    for bad in ("us-central1-a/someone-elses-vm", "us-central1-a/never-existed", "../etc"):
        with pytest.raises(ProviderError, match="refusing"):
            prov.terminate([inst.instance_id, bad])
    assert len(fake.instances) == 2  # nothing deleted when any id is refused
    prov.terminate([inst.instance_id])
    assert ("us-central1-a", "someone-elses-vm") in fake.instances and len(fake.instances) == 1
    (gone,) = prov.describe()
    assert gone.state is InstanceState.TERMINATED and gone.ended_at is not None


@pytest.mark.parametrize("action", ["DELETE", "STOP"])
def test_preemption_is_a_notice_and_a_revocation(fake: Any, action: str) -> None:
    prov = gcp_provisioner(gcp_config(termination_action=action), gcp_credentials(SECRET))
    inst = prov.launch(request())
    assert prov.notices() == []
    fake.preempt("us-central1-a", instance_name("launch-0001"))  # DELETE: gone; STOP: TERMINATED
    assert (("us-central1-a", instance_name("launch-0001")) in fake.instances) is (action == "STOP")
    (notice,) = prov.notices()
    assert notice.instance_id == inst.instance_id and notice.kind is NoticeKind.INTERRUPTION
    assert notice.deadline - notice.received_at == 30.0
    assert prov.notices() == []  # reported once
    (revoked,) = prov.describe()
    assert revoked.state is InstanceState.REVOKED and revoked.ended_at is not None
    # STOP: the preempted VM is still there (its disk is billed) until it is deleted
    assert revoked.holds_resource() is (action == "STOP")
    if action == "STOP":
        prov.terminate([inst.instance_id])
        assert fake.instances == {} and not prov.describe()[0].holds_resource()


def test_a_vm_stopped_from_inside_is_terminal_and_still_there_until_deleted(
    prov: GcpProvisioner, fake: Any
) -> None:
    """The agent's fallback ``shutdown -h now`` (or a user) stops the VM: status TERMINATED, not
    a preemption, and the VM and its disk remain."""
    inst = prov.launch(request())
    assert prov.describe()[0].holds_resource()
    fake.instances[("us-central1-a", instance_name("launch-0001"))]["status"] = "TERMINATED"
    assert prov.notices() == []
    (stopped,) = prov.describe()
    assert stopped.state is InstanceState.TERMINATED and stopped.holds_resource()
    fresh = gcp_provisioner(gcp_config(), gcp_credentials(SECRET))
    assert [i.holds_resource() for i in fresh.describe({TAG_JOB: "Job-A"})] == [True]
    prov.terminate([inst.instance_id])
    assert fake.instances == {}
    (gone,) = prov.describe()
    assert gone.state is InstanceState.TERMINATED and not gone.holds_resource()


def test_another_jobs_vm_and_its_failing_folder_are_never_read(
    fake: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """notices() lists every spotwise VM of the project; only this job's trials are followed:
    another job's folder answering 403 must not break this one."""
    creds = gcp_credentials(SECRET)
    theirs_uri = (tmp_path / "theirs").as_uri()
    theirs = gcp_provisioner(gcp_config(artifacts=theirs_uri), creds)
    theirs.launch(replace(request("other"), tags=our_tags("Job-B", "t1", "other")))
    cfg = gcp_config(artifacts=(tmp_path / "mine").as_uri())
    mine = gcp_provisioner(cfg, creds)
    inst = mine.launch(request())
    calls = forbid(monkeypatch, theirs_uri)
    assert mine.notices() == [] and mine.progress(inst.instance_id) == []
    assert {i.tags[TAG_JOB] for i in mine.describe()} == {"Job-A", "Job-B"}
    assert [i.instance_id for i in mine.describe({TAG_JOB: "Job-A"})] == [inst.instance_id]
    assert calls == []  # never opened, never read (a failing read is only logged, each poll)
    # a restarted controller still follows its own job's trials (from the VMs' metadata)
    FileBlobs(tmp_path / "mine" / "Job-A" / "t1").put(
        "agent-0.json", json.dumps({"state": "exited", "exit_code": 0}).encode()
    )
    fresh = gcp_provisioner(cfg, creds)
    assert fresh.notices() == [] and {i.exit_code for i in fresh.describe()} == {None}
    assert [i.exit_code for i in fresh.describe({TAG_JOB: "Job-A"})] == [0]
    assert calls == []


def test_the_registry_finds_the_adapter() -> None:
    assert_registry_finds("gcp", gcp)


def test_agent_guest_attribute_notice(prov: GcpProvisioner, fake: Any) -> None:
    inst = prov.launch(request())
    zone, name = inst.instance_id.split("/")
    fake.guest[(zone, name)] = {
        "spotwise/notice": json.dumps({"received_at": 100.0, "deadline": 130.0})
    }
    (n,) = prov.notices()
    assert (n.received_at, n.deadline) == (100.0, 130.0)


def test_the_trial_channel_carries_events_notices_the_exit_and_stop_requests(
    fake: Any, tmp_path: Path
) -> None:
    """What the agent writes to the trial's artifacts folder comes back through progress,
    notices and describe; the local stop and control files go the other way."""
    p = gcp_provisioner(gcp_config(artifacts=tmp_path.as_uri()), gcp_credentials(SECRET))
    stop, control = tmp_path / "stop-2", tmp_path / "control-2.json"
    local = {"SPOTWISE_STOP_FILE": str(stop), "SPOTWISE_CONTROL_FILE": str(control)}
    req = replace(request(), env={**LAUNCHES.env, "SPOTWISE_ATTEMPT": "2", **local})
    inst = p.launch(req)
    folder = FileBlobs(tmp_path / "Job-A" / "t1")
    body = fake.instances[("us-central1-a", instance_name("launch-0001"))]
    spec = json.loads({i["key"]: i["value"] for i in body["metadata"]["items"]}["spotwise-launch"])
    assert (spec["artifacts"], spec["attempt"], spec["job_id"], spec["trial_id"]) == (
        folder.uri,
        2,
        "Job-A",
        "t1",
    )
    assert spec["launch_id"] == "launch-0001" and not set(local) & set(spec["env"])
    assert p.progress(inst.instance_id) == [] and p.notices() == []

    folder.put("events-2.jsonl", b'{"type": "report", "step": 1, "metric": 0.5}\n')
    folder.put("agent-2.json", json.dumps({"state": "running", "notices": []}).encode())
    assert p.progress(inst.instance_id) == [{"type": "report", "step": 1, "metric": 0.5}]
    stop.touch()
    write_control(control, 5)
    assert p.progress(inst.instance_id) == []
    assert folder.exists("stop-2") and folder.get("control-2.json")[0] == b'{"checkpoint_every": 5}'

    notice = {"kind": "interruption", "received_at": 10.0, "deadline": 40.0}
    status = {"state": "exited", "exit_code": 0, "notices": [notice]}
    folder.put("agent-2.json", json.dumps(status).encode())
    (n,) = p.notices()
    assert (n.instance_id, n.kind, n.received_at, n.deadline) == (
        inst.instance_id,
        NoticeKind.INTERRUPTION,
        10.0,
        40.0,
    )
    (running,) = p.describe()
    assert running.exit_code == 0 and running.state is InstanceState.RUNNING
    fresh = gcp_provisioner(gcp_config(artifacts=tmp_path.as_uri()), gcp_credentials(SECRET))
    # a restarted controller describing its job reads the folder from the metadata (and hears
    # of the notice before it is given the exit that followed it)
    fresh.describe({TAG_JOB: "Job-A"})
    assert [x.instance_id for x in fresh.notices()] == [inst.instance_id]
    assert fresh.describe({TAG_JOB: "Job-A"})[0].exit_code == 0
    fake.preempt("us-central1-a", instance_name("launch-0001"))
    assert p.notices() == []  # the same interruption, seen again in the operations: once
    (gone,) = p.describe()
    assert gone.state is InstanceState.REVOKED and gone.exit_code == 0


@pytest.mark.parametrize(
    ("checkpoint", "artifacts", "expected"),
    [
        ("gs://bkt/ckpt/Job-A/t1/", "", "gs://bkt/ckpt/Job-A/t1"),
        ("file:///shared/ckpt/Job-A/t1", "", "file:///shared/ckpt/Job-A/t1"),
        ("gs://bkt/ckpt/Job-A/t1", "gs://bkt/runs/", "gs://bkt/runs/Job-A/t1"),
    ],
)
def test_the_artifacts_folder_defaults_to_a_reachable_checkpoint_location(
    fake: Any, checkpoint: str, artifacts: str, expected: str
) -> None:
    p = gcp_provisioner(gcp_config(artifacts=artifacts), gcp_credentials(SECRET))
    req = replace(request(), env={**LAUNCHES.env, "SPOTWISE_CHECKPOINT_URI": checkpoint})
    p.launch(req)
    body = next(iter(fake.instances.values()))
    meta = {i["key"]: i["value"] for i in body["metadata"]["items"]}
    assert json.loads(meta["spotwise-launch"])["artifacts"] == expected


@pytest.mark.parametrize(
    ("checkpoint", "artifacts", "match"),
    [
        ("/home/me/ckpt/j/t", "", "checkpoint.location"),
        ("s3://bucket/ckpt/j/t", "", "checkpoint.location"),
        ("", "", "'(none)'"),
        # artifacts only moves the channel: the checkpoints would still be on the VM's disk
        ("/home/me/ckpt/j/t", "gs://bkt/runs", "checkpoint.location"),
        ("gs://b/c", "az://acct/cont/p", "options.artifacts"),
    ],
)
def test_a_launch_no_instance_can_report_from_is_refused_before_the_insert(
    fake: Any, checkpoint: str, artifacts: str, match: str
) -> None:
    p = gcp_provisioner(gcp_config(artifacts=artifacts), gcp_credentials(SECRET))
    req = replace(request(), env={**LAUNCHES.env, "SPOTWISE_CHECKPOINT_URI": checkpoint})
    with pytest.raises(ProviderError, match=re.escape(match)) as e:
        p.launch(req)
    assert "\n" not in str(e.value) and SECRET not in str(e.value)
    assert fake.instances == {} and not [c for c in fake.rs.calls if c.request.method == "POST"]


def test_a_launch_env_with_a_credential_is_refused(fake: Any) -> None:
    p = gcp_provisioner(gcp_config(), gcp_credentials(SECRET))
    req = replace(request(), env={**LAUNCHES.env, "AZURE_CLIENT_SECRET": SECRET})
    with pytest.raises(ProviderError, match="refusing to put") as e:
        p.launch(req)
    assert SECRET not in str(e.value) and fake.instances == {}


# ---- config, check, secrets ---------------------------------------------------------------
def test_missing_options_name_the_field(fake: Any) -> None:
    creds = gcp_credentials(SECRET)
    with pytest.raises(SpecError, match=r"providers\[\]\.options\.project") as e:
        gcp.open_catalog(ProviderConfig("gcp"), credentials=creds)
    assert e.value.hint and "project:" in e.value.hint
    with pytest.raises(SpecError, match=r"providers\[\]\.options\.image"):
        gcp.open_provisioner(ProviderConfig("gcp", options={"project": "p"}), credentials=creds)


def test_missing_sdk_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    import google.cloud

    monkeypatch.setitem(sys.modules, "google.cloud.compute_v1", None)
    monkeypatch.delattr(google.cloud, "compute_v1", raising=False)
    with pytest.raises(ProviderUnavailable) as e:
        gcp.compute_v1()
    assert e.value.hint == "pip install 'spotwise[gcp]'"
    assert gcp.check().usable is False


def test_check_finds_the_sdk_without_importing_it(tmp_path: Path) -> None:
    """`spotwise check` answers in a fraction of a second: importing compute_v1 took 3 s."""
    code = (
        "import sys; from spotwise.providers import gcp; r = gcp.check(); "
        "print(r.reason.startswith('gcp: google-cloud-compute is not installed'), "
        "'google.cloud.compute_v1' in sys.modules)"
    )
    env = {**os.environ, "CLOUDSDK_CONFIG": str(tmp_path), "NO_GCE_CHECK": "True"}
    env["GCE_METADATA_HOST"] = "127.0.0.1:9"  # never the real metadata server
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "False"]


def _isolate_adc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # never the real metadata server


def test_check_without_credentials_is_unusable_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _isolate_adc(monkeypatch, tmp_path)
    monkeypatch.setattr("google.auth._default._get_gce_credentials", lambda *a, **k: (None, None))
    res = gcp.check()
    assert res.usable is False and "gcloud auth application-default login" in res.reason


def test_check_with_credentials_never_shows_secrets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _isolate_adc(monkeypatch, tmp_path)
    key = tmp_path / "adc.json"
    key.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "cid",
                "client_secret": SECRET,
                "refresh_token": SECRET,
                "quota_project_id": "proj-1",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "proj-1")
    res = gcp.check()
    assert res.usable and res.details["chain"].startswith("GOOGLE_APPLICATION_CREDENTIALS")
    assert res.details["project"] == "proj-1"
    assert SECRET not in repr(res)


def test_token_never_appears_in_logs_or_output(
    fake: Any, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    creds = gcp_credentials(SECRET)
    prov = gcp.open_provisioner(gcp_config(), credentials=creds)
    inst = prov.launch(request())
    prov.describe()
    prov.notices()
    fake.fail_next_insert = "QUOTA_EXCEEDED"
    with pytest.raises(ProviderError) as e:
        prov.launch(request("other"))
    prov.terminate([inst.instance_id])
    gcp.open_catalog(gcp_config(), credentials=creds).offers()
    sent = [c.request.headers.get("Authorization") for c in fake.rs.calls]
    assert f"Bearer {SECRET}" in sent  # the token was really used ...
    out = capsys.readouterr()
    seen = caplog.text + out.out + out.err + str(e.value) + repr(prov.clients) + repr(inst)
    assert SECRET not in seen  # ... and never shown


def test_importing_the_adapter_does_not_load_the_sdk() -> None:
    assert_import_loads_no_sdk("gcp", ("google.cloud", "google.auth", "google.api_core"))
