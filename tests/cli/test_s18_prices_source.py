"""``spotwise prices``'s table names where its prices came from, always, in ``--json``'s words
(``source``: live, offline, mixed, replay or cache). It said so only for the cache: AWS's
on-demand prices read from the 2017 offline catalog, or the local replay's trace, looked like
prices asked of the cloud now."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from shared_helpers import no_aws_account_db
from typer.testing import CliRunner

from spotwise.cli.app import app
from spotwise.errors import ProviderError


def _both(*args: str) -> tuple[str, dict[str, Any]]:
    """The table (its words joined by one space: the caption wraps at the terminal's width)
    and the ``--json`` document of the same command."""
    runner = CliRunner()
    table = runner.invoke(app, list(args), catch_exceptions=True)
    assert table.exit_code == 0, (table.output, table.exception)
    doc = runner.invoke(app, [*args, "--json"], catch_exceptions=True)
    assert doc.exit_code == 0, (doc.output, doc.exception)
    out: dict[str, Any] = json.loads(doc.stdout)
    return " ".join(table.stdout.split()), out


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """No AWS credentials anywhere (the instance metadata service is never asked)."""
    return no_aws_account_db(monkeypatch, tmp_path)


def test_aws_offline_on_demand_prices_say_offline(db: str) -> None:
    pytest.importorskip("botocore")
    text, out = _both("prices", "--db", db, "-p", "aws", "-t", "p3.2xlarge", "--on-demand")
    assert out["source"] == "offline"
    assert text.startswith("aws us-east-1 prices (zones unknown) (source: offline) zone ")


def test_the_local_replay_says_replay(db: str) -> None:
    text, out = _both("prices", "--db", db, "-t", "p3.2xlarge", "--limit", "1")
    assert out["source"] == "replay"
    assert text.startswith("local prices at market time 2023-04-02 11:54 UTC (source: replay) ")


def test_the_cache_says_cache_and_why(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local prices cached by a first call, then the provider unreachable: the cache is
    read, and the title says so in --json's word with the error (as before: `cached: ...`)."""
    from spotwise import cloud

    _both("prices", "--db", db, "-t", "p3.2xlarge", "--spot", "--limit", "1")  # fills the cache

    def unreachable(provider: str, region: str | None = None) -> Any:
        raise ProviderError(f"{provider}: trace [server] unreachable")

    monkeypatch.setattr(cloud, "open_catalog", unreachable)
    text, out = _both("prices", "--db", db, "-t", "p3.2xlarge", "--spot", "--limit", "1")
    assert (out["source"], out["error"]) == ("cache", "local: trace [server] unreachable")
    # the error's brackets are text, not rich markup (they were dropped)
    assert text.startswith("local prices (source: cache; local: trace [server] unreachable) ")


@pytest.mark.parametrize("source", ["live", "offline", "mixed", "replay"])
def test_each_source_is_named_in_the_title(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from spotwise.cli import cloud as cloud_cli

    console = Console(width=80, record=True, color_system=None)
    monkeypatch.setattr(cloud_cli, "_console", lambda: console)
    row = {
        "zone": "us-east-1a",
        "instance_type": "p3.2xlarge",
        "market": "spot",
        "price_per_hour": 0.95,
        "on_demand_price_per_hour": 3.06,
        "savings": 0.69,
        "gpus": 1,
        "gpu_name": "V100",
    }
    result = {"provider": "aws", "region": "us-east-1", "source": source, "prices": [row]}
    cloud_cli._print_prices(result)
    title = console.export_text().splitlines()[0].strip()
    assert title == f"aws us-east-1 prices (source: {source})"
