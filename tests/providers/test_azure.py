"""Azure adapter through the real azure-mgmt-compute pipeline over a mocked HTTP transport."""

from __future__ import annotations

import base64
import json
import logging
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import responses
from cloudfakes import (
    AzureCredential,
    Launches,
    assert_import_loads_no_sdk,
    assert_registry_finds,
    azure_config,
    fake_arm,
    serve,
)
from forbidden import forbid

from spotwise.errors import CapacityError, ProviderError, ProviderUnavailable, SpecError
from spotwise.planner.runstate import write_control
from spotwise.providers import azure, azure_prices
from spotwise.providers.azure_catalog import AzureCatalog
from spotwise.providers.azure_launch import vm_name
from spotwise.providers.azure_provisioner import AzureProvisioner
from spotwise.providers.base import (
    TAG_JOB,
    TAG_LAUNCH,
    InstanceState,
    Market,
    NoticeKind,
    is_ours,
    our_tags,
)
from spotwise.providers.file_blobs import FileBlobs
from spotwise.providers.registry import ProviderConfig

SECRET = "eyJ0eXAiOiJKV1Qi.SPOTWISE-AZURE-TEST-TOKEN.must-never-appear"
LAUNCHES = Launches(
    "azure",
    zone="eastus-1",
    instance_type="Standard_NC4as_T4_v3",
    price_per_hour=0.062699,
    on_demand_price_per_hour=0.526,
    vcpus=4,
    memory_gb=28.0,
    gpu_name="T4",
    job="job-a",
    argv=("python", "train.py", "--name", "'; curl evil | sh #"),
    env={"SPOTWISE_TRIAL": "t1", "WEIRD": '$(reboot) `id` "x"'},
)
request = LAUNCHES.request


@pytest.fixture
def fake() -> Iterator[Any]:
    yield from serve(fake_arm.FakeARM)


@pytest.fixture
def catalog(fake: Any) -> AzureCatalog:
    return azure.open_catalog(azure_config(fake), credential=AzureCredential(SECRET))


@pytest.fixture
def prov(fake: Any) -> AzureProvisioner:
    return azure.open_provisioner(azure_config(fake), credential=AzureCredential(SECRET))


# ---- catalog ---------------------------------------------------------------------------------
def test_skus_give_hardware_zones_and_respect_restrictions(catalog: AzureCatalog) -> None:
    skus = {s.name: s for s in catalog.skus("eastus")}
    assert "Premium_LRS" not in skus  # not a VM
    assert "Standard_NC24ads_A100_v4" not in skus  # NotAvailableForSubscription here
    t4 = skus["Standard_NC4as_T4_v3"]
    assert (t4.vcpus, t4.memory_gb, t4.gpus, t4.gpu_name, t4.zones) == (
        4,
        28.0,
        1,
        "T4",
        ("1", "2"),
    )
    assert skus["Standard_NC6s_v3"].gpu_name == "V100"  # from the family
    assert skus["Standard_NV36ads_A10_v5"].zones == () and not skus["Standard_B1s"].spot_capable


def test_retail_prices_select_linux_payg_meters(fake: Any) -> None:
    items = azure_prices.fetch_items("eastus")
    assert len(items) == 13  # both pages
    chosen = azure_prices.select(items)
    assert (
        chosen[("Standard_NC4as_T4_v3", "eastus", "on-demand")][0] == 0.526
    )  # not Windows/DevTest/secondary
    assert (
        chosen[("Standard_NC4as_T4_v3", "eastus", "spot")][0] == 0.062699
    )  # newest, not Low Priority
    flt = fake.rs.calls[0].request.url
    assert "armRegionName" in flt and "Consumption" in flt


