"""`check`, `catalog`, `prices`, `--help` and `--version` as a user meets them: the local
market's prices say at which market time they are (the same "now" as the price history and the
revocation forecast), a filter that leaves nothing is one error, a command without a job spec
names the environment variable a provider needs, flags show no value placeholder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from spotwise import cloud
from spotwise.errors import NotFoundError, ProviderUnavailable, SpecError
from spotwise.providers.registry import CheckResult

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTWISE_", "AZURE_"))}
    return subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", *args],
        env={**base, "COLUMNS": "80", **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: ") and len(lines) <= 2, done.stderr
    assert len(lines) == 1 or lines[1].startswith("hint: "), done.stderr
    return lines


# ---- --help and --version --------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["status", "--help"],
        ["prices", "--help"],
        ["check", "--help"],
        ["tune", "--help"],
        ["predictor", "forecast", "--help"],
        ["simulate", "--help"],
    ],
)
def test_flags_show_no_value_placeholder(args: list[str]) -> None:
    from spotwise.cli.app import app

    done = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    assert "--help" in done.output
    assert "<bool>" not in done.output, done.output
    if args[0] in ("status", "prices", "check"):
        line = next(ln for ln in done.output.splitlines() if ln.startswith("│ --json "))
        assert line.split("--json", 1)[1].split()[0] == "Print", line  # the help, no type
    if args[0] == "prices":
        assert "<int range>" in done.output  # options that take a value still show its type


def test_version_prints_the_package_version_fast() -> None:
    from importlib.metadata import version

    from spotwise.cli.app import app

    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0 and done.output == f"spotwise {version('spotwise')}\n"
    probe = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "spotwise.cli.app", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert probe.returncode == 0 and probe.stdout == f"spotwise {version('spotwise')}\n"
    heavy = {"torch", "sklearn", "boto3", "botocore", "sqlalchemy", "numpy", "scipy"}
    loaded = {
        ln.split("|")[-1].strip().split(".")[0] for ln in probe.stderr.splitlines() if "|" in ln
    }
    assert not (heavy & loaded), heavy & loaded


# ---- prices: which market time ---------------------------------------------------------------
def test_local_prices_history_and_forecast_share_the_market_time(tmp_path: Path) -> None:
    from spotwise.predictors.service import parse_at
    from spotwise.providers.replay import load_market_traces

    db = f"sqlite:///{tmp_path / 'state.db'}"
    now = parse_at(None, load_market_traces(cloud.LOCAL_TRACE))  # `predictor forecast`'s "now"
    prices = cloud.prices("local", db=db)
    assert prices["market_time"] == now == 1680436491.0  # 2023-04-02 11:54 UTC, the last tick
    assert {r["observed_at"] for r in prices["prices"]} == {now}
    hist = cloud.prices("local", instance_type="p3.2xlarge", history="6h", db=db)
    assert hist["history"] == {"start": now - 6 * 3600, "end": now}
    assert max(r["observed_at"] for r in hist["prices"]) == now
    # each zone's spot price now is the last point of its history
    last = {r["zone"]: r["price_per_hour"] for r in hist["prices"] if r["observed_at"] == now}
    spot = {r["zone"]: r["price_per_hour"] for r in prices["prices"] if r["market"] == "spot"}
    assert last == spot


def test_prices_title_names_the_market_time(tmp_path: Path) -> None:
    done = _cli("prices", "--limit", "3", env={"SPOTWISE_DB": f"sqlite:///{tmp_path / 's.db'}"})
    assert done.returncode == 0, done.stderr
    assert "local prices at market time 2023-04-02 11:54 UTC" in done.stdout.splitlines()[0]


# ---- check -------------------------------------------------------------------------------------
def test_check_rows_do_not_repeat_the_provider_name(monkeypatch: pytest.MonkeyPatch) -> None:
    def gcp_check() -> CheckResult:
        raise ProviderUnavailable(
            "gcp: no Application Default Credentials found",
            hint="run `gcloud auth application-default login`",
        )

    modules = {
        "gcp": SimpleNamespace(check=gcp_check),
        "azure": SimpleNamespace(
            check=lambda: CheckResult("azure", False, "azure: no Azure credential resolved")
        ),
        "aws": SimpleNamespace(check=lambda: CheckResult("aws", True, "credentials from env")),
    }
    monkeypatch.setattr(cloud, "cloud_module", lambda name: modules[name])
    reasons = {
        p["provider"]: p["reason"] for p in cloud.check(["gcp", "azure", "aws"])["providers"]
    }
    assert reasons == {
        "gcp": "no Application Default Credentials found; "
        "run `gcloud auth application-default login`",
        "azure": "no Azure credential resolved",
        "aws": "credentials from env",
    }


# ---- catalog: a filter that leaves nothing ----------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--min-vcpus", "64"],
            "error: local: no instance type has 64 vCPUs or more in its regions (the most: 8); "
            "lower --min-vcpus",
        ),
        (
            ["--gpu", "V100", "--min-vcpus", "64"],
            "error: local: no instance type with GPU 'V100' has 64 vCPUs or more in its "
            "regions (the most: 8); lower --min-vcpus",
        ),
        (
            ["--gpu", "A100"],
            "error: local: no instance type with GPU 'A100' in its regions (did you mean "
            "'V100'?); GPUs there: V100",
        ),
    ],
)
def test_catalog_filter_that_leaves_nothing_is_one_error_exit_3(
    args: list[str], message: str
) -> None:
    for extra in ([], ["--json"]):
        done = _cli("catalog", *args, *extra)
        assert done.returncode == 3, (done.stdout, done.stderr)
        assert _error_lines(done) == [message] and done.stdout == ""


def test_catalog_filters_that_match_still_list() -> None:
    out = cloud.catalog("local", gpu="V100", min_vcpus=8)
    assert {r["name"] for r in out["instance_types"]} == {"p3.2xlarge"}
    with pytest.raises(NotFoundError, match=r"the most: 8\); lower --min-vcpus$"):
        cloud.catalog("local", min_vcpus=9)


# ---- a provider option without a job spec ------------------------------------------------------
AZURE_ERROR = [
    "error: azure: needs a subscription id: set AZURE_SUBSCRIPTION_ID (catalog and prices "
    "read no job spec)",
    "hint: export AZURE_SUBSCRIPTION_ID=00000000-0000-0000-0000-000000000000",
]


@pytest.mark.parametrize("command", ["catalog", "prices"])
def test_azure_without_a_subscription_names_the_variable(command: str, tmp_path: Path) -> None:
    done = _cli(command, "-p", "azure", env={"SPOTWISE_DB": f"sqlite:///{tmp_path / 's.db'}"})
    assert done.returncode == 2, done.stderr
    assert _error_lines(done) == AZURE_ERROR
    assert "providers[]" not in done.stderr


def test_gcp_project_and_unknown_options_without_a_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    def open_catalog(config: Any) -> Any:
        raise SpecError(
            "providers[].options.project: required for gcp (no project in the options or in "
            "the credentials)",
            hint="add `project: my-project-id` under the gcp provider's options",
        )

    monkeypatch.setattr(
        cloud, "cloud_module", lambda name: SimpleNamespace(open_catalog=open_catalog)
    )
    with pytest.raises(SpecError) as got:
        cloud.catalog("gcp")
    assert got.value.message == (
        "gcp: needs a project: set GOOGLE_CLOUD_PROJECT (catalog and prices read no job spec)"
    )
    assert got.value.hint == "export GOOGLE_CLOUD_PROJECT=my-project-id"
    other = cloud._without_spec("azure", SpecError("providers[].options.base_url: bad", hint="h"))
    assert other.message == (
        "providers[].options.base_url: bad (a job-spec option: catalog and prices cannot set it)"
    )
    assert other.hint == "h"


# ---- footers: singular and plural ------------------------------------------------------------
def _footer(monkeypatch: pytest.MonkeyPatch, draw: Any) -> str:
    from rich.console import Console

    from spotwise.cli import cloud as cloud_cli

    console = Console(width=80, record=True, color_system=None)
    monkeypatch.setattr(cloud_cli, "_console", lambda: console)
    draw(cloud_cli)
    return console.export_text().splitlines()[-1]


def _price(zone: str, available: bool) -> dict[str, Any]:
    return {"zone": zone, "instance_type": "p3.2xlarge", "market": "spot", "price_per_hour": 1.0,
            "on_demand_price_per_hour": 3.06, "savings": 0.67, "gpus": 1, "gpu_name": "V100",
            "available": available}  # fmt: skip


@pytest.mark.parametrize(
    ("zones", "footer"),
    [
        ({"a": False}, "1 price · 1 spot offer has no capacity now (listed last)"),
        ({"a": True, "b": False}, "2 prices · 1 spot offer has no capacity now (listed last)"),
        ({"a": False, "b": False}, "2 prices · 2 spot offers have no capacity now (listed last)"),
        ({"a": True, "b": True}, "2 prices"),
    ],
)
def test_prices_footer_counts_agree_in_number(
    zones: dict[str, bool], footer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = {
        "provider": "local",
        "region": None,
        "prices": [_price(z, a) for z, a in zones.items()],
    }
    assert _footer(monkeypatch, lambda c: c._print_prices(result)) == footer


def test_catalog_footer_counts_agree_in_number(monkeypatch: pytest.MonkeyPatch) -> None:
    row = {"region": "r", "name": "p3.2xlarge", "vcpus": 8, "memory_gb": 61.0, "gpus": 1,
           "gpu_name": "V100", "architecture": "x86_64",
           "on_demand_price_per_hour": 3.06}  # fmt: skip
    for rows, footer in (([row], "1 instance type"), ([row, row], "2 instance types")):
        result = {"provider": "local", "region": "r", "instance_types": rows}
        assert _footer(monkeypatch, lambda c, r=result: c._print_catalog(r)) == footer
