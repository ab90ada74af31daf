"""GCP and Azure refuse a mistyped region or instance type before the job is recorded
(:mod:`spotwise.planner.preflight`, as ``tests/orchestrator/test_preflight.py`` checks for AWS):
exit 2, one line with "did you mean", no job row, nothing created on the cloud.

Before, neither cloud checked these names: the job was recorded and ran on with no offer at all,
polling the API for ever. Names come from the price catalog without an API call; a name it lacks
is looked up through the Compute API (GCP machine types and the zones they are listed in, Azure
resource SKUs), so a real region or machine type the shipped catalog lacks still passes.

The real google-cloud-compute and azure-mgmt-compute clients run against the fakes of
``tests/fixtures`` (served through ``responses``, nothing leaves the process)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import pytest
import responses
import yaml
from cloudfakes import GCP_IMAGE, AzureCredential, azure_config, fake_arm, fake_gce, gcp_credentials
from shared_helpers import preflight_spec, tune_refused, write_job_yaml

from spotwise.planner.backend import Backend, open_backend
from spotwise.planner.preflight import preflight
from spotwise.spec import load_spec
from spotwise.store import Store

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.timeout(120),  # before the checks, a mistyped name ran a job that never ended
]

PROJECT = "proj-1"


# ---- the clouds ---------------------------------------------------------------------------------
class LocatedARM(fake_arm.FakeARM):
    """The ARM fake, its resource SKUs answering the ``location eq`` filter: eastus has the
    recorded SKUs, westeurope (a region the shipped price catalog lacks) copies of them, any
    other location none."""

    regions = ("eastus", "westeurope")

    def _skus(self, request: Any) -> tuple[int, dict[str, str], str]:
        status, headers, text = super()._skus(request)
        flt = unquote(" ".join(parse_qs(urlparse(request.url).query).get("$filter", [])))
        where = re.search(r"location eq '([^']+)'", flt)
        if where is None:
            return status, headers, text
        location = where.group(1)
        if location not in self.regions:
            return status, headers, json.dumps({"value": []})
        page = json.loads(text)
        if "nextLink" in page:  # the recorded link filters on eastus
            page["nextLink"] = page["nextLink"].replace("%27eastus%27", f"%27{location}%27")
        return status, headers, json.dumps(page).replace('"eastus"', json.dumps(location))


@pytest.fixture
def gcp_cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_gce.FakeGCE]:
    """The Compute Engine fake; the job's GCP clients get a fixed test token. Its machine type
    listing names zones in us-central1, us-east4, europe-west4 and asia-south2 (the last one
    without a machine type, and a region the shipped price catalog lacks)."""
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials",
        lambda: (gcp_credentials("ya29.preflight"), PROJECT),
    )
    fake = fake_gce.FakeGCE(project=PROJECT)
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        fake.install(rs)
        yield fake
    assert fake.instances == {}  # nothing was ever created
    assert not [c for c in rs.calls if c.request.method == "POST"]


@pytest.fixture
def azure_cloud(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocatedARM]:
    monkeypatch.setattr(
        "spotwise.providers.azure.default_credential", lambda: AzureCredential("preflight")
    )
    fake = LocatedARM()
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        fake.install(rs)
        yield fake
    assert fake.vms == {}  # nothing was ever created
    assert not [c for c in rs.calls if c.request.method == "PUT"]


def gcp_provider(**fields: Any) -> dict[str, Any]:
    opts = {"project": PROJECT, "image": GCP_IMAGE, "poll_s": "0.2"}
    return {
        "name": "gcp",
        "regions": ["us-central1"],
        "instance_types": ["e2-standard-2", "g2-standard-4"],
        "markets": ["spot"],
        "options": opts,
        **fields,
    }


def azure_provider(fake: LocatedARM, **fields: Any) -> dict[str, Any]:
    opts = {**azure_config(fake).options, "poll_s": "0.2"}
    opts.pop("artifacts")  # the trial channel defaults to the file:// checkpoint location
    return {
        "name": "azure",
        "regions": ["eastus"],
        "instance_types": ["Standard_E8s_v5", "Standard_NC4as_T4_v3"],
        "markets": ["spot"],
        "options": opts,
        **fields,
    }


# ---- the job ------------------------------------------------------------------------------------
def write_spec(tmp_path: Path, provider: dict[str, Any]) -> Path:
    location = (tmp_path / "ckpt").as_uri()
    spec = preflight_spec(
        tmp_path, providers=[provider], checkpoint={"every": 2, "location": location}
    )
    return write_job_yaml(tmp_path, spec)


def refused(tmp_path: Path, provider: dict[str, Any]) -> str:
    """Run `tune` (the core call); the SpecError's message, once checked that it is one line
    and that nothing was recorded or created (``shared_helpers``); without the spec's path,
    which it starts with (as load_spec's refusals do)."""
    path = write_spec(tmp_path, provider)
    return tune_refused(tmp_path, path).removeprefix(f"{path}: ")


def passes_preflight(
    tmp_path: Path, provider: dict[str, Any], rs: Any
) -> tuple[Backend, list[str]]:
    """Open the job's market and run its preflight (which must pass); return the market and
    the URLs of the API calls the preflight made."""
    spec = load_spec(write_spec(tmp_path, provider))
    backend = open_backend(spec, tmp_path, tmp_path / "runs")
    before = len(rs.calls)
    preflight(spec, backend, f"{spec.checkpoint.location}/j-preflight")
    return backend, [unquote(c.request.url) for c in list(rs.calls)[before:]]


# ---- GCP ----------------------------------------------------------------------------------------
def test_gcp_unknown_region_is_a_spec_error_before_the_job_starts(
    tmp_path: Path, gcp_cloud: Any
) -> None:
    provider = gcp_provider(regions=["us-central1", "us-centrl1"])
    assert refused(tmp_path, provider) == (
        "spec field 'providers.0.regions.1': gcp: unknown region 'us-centrl1' "
        "(did you mean 'us-central1'?)"
    )


def test_gcp_unknown_machine_type_is_a_spec_error_before_the_job_starts(
    tmp_path: Path, gcp_cloud: Any
) -> None:
    provider = gcp_provider(instance_types=["e2-standard-2", "e2-standrd-2"])
    assert refused(tmp_path, provider) == (
        "spec field 'providers.0.instance_types.1': gcp: unknown machine type 'e2-standrd-2' "
        "(did you mean 'e2-standard-2'?) in us-central1"
    )


def test_gcp_names_the_price_catalog_knows_pass_with_only_the_listing_the_offers_make(
    tmp_path: Path, gcp_cloud: Any
) -> None:
    """The names need no call; the offers are listed once (one machine type listing of the
    job's types, in two pages), and the job's first poll reuses that listing."""
    backend, calls = passes_preflight(tmp_path, gcp_provider(), gcp_cloud.rs)
    listing = (
        f"https://compute.googleapis.com/compute/v1/projects/{PROJECT}/aggregated/machineTypes"
    )
    names = 'filter=(name+=+"e2-standard-2")+OR+(name+=+"g2-standard-4")'
    assert calls == [f"{listing}?{names}", f"{listing}?pageToken=page-2&{names}"]
    before = len(gcp_cloud.rs.calls)
    assert backend.list_offers(backend.now())
    assert len(gcp_cloud.rs.calls) == before


def test_gcp_a_region_and_machine_type_only_the_api_lists_pass(
    tmp_path: Path, gcp_cloud: Any
) -> None:
    """asia-south2 and c3-standard-4 are real but not in the shipped price catalog: the Compute
    API lists them, so they pass (never offered without a price, as before), without the full
    machine type listing (every call names its machine types); the region's listing is the
    one the offers make, so listing them asks the API nothing more."""
    provider = gcp_provider(
        regions=["us-central1", "asia-south2"], instance_types=["e2-standard-2", "c3-standard-4"]
    )
    backend, calls = passes_preflight(tmp_path, provider, gcp_cloud.rs)
    assert calls and all("/aggregated/machineTypes?" in u and "filter=" in u for u in calls)
    before = len(gcp_cloud.rs.calls)
    offers = backend.list_offers(0.0)
    assert {o.instance_type for o in offers} == {"e2-standard-2"}  # c3: no price, not offered
    listed = [c for c in list(gcp_cloud.rs.calls)[before:] if "machineTypes" in c.request.url]
    assert listed == []


def test_gcp_a_machine_type_the_api_lists_but_the_price_catalog_does_not_price_is_refused(
    tmp_path: Path, gcp_cloud: Any
) -> None:
    """c3-standard-4 is real (the API lists it in us-central1-c), so the name check passes;
    the price catalog has no price for it, so it is never offered. Before, the job was
    recorded and polled for ever with no offer."""
    provider = gcp_provider(instance_types=["c3-standard-4"])
    assert refused(tmp_path, provider) == (
        "spec field 'providers.0': no gcp offer matches its filters (regions: us-central1; "
        "instance_types: c3-standard-4; markets: spot); gcp has no price for c3-standard-4 in "
        "us-central1 (it prices e2-standard-16, e2-standard-2, g2-standard-4, g2-standard-8, "
        "n2d-standard-48, n2d-standard-64, t2d-standard-16 there)"
    )


# ---- Azure --------------------------------------------------------------------------------------
def test_azure_unknown_region_is_a_spec_error_before_the_job_starts(
    tmp_path: Path, azure_cloud: LocatedARM
) -> None:
    provider = azure_provider(azure_cloud, regions=["eastus", "eastsu"])
    assert refused(tmp_path, provider) == (
        "spec field 'providers.0.regions.1': azure: unknown region 'eastsu' "
        "(did you mean 'eastus'?)"
    )


def test_azure_unknown_vm_size_is_a_spec_error_before_the_job_starts(
    tmp_path: Path, azure_cloud: LocatedARM
) -> None:
    provider = azure_provider(azure_cloud, instance_types=["Standard_E8s_v5", "Standard_NC6s_v4"])
    assert refused(tmp_path, provider) == (
        "spec field 'providers.0.instance_types.1': azure: unknown VM size 'Standard_NC6s_v4' "
        "(did you mean 'Standard_NC6s_v3'?) in eastus"
    )


def test_azure_names_the_price_catalog_knows_pass_with_only_the_listing_the_offers_make(
    tmp_path: Path, azure_cloud: LocatedARM
) -> None:
    """The names need no call; the offers are listed once (eastus's resource SKUs and retail
    prices), and the job's first poll reuses that listing."""
    backend, calls = passes_preflight(tmp_path, azure_provider(azure_cloud), azure_cloud.rs)
    assert calls and all("/skus?" in u or "/api/retail/prices?" in u for u in calls)
    assert len([u for u in calls if "/skus?" in u and "skiptoken" not in u]) == 1
    before = len(azure_cloud.rs.calls)
    assert backend.list_offers(backend.now())
    assert len(azure_cloud.rs.calls) == before


def test_azure_a_region_and_vm_size_only_the_api_lists_pass(
    tmp_path: Path, azure_cloud: LocatedARM
) -> None:
    """westeurope and Standard_B1s are not in the shipped price catalog: the resource SKUs of
    each region list them, so they pass; one SKU listing per region, the one the offers use."""
    provider = azure_provider(
        azure_cloud,
        regions=["eastus", "westeurope"],
        instance_types=["Standard_E8s_v5", "Standard_B1s"],
    )
    _, calls = passes_preflight(tmp_path, provider, azure_cloud.rs)
    firsts = [u for u in calls if "/skus?" in u and "skiptoken" not in u]
    assert sorted(re.findall(r"location eq '(\w+)'", " ".join(firsts))) == [
        "eastus",
        "westeurope",
    ]


def test_azure_a_vm_size_the_api_lists_but_no_price_is_known_for_is_refused(
    tmp_path: Path, azure_cloud: LocatedARM
) -> None:
    """Standard_NC6s_v3 is listed by eastus's resource SKUs, but the Retail Prices API has no
    price for it there: no offer, refused before the job is recorded."""
    provider = azure_provider(azure_cloud, instance_types=["Standard_NC6s_v3"])
    assert refused(tmp_path, provider) == (
        "spec field 'providers.0': no azure offer matches its filters (regions: eastus; "
        "instance_types: Standard_NC6s_v3; markets: spot); azure has no price for "
        "Standard_NC6s_v3 in eastus"
    )


def test_azure_spot_only_for_a_size_without_a_spot_price_is_refused(
    tmp_path: Path, azure_cloud: LocatedARM
) -> None:
    """Standard_B1s has an on-demand price in eastus but no spot price (nor spot capability):
    ``markets: [spot]`` leaves the job no offer; the message says what is offered."""
    provider = azure_provider(azure_cloud, instance_types=["Standard_B1s"], markets=["spot"])
    assert refused(tmp_path, provider) == (
        "spec field 'providers.0': no azure offer matches its filters (regions: eastus; "
        "instance_types: Standard_B1s; markets: spot); azure offers Standard_B1s in eastus only "
        "as on-demand"
    )


# ---- several clouds -----------------------------------------------------------------------------
@pytest.fixture
def both_clouds(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocatedARM]:
    """The Compute Engine and the ARM fakes behind one ``responses`` mock; yields the ARM fake
    (its ids name the Azure provider's options)."""
    monkeypatch.setattr(
        "spotwise.providers.gcp.default_credentials",
        lambda: (gcp_credentials("ya29.preflight"), PROJECT),
    )
    monkeypatch.setattr(
        "spotwise.providers.azure.default_credential", lambda: AzureCredential("preflight")
    )
    gce, arm = fake_gce.FakeGCE(project=PROJECT), LocatedARM()
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rs:
        gce.install(rs)
        arm.install(rs)
        yield arm
    assert gce.instances == {} and arm.vms == {}


def test_several_clouds_name_the_one_without_an_offer(
    tmp_path: Path, both_clouds: LocatedARM
) -> None:
    """GCP has offers, Azure (the second provider) none: the union is not empty, yet the job
    would never use Azure; its own share is checked, and its spec field is named."""
    azure = azure_provider(both_clouds, instance_types=["Standard_NC6s_v3"])
    spec = yaml.safe_load(write_spec(tmp_path, gcp_provider()).read_text())
    spec["providers"].append(azure)
    path = write_job_yaml(tmp_path, spec)
    assert tune_refused(tmp_path, path) == (
        f"{path}: spec field 'providers.1': no azure offer matches its filters (regions: eastus; "
        "instance_types: Standard_NC6s_v3; markets: spot); azure has no price for "
        "Standard_NC6s_v3 in eastus"
    )


# ---- the command --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cloud", "line"),
    [
        (
            "gcp",
            "error: spec field 'providers.0.instance_types.0': gcp: unknown machine type "
            "'g2-standrad-4' (did you mean 'g2-standard-4'?) in us-central1",
        ),
        (
            "azure",
            "error: spec field 'providers.0.regions.0': azure: unknown region 'estus' "
            "(did you mean 'eastus'?)",
        ),
    ],
)
def test_tune_exits_2_with_one_line(
    cloud: str,
    line: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``spotwise tune`` through the CLI's own entry point (in this process, where the fakes
    answer): exit 2, one `error:` line, no job recorded."""
    from spotwise.cli import app

    if cloud == "gcp":
        request.getfixturevalue("gcp_cloud")
        provider = gcp_provider(instance_types=["g2-standrad-4"])
    else:
        provider = azure_provider(request.getfixturevalue("azure_cloud"), regions=["estus"])
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("SPOTWISE_HOME", str(tmp_path))
    path = write_spec(tmp_path, provider)
    monkeypatch.setattr(sys, "argv", ["spotwise", "tune", str(path), "--db", db])
    with pytest.raises(SystemExit) as exit_info:
        app.main()
    assert exit_info.value.code == 2
    line = line.replace("error: ", f"error: {path}: ", 1)  # the spec's path, as load_spec's
    assert [x for x in capsys.readouterr().err.splitlines() if x.strip()] == [line]
    with Store.open(db) as store:
        assert store.list_jobs() == []


def test_gcp_a_policy_that_uses_a_forecast_is_told_there_is_none_on_a_cloud(
    tmp_path: Path, gcp_cloud: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """review-y F2: `spotwise`/`spottune` on a cloud ranked offers by price alone (every risk
    0) and nothing said so."""
    spec = load_spec(write_spec(tmp_path, gcp_provider()))
    with caplog.at_level("WARNING"):
        open_backend(spec, tmp_path, tmp_path / "runs")
    assert caplog.messages == []
    with caplog.at_level("WARNING"):
        open_backend(spec, tmp_path, tmp_path / "runs", forecast=True)
    (said,) = caplog.messages
    assert said.startswith("warning: this policy weighs each spot offer by a revocation")
    assert "on gcp every spot offer's risk is taken as 0" in said