def test_offers_join_skus_with_live_prices(catalog: AzureCatalog) -> None:
    offers = catalog.offers(region="eastus")
    keys = {o.key for o in offers}
    assert "azure:eastus-1:Standard_NC4as_T4_v3:spot" in keys
    assert "azure:eastus-3:Standard_NC4as_T4_v3:spot" not in keys  # zone restricted
    assert "azure:eastus:Standard_NV36ads_A10_v5:spot" in keys  # regional size: zone = region
    assert (
        "azure:eastus-1:Standard_B1s:on-demand" in keys
        and "azure:eastus-1:Standard_B1s:spot" not in keys
    )
    assert not any("NC6s_v3" in k for k in keys)  # no price → not offered
    t4 = next(o for o in offers if o.key == "azure:eastus-2:Standard_NC4as_T4_v3:spot")
    assert (t4.price_per_hour, t4.on_demand_price_per_hour, t4.gpus) == (0.062699, 0.526, 1)
    assert all(
        o.market is Market.ON_DEMAND for o in catalog.offers("eastus", market=Market.ON_DEMAND)
    )


def test_price_history_is_dated_by_effective_start(catalog: AzureCatalog) -> None:
    points = catalog.price_history("eastus", "Standard_NC4as_T4_v3", 0, 4_000_000_000)
    assert {p.market for p in points} == {Market.SPOT, Market.ON_DEMAND}
    assert {p.timestamp for p in points} == {1759276800.0}  # 2025-10-01, the newest meter


def test_offline_catalog_uses_the_shipped_prices() -> None:
    cfg = ProviderConfig("azure", options={"subscription_id": "s", "offline": "true"})
    cat = azure.open_catalog(cfg)
    offers = cat.offers("westus3", ["Standard_NC4as_T4_v3"], Market.SPOT)
    assert [(o.zone, o.price_per_hour) for o in offers] == [("westus3", 0.05786)]
    assert all(r.source.startswith("skypilot-v6@") for r in azure_prices.load().rows)


