"""The append-only records of the ``Store``: observations, events and the price cache.

Each is written once and read back in the order recorded, never updated — unlike the jobs,
trials and instances of :mod:`spotwise.store.repo`, whose state changes. :class:`Records` is
a base class of :class:`~spotwise.store.repo.Store` (import ``Store``, not this): it needs only
the ``engine``, and like every store method each of its methods runs in its own session scope
and returns detached rows.
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from spotwise.store.db import session_scope
from spotwise.store.models import Event, Observation, PriceCache, to_json
from spotwise.store.rows import plain, price_rows


class Records:
    """Observations, events and cached prices over ``self.engine`` (see the module docstring)."""

    engine: Engine

    def _scope(self, action: str) -> AbstractContextManager[Session]:
        return session_scope(self.engine, action)

    # --- observations -------------------------------------------------------------------------

    def add_observation(
        self,
        trial_id: str,
        step: int,
        metric: float,
        wall_time: float,
        market_time: float | None = None,
        instance_id: str | None = None,
    ) -> Observation:
        obs = Observation(
            trial_id=trial_id,
            step=int(step),
            metric=float(metric),
            wall_time=float(wall_time),
            market_time=None if market_time is None else float(market_time),
            instance_id=instance_id,
        )
        with self._scope(f"adding an observation to trial {trial_id!r}") as s:
            s.add(obs)
        return obs

    def observations(self, trial_id: str) -> list[Observation]:
        """Every observation of the trial in the order recorded (re-reported steps included)."""
        with self._scope("reading observations") as s:
            stmt = select(Observation).where(Observation.trial_id == trial_id)
            return list(s.exec(stmt.order_by(col(Observation.id))))

    def curve(self, trial_id: str) -> list[tuple[int, float]]:
        """(step, metric) by step; where a step was reported twice, the newest report wins."""
        latest: dict[int, float] = {}
        for obs in self.observations(trial_id):
            latest[obs.step] = obs.metric
        return sorted(latest.items())

    # --- events -------------------------------------------------------------------------------

    def add_event(
        self,
        job_id: str,
        kind: str,
        time: float,
        trial_id: str | None = None,
        instance_id: str | None = None,
        **detail: Any,
    ) -> Event:
        ev = Event(
            job_id=job_id,
            trial_id=trial_id,
            instance_id=instance_id,
            time=float(time),
            kind=str(plain(kind)),
            detail_json=to_json(detail),
        )
        with self._scope(f"recording a {kind!s} event") as s:
            s.add(ev)
        return ev

    def events(
        self, job_id: str, kind: str | None = None, after_id: int | None = None
    ) -> list[Event]:
        """The job's events in the order recorded; ``after_id`` to tail new ones."""
        with self._scope("reading events") as s:
            stmt = select(Event).where(Event.job_id == job_id)
            if kind is not None:
                stmt = stmt.where(Event.kind == str(plain(kind)))
            if after_id is not None:
                stmt = stmt.where(col(Event.id) > after_id)
            return list(s.exec(stmt.order_by(col(Event.id))))

    # --- price cache --------------------------------------------------------------------------

    def cache_prices(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Insert price rows (keys: provider, region, zone, instance_type, market,
        price_per_hour, observed_at, fetched_at=now); returns how many were stored."""
        values = price_rows(rows, now=_time.time())
        if not values:
            return 0
        with self._scope("caching prices") as s:
            s.execute(sa.insert(PriceCache), values)
        return len(values)

    def cached_prices(
        self,
        provider: str,
        region: str | None = None,
        instance_type: str | None = None,
        market: str | None = None,
        max_age_s: float | None = None,
        *,
        now: float | None = None,
    ) -> list[PriceCache]:
        """Cached prices, by observed_at; ``max_age_s`` keeps rows fetched within that many
        seconds of ``now`` (default: the wall clock)."""
        with self._scope("reading cached prices") as s:
            stmt = select(PriceCache).where(PriceCache.provider == provider)
            if region is not None:
                stmt = stmt.where(PriceCache.region == region)
            if instance_type is not None:
                stmt = stmt.where(PriceCache.instance_type == instance_type)
            if market is not None:
                stmt = stmt.where(PriceCache.market == plain(market))
            if max_age_s is not None:
                cutoff = (_time.time() if now is None else now) - max_age_s
                stmt = stmt.where(col(PriceCache.fetched_at) >= cutoff)
            stmt = stmt.order_by(col(PriceCache.observed_at), col(PriceCache.id))
            return list(s.exec(stmt))
