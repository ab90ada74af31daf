"""A trial whose working directory is missing: the error names the folder, not the program
(``cannot start '.../python3': No such file or directory`` sent users looking for Python)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from spotwise.errors import ProviderError
from spotwise.providers.base import LaunchRequest, Market, our_tags
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.replay import MarketClock, ReplayMarket
from spotwise.traces import TraceSet

T0 = 1_700_000_000.0


@pytest.fixture
def prov(tmp_path: Path) -> LocalProvisioner:
    traces = TraceSet(
        ["us-east-1a"], T0 + 10.0 * np.arange(4), np.ones((1, 4), dtype=bool),
        np.full((1, 4), 1.0), instance_type="p3.2xlarge", on_demand_price=5.0, gap_seconds=10.0,
    )  # fmt: skip
    market = ReplayMarket(traces)
    p = LocalProvisioner(
        market, MarketClock(T0, 100.0), notice_lead_s=20.0, notice_floor_wall_s=1.0,
        logs_dir=tmp_path / "logs", kill_grace_s=0.5, records_dir=tmp_path / "records",
    )  # fmt: skip
    yield p
    p.shutdown()


def _request(prov: LocalProvisioner, workdir: str) -> LaunchRequest:
    (offer,) = prov.market.offers(at=T0, market=Market.ON_DEMAND)
    tags = our_tags("job-1", "trial-1", "tok")
    return LaunchRequest(offer, (sys.executable, "-c", "pass"), {}, tags, "tok", workdir)


def test_a_missing_workdir_is_named_as_the_working_directory(
    prov: LocalProvisioner, tmp_path: Path
) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(ProviderError) as info:
        prov.launch(_request(prov, str(missing)))
    assert str(info.value) == (
        f"local: cannot start {sys.executable!r}: its working directory {missing} does not exist"
    )  # was "cannot start '…/python3': No such file or directory"
    assert prov.describe() == []


def test_a_workdir_that_is_a_file_is_named_too(prov: LocalProvisioner, tmp_path: Path) -> None:
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    with pytest.raises(ProviderError) as info:
        prov.launch(_request(prov, str(afile)))
    assert str(info.value) == (
        f"local: cannot start {sys.executable!r}: its working directory {afile} is not a folder"
    )