def test_live_price_failure_falls_back_to_the_shipped_catalog(
    fake: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cat = azure.open_catalog(
        azure_config(fake, retail_prices_url="https://prices.azure.com/api/retail/prices-broken"),
        credential=AzureCredential(SECRET),
    )
    fake.rs.add(
        responses.GET,
        re.compile(r"https://prices\.azure\.com/api/retail/prices-broken.*"),
        status=503,
    )
    table = cat.prices("eastus")
    assert table is cat.fallback and "shipped Azure price catalog" in caplog.text


def test_refresh_writes_a_dated_catalog(fake: Any, tmp_path: Path) -> None:
    dest = azure_prices.refresh(
        tmp_path / "az.csv", regions=["eastus"], hardware={"Standard_E8s_v5": (8, 64.0, 0, "")}
    )
    table = azure_prices.load(dest)
    e8 = table.lookup("Standard_E8s_v5", "eastus")
    assert e8 is not None and (e8.on_demand, e8.spot, e8.vcpus, e8.as_of) == (
        0.504,
        0.05544,
        8,
        "2024-06-01",
    )
    assert table.lookup("Standard_B1s", "eastus").spot is None  # type: ignore[union-attr]


# ---- launch ----------------------------------------------------------------------------------
def test_launch_puts_a_spot_vm_and_polls_the_lro(prov: AzureProvisioner, fake: Any) -> None:
    inst = prov.launch(request())
    name = vm_name("launch-0001")
    assert inst.instance_id == name and inst.state is InstanceState.RUNNING
    assert is_ours(inst.tags) and "spotwise:price" not in inst.tags
    assert inst.offer.price_per_hour == 0.062699 and inst.offer.zone == "eastus-1"
    put = next(c for c in fake.rs.calls if c.request.method == "PUT")
    body = json.loads(put.request.body)
    props = body["properties"]
    assert (props["priority"], props["evictionPolicy"], props["billingProfile"]["maxPrice"]) == (
        "Spot",
        "Delete",
        -1.0,
    )
    assert body["zones"] == ["1"] and body["tags"][TAG_LAUNCH] == "launch-0001"
    assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    script = base64.b64decode(props["osProfile"]["customData"]).decode()
    assert "curl" not in script and "reboot" not in script
    payload = re.search(r"echo '([A-Za-z0-9+/=]+)' \| base64 -d", script).group(1)  # type: ignore[union-attr]
    spec = json.loads(base64.b64decode(payload))
    assert (
        spec["argv"][-1] == "'; curl evil | sh #" and spec["env"]["WEIRD"] == '$(reboot) `id` "x"'
    )
    assert sum("/operations/" in c.request.url for c in fake.rs.calls) == 2  # InProgress, Succeeded
    assert put.request.headers["Authorization"] == f"Bearer {SECRET}"


def test_launch_is_idempotent_by_client_token(prov: AzureProvisioner, fake: Any) -> None:
    a = prov.launch(request())
    b = prov.launch(request())
    assert a.instance_id == b.instance_id and len(fake.vms) == 1
    assert sum(c.request.method == "PUT" for c in fake.rs.calls) == 1


def test_allocation_failure_is_a_capacity_error(prov: AzureProvisioner, fake: Any) -> None:
    fake.fail_next_create = "AllocationFailed"
    with pytest.raises(CapacityError, match="AllocationFailed"):
        prov.launch(request())


def test_on_demand_launch_has_no_spot_fields(prov: AzureProvisioner, fake: Any) -> None:
    prov.launch(request(market=Market.ON_DEMAND, zone="eastus"))
    body = json.loads(next(c for c in fake.rs.calls if c.request.method == "PUT").request.body)
    assert "priority" not in body["properties"] and "zones" not in body


# ---- describe / terminate / notices ----------------------------------------------------------
def test_describe_lists_only_ours(prov: AzureProvisioner, fake: Any) -> None:
    fake.add_foreign("someone-elses-vm", {"owner": "me"})
    prov.launch(request("a"))
    prov.launch(request("b"))
    assert {i.tags[TAG_LAUNCH] for i in prov.describe()} == {"a", "b"}
    assert [i.tags[TAG_LAUNCH] for i in prov.describe({TAG_LAUNCH: "b"})] == ["b"]
    fresh = azure.open_provisioner(azure_config(fake), credential=AzureCredential(SECRET))
    assert len(fresh.describe({TAG_JOB: "job-a"})) == 2


def test_terminate_refuses_foreign_and_unknown(prov: AzureProvisioner, fake: Any) -> None:
    inst = prov.launch(request())
    fake.add_foreign("someone-elses-vm")
    for bad in ("someone-elses-vm", "never-existed", "../../x"):
        with pytest.raises(ProviderError, match="refusing"):
            prov.terminate([inst.instance_id, bad])
    assert len(fake.vms) == 2
    prov.terminate([inst.instance_id])
    assert list(fake.vms) == ["someone-elses-vm"]
    (gone,) = prov.describe()
    assert gone.state is InstanceState.TERMINATED
    prov.terminate([inst.instance_id])  # twice is harmless


@pytest.mark.parametrize("policy", ["Delete", "Deallocate"])
def test_eviction_is_a_notice_and_a_revocation(fake: Any, policy: str) -> None:
    prov = azure.open_provisioner(
        azure_config(fake, eviction_policy=policy), credential=AzureCredential(SECRET)
    )
    inst = prov.launch(request())
    assert prov.notices() == []
    fake.evict(inst.instance_id)
    (n,) = prov.notices()
    assert n.instance_id == inst.instance_id and n.kind is NoticeKind.INTERRUPTION
    assert prov.notices() == []
    (revoked,) = prov.describe()
    assert revoked.state is InstanceState.REVOKED
    # Deallocate: the VM (its disks) is still there until it is deleted
    assert revoked.holds_resource() is (policy == "Deallocate")
    if policy == "Deallocate":
        prov.terminate([inst.instance_id])
        assert fake.vms == {} and not prov.describe()[0].holds_resource()


@pytest.mark.parametrize("market", [Market.SPOT, Market.ON_DEMAND])
def test_a_vm_powered_off_from_inside_is_not_an_eviction_and_is_still_billed(
    prov: AzureProvisioner, fake: Any, market: Market
) -> None:
    """The agent's fallback ``shutdown -h now`` (or a user) leaves the VM ``stopped``: allocated
    and billed, not evicted (an eviction deallocates or deletes)."""
    inst = prov.launch(request(market=market, zone="eastus-1"))
    fake._set_power(inst.instance_id, "stopping")
    assert prov.notices() == []
    assert prov.describe()[0].state is InstanceState.STOPPING
    fake._set_power(inst.instance_id, "stopped")
    assert prov.notices() == []
    (stopped,) = prov.describe()
    assert stopped.state is InstanceState.TERMINATED and stopped.holds_resource()
    fresh = azure.open_provisioner(azure_config(fake), credential=AzureCredential(SECRET))
    assert [i.holds_resource() for i in fresh.describe({TAG_JOB: "job-a"})] == [True]
    assert fresh.notices() == []
    prov.terminate([inst.instance_id])
    assert fake.vms == {}
    (gone,) = prov.describe()
    assert gone.state is InstanceState.TERMINATED and not gone.holds_resource()


def test_another_jobs_vm_and_its_failing_folder_are_never_read(
    fake: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """notices() lists every spotwise VM of the resource group; only this job's trials are
    followed: another job's folder answering 403 must not break this one."""
    theirs_uri = (tmp_path / "theirs").as_uri()
    theirs = azure.open_provisioner(
        azure_config(fake, artifacts=theirs_uri), credential=AzureCredential(SECRET)
    )
    theirs.launch(replace(request("other"), tags=our_tags("job-b", "t1", "other")))
    cfg = azure_config(fake, artifacts=(tmp_path / "mine").as_uri())
    mine = azure.open_provisioner(cfg, credential=AzureCredential(SECRET))
    inst = mine.launch(request())
    calls = forbid(monkeypatch, theirs_uri)
    assert mine.notices() == [] and mine.progress(inst.instance_id) == []
    assert {i.tags[TAG_JOB] for i in mine.describe()} == {"job-a", "job-b"}
    assert [i.instance_id for i in mine.describe({TAG_JOB: "job-a"})] == [inst.instance_id]
    assert calls == []  # never opened, never read (a failing read is only logged, each poll)
    # a restarted controller still follows its own job's trials (from the VMs' tags)
    FileBlobs(tmp_path / "mine" / "job-a" / "t1").put(
        "agent-0.json", json.dumps({"state": "exited", "exit_code": 0}).encode()
    )
    fresh = azure.open_provisioner(cfg, credential=AzureCredential(SECRET))
    assert fresh.notices() == [] and {i.exit_code for i in fresh.describe()} == {None}
    assert [i.exit_code for i in fresh.describe({TAG_JOB: "job-a"})] == [0]
    assert calls == []


def test_the_registry_finds_the_adapter() -> None:
    assert_registry_finds("azure", azure)


def _launched_spec(fake: Any) -> dict[str, Any]:
    put = next(c for c in fake.rs.calls if c.request.method == "PUT")
    custom = json.loads(put.request.body)["properties"]["osProfile"]["customData"]
    script = base64.b64decode(custom).decode()
    payload = re.search(r"echo '([A-Za-z0-9+/=]+)' \| base64 -d", script).group(1)  # type: ignore[union-attr]
    return dict(json.loads(base64.b64decode(payload)))


def test_the_trial_channel_carries_events_notices_the_exit_and_stop_requests(
    fake: Any, tmp_path: Path
) -> None:
    """What the agent writes to the trial's artifacts folder comes back through progress,
    notices and describe (the agent's Preempt with its NotBefore deadline); the local stop and
    control files go the other way; a restarted controller finds the folder in the tags."""
    cfg = azure_config(fake, artifacts=tmp_path.as_uri())
    prov = azure.open_provisioner(cfg, credential=AzureCredential(SECRET))
    stop, control = tmp_path / "stop-1", tmp_path / "control-1.json"
    local = {"SPOTWISE_STOP_FILE": str(stop), "SPOTWISE_CONTROL_FILE": str(control)}
    req = replace(request(), env={**LAUNCHES.env, "SPOTWISE_ATTEMPT": "1", **local})
    inst = prov.launch(req)
    folder = FileBlobs(tmp_path / "job-a" / "t1")
    spec = _launched_spec(fake)
    assert (spec["artifacts"], spec["attempt"], spec["trial_id"]) == (folder.uri, 1, "t1")
    assert not set(local) & set(spec["env"])
    assert inst.tags["spotwise:artifacts"] == folder.uri and inst.tags["spotwise:attempt"] == "1"
    assert prov.progress(inst.instance_id) == [] and prov.notices() == []

    folder.put("events-1.jsonl", b'{"type": "report", "step": 1, "metric": 0.5}\n')
    assert prov.progress(inst.instance_id) == [{"type": "report", "step": 1, "metric": 0.5}]
    stop.touch()
    write_control(control, 3)
    assert prov.progress(inst.instance_id) == []
    assert folder.exists("stop-1") and folder.get("control-1.json")[0] == b'{"checkpoint_every": 3}'

    notice = {"kind": "interruption", "received_at": 10.0, "deadline": 45.0}
    status = {"state": "exited", "exit_code": 0, "notices": [notice]}
    folder.put("agent-1.json", json.dumps(status).encode())
    (n,) = prov.notices()
    assert (n.instance_id, n.received_at, n.deadline) == (inst.instance_id, 10.0, 45.0)
    assert prov.describe()[0].exit_code == 0
    # a restarted controller describing its job finds the folder in the tags (and hears of the
    # notice before it is given the exit that followed it)
    fresh = azure.open_provisioner(cfg, credential=AzureCredential(SECRET))
    fresh.describe({TAG_JOB: "job-a"})
    assert [x.instance_id for x in fresh.notices()] == [inst.instance_id]
    assert fresh.describe({TAG_JOB: "job-a"})[0].exit_code == 0
    fake.evict(inst.instance_id)
    assert prov.notices() == []  # the eviction the controller sees itself is the same one
    (gone,) = prov.describe()
    assert gone.state is InstanceState.REVOKED and gone.exit_code == 0


@pytest.mark.parametrize(
    ("checkpoint", "artifacts", "match"),
    [
        ("/home/me/ckpt/j/t", "", "checkpoint.location"),
        ("gs://bucket/ckpt/j/t", "", "checkpoint.location"),
        # artifacts only moves the channel: the checkpoints would still be on the VM's disk
        ("/home/me/ckpt/j/t", "az://acct/cont/runs", "checkpoint.location"),
        ("az://acct/cont/p", "s3://b/p", "options.artifacts"),
    ],
)
def test_a_launch_no_vm_can_report_from_is_refused_before_the_put(
    fake: Any, checkpoint: str, artifacts: str, match: str
) -> None:
    prov = azure.open_provisioner(
        azure_config(fake, artifacts=artifacts), credential=AzureCredential(SECRET)
    )
    req = replace(request(), env={**LAUNCHES.env, "SPOTWISE_CHECKPOINT_URI": checkpoint})
    with pytest.raises(ProviderError, match=re.escape(match)) as e:
        prov.launch(req)
    assert "\n" not in str(e.value) and SECRET not in str(e.value)
    assert "options.artifacts" in match or "Azure Blob storage nor a shared file://" in str(e.value)
    assert fake.vms == {} and not [c for c in fake.rs.calls if c.request.method == "PUT"]


def test_an_az_checkpoint_location_is_the_default_artifacts_folder(fake: Any) -> None:
    prov = azure.open_provisioner(
        azure_config(fake, artifacts=""), credential=AzureCredential(SECRET)
    )
    ckpt = "az://acct1/cont1/ckpt/job-a/t1"
    prov.launch(replace(request(), env={**LAUNCHES.env, "SPOTWISE_CHECKPOINT_URI": ckpt}))
    assert _launched_spec(fake)["artifacts"] == ckpt


def test_a_launch_env_with_a_credential_is_refused(prov: AzureProvisioner, fake: Any) -> None:
    req = replace(request(), env={**LAUNCHES.env, "AWS_SECRET_ACCESS_KEY": SECRET})
    with pytest.raises(ProviderError, match="refusing to put") as e:
        prov.launch(req)
    assert SECRET not in str(e.value) and fake.vms == {}


# ---- config, check, secrets ------------------------------------------------------------------
def test_missing_options_name_the_field(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    with pytest.raises(SpecError, match=r"options\.subscription_id"):
        azure.open_catalog(ProviderConfig("azure"), credential=AzureCredential(SECRET))
    for key in ("resource_group", "subnet_id", "image", "ssh_public_key"):
        opts = dict(azure_config(fake).options)
        del opts[key]
        with pytest.raises(SpecError, match=rf"providers\[\]\.options\.{key}") as e:
            azure.open_provisioner(
                ProviderConfig("azure", options=opts), credential=AzureCredential(SECRET)
            )
        assert e.value.hint and key in e.value.hint


def test_missing_sdk_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch, fake: Any) -> None:
    monkeypatch.setitem(sys.modules, "azure.mgmt.compute", None)
    with pytest.raises(ProviderUnavailable) as e:
        azure.open_catalog(azure_config(fake), credential=AzureCredential(SECRET))
    assert e.value.hint == "pip install 'spotwise[azure]'"
    assert azure.check(credential=AzureCredential(SECRET)).usable is False


def test_check_reports_the_chain_and_never_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
        "IDENTITY_ENDPOINT",
        "MSI_ENDPOINT",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AZURE_CLIENT_ID", "cid")
    monkeypatch.setenv("AZURE_TENANT_ID", "tid")
    monkeypatch.setenv("AZURE_CLIENT_SECRET", SECRET)
    cred = AzureCredential(SECRET)
    res = azure.check(credential=cred)
    assert (
        res.usable and cred.calls == 1 and res.details["chain"].startswith("EnvironmentCredential")
    )
    assert SECRET not in repr(res)

    class Failing:
        def get_token(self, *a: Any, **k: Any) -> Any:
            raise RuntimeError(f"refused {SECRET}")

    bad = azure.check(credential=Failing())  # the AZURE_* service principal got no token
    assert not bad.usable and "got no token (RuntimeError)" in bad.reason
    assert "AZURE_TENANT_ID" in bad.reason and SECRET not in repr(bad)


def test_token_never_appears_in_logs_or_output(
    fake: Any, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    logging.getLogger("azure").setLevel(logging.DEBUG)
    prov = azure.open_provisioner(azure_config(fake), credential=AzureCredential(SECRET))
    inst = prov.launch(request())
    prov.describe()
    prov.notices()
    fake.fail_next_create = "AllocationFailed"
    with pytest.raises(CapacityError) as e:
        prov.launch(request("other"))
    prov.terminate([inst.instance_id])
    azure.open_catalog(azure_config(fake), credential=AzureCredential(SECRET)).offers()
    assert any(c.request.headers.get("Authorization") == f"Bearer {SECRET}" for c in fake.rs.calls)
    out = capsys.readouterr()
    seen = caplog.text + out.out + out.err + str(e.value) + repr(inst) + repr(prov.describe())
    assert "'Authorization': 'REDACTED'" in caplog.text  # azure-core logged the headers ...
    assert SECRET not in seen  # ... and the token itself appears nowhere


def test_importing_the_adapter_does_not_load_the_sdk() -> None:
    assert_import_loads_no_sdk("azure", ("azure.", "requests"))
