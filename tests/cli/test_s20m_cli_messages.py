"""review-am F13: a command-line --provider is named as the option in its errors, ``predictor
forecast --provider azure`` names the variable to set (it reads no job spec), a cloud
forecast's --json has the local one's keys, and ``curve fit`` prints a vanishing coefficient
as 0."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from spotwise.cli.app import app
from spotwise.errors import SpecError
from spotwise.predictors import service
from spotwise.providers import registry
from spotwise.providers.base import Market, Offer

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (["predictor", "forecast", "--provider", "awz"], " (did you mean 'aws'?)"),
        (["check", "-p", "foo"], ""),
        (["prices", "-p", "gpc"], " (did you mean 'gcp'?)"),
        (["catalog", "--provider", "azur"], " (did you mean 'azure'?)"),
    ],
)
def test_an_unknown_provider_option_is_named_as_the_option(
    args: list[str], suggestion: str
) -> None:
    res = runner.invoke(app, args)
    assert isinstance(res.exception, SpecError), res.output
    name = args[-1]
    assert res.exception.message == (
        f"--provider: unknown provider {name!r}{suggestion}; valid: local, aws, gcp, azure"
    )


def test_a_job_spec_keeps_its_own_provider_field() -> None:
    with pytest.raises(SpecError, match=r"^provider: unknown provider 'awz'"):
        registry.validate_name("awz")


def test_forecast_on_azure_without_a_subscription_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_subscription(config: Any) -> None:  # azure's own error, as its adapter raises it
        raise SpecError(
            "providers[].options.subscription_id: required for azure",
            hint="add `subscription_id: ...` under the azure provider's options "
            "(or set AZURE_SUBSCRIPTION_ID)",
        )

    fake = SimpleNamespace(open_catalog=no_subscription)
    monkeypatch.setattr(registry, "cloud_module", lambda name: fake)
    with pytest.raises(SpecError) as got:
        service.forecast("azure")
    assert got.value.message == (
        "azure: needs a subscription id: set AZURE_SUBSCRIPTION_ID (predictor forecast reads "
        "no job spec)"
    )
    assert got.value.hint == "export AZURE_SUBSCRIPTION_ID=00000000-0000-0000-0000-000000000000"
    assert "providers[]" not in got.value.message + (got.value.hint or "")


def test_cloud_forecast_json_has_the_local_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    offer = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 0.9, 3.06)
    catalog = SimpleNamespace(offers=lambda market: [offer])
    fake = SimpleNamespace(open_catalog=lambda config: catalog)
    monkeypatch.setattr(registry, "cloud_module", lambda name: fake)
    cloud = service.forecast("aws")
    # the local forecast's keys (service.forecast("local") takes 3 s to load its model)
    assert list(cloud) == ["provider", "at", "tick", "horizon_s", "model", "offers", "note"]
    assert cloud["tick"] is None and cloud["horizon_s"] is None and cloud["model"] is None
    assert cloud["offers"] == [
        {
            "zone": "us-east-1a",
            "instance_type": "p3.2xlarge",
            "price_per_hour": 0.9,
            "available": True,
            "p_revoke": None,
        }
    ]


@pytest.mark.parametrize(
    ("curve_id", "theta", "stage"),
    [
        ("0", "1", "1/(0·k² + 0·k − 0.173) + 76.88"),  # HEAD: − 4.411e-27·k
        ("20", "0.3", "1/(0·k² − 0.2328·k − 0.3911) + 59.46"),  # HEAD: −7.628e-230·k²
        ("60", "0.3", "1/(0·k² − 1.276e-11·k − 10.77) + 58.44"),  # 6e-11 of its scale: kept
    ],
)
def test_curve_fit_prints_a_vanishing_coefficient_as_zero(
    curve_id: str, theta: str, stage: str
) -> None:
    res = runner.invoke(
        app,
        ["curve", "fit", "builtin:lcbench-subset", "--curve-id", curve_id, "--theta", theta],
        env={"COLUMNS": "120"},
    )
    assert res.exit_code == 0, res.output
    assert f"  stage from step 1: {stage}\n" in res.output


def test_a_price_row_without_observed_at_is_not_cached(tmp_path: Any) -> None:
    """An offline catalog's price (observed_at None, review-am F13) is not a price seen now: the
    cache (observed_at NOT NULL) keeps only the rows that were."""
    import time

    from spotwise.price_rows import cache_rows, cached_rows, offer_row

    db = f"sqlite:///{tmp_path / 'p.db'}"
    now = time.time()  # the cache keeps what was fetched within a day of now
    live = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.SPOT, 0.9, 3.06)
    offline = Offer("aws", "us-east-1", "us-east-1a", "p3.2xlarge", Market.ON_DEMAND, 3.06, 3.06)
    rows = [offer_row("aws", live, now), offer_row("aws", offline, None)]
    assert rows[1]["observed_at"] is None
    assert cache_rows(rows, db, fetched_at=now) == 1
    got = cached_rows("aws", "us-east-1", None, None, db)
    assert [(r["market"], r["observed_at"]) for r in got] == [("spot", now)]
