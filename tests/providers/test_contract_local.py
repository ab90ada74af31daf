"""The provider contract over the local provider: the replay market (a real SkyNomad spot
trace) as the catalog, child processes as instances."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from contract import CatalogAndProvisioner, ProviderContract

from spotwise.providers.local import LocalProvisioner
from spotwise.providers.replay import MarketClock, ReplayMarket, load_market_traces


class TestLocalContract(ProviderContract):
    @pytest.fixture
    def market(self) -> ReplayMarket:
        return ReplayMarket(load_market_traces("builtin:skynomad-v100-2023"))

    @pytest.fixture
    def provider(self, market: ReplayMarket, tmp_path: Path) -> Iterator[CatalogAndProvisioner]:
        clock = MarketClock(market.start_time, speedup=1.0)
        prov = LocalProvisioner(
            market,
            clock,
            notice_floor_wall_s=0.2,
            logs_dir=tmp_path / "logs",
            kill_grace_s=2.0,
            records_dir=tmp_path / "records",
        )
        yield market, prov
        prov.shutdown()

    @pytest.fixture
    def history_window(self, market: ReplayMarket) -> tuple[float, float]:
        return market.start_time, market.start_time + 6 * 3600

    @pytest.fixture
    def inject_notice(self, provider: CatalogAndProvisioner) -> Callable[[str], None]:
        prov = provider[1]
        assert isinstance(prov, LocalProvisioner)
        return prov.revoke_now
