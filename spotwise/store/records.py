"""The append-only records of the ``Store``: observations, events and the price cache.

Each is written once and read back in the order recorded, never updated — unlike the jobs,
trials and instances of :mod:`spotwise.store.repo`, whose state changes. :class:`Records` is
a base class of :class:`~spotwise.store.repo.Store` (import ``Store``, not this): it needs only
the ``engine``, and like every store method each of its methods runs in its own session scope
and returns detached rows.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time as _time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from types import FunctionType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from spotwise.store.db import session_scope
from spotwise.store.existing import DatabaseLocked
from spotwise.store.models import Event, Observation, PriceCache, to_json
from spotwise.store.rows import plain, price_rows

_log = logging.getLogger("spotwise.store")

#: How long, in all, a running job's store waits out another process's lock on the database
#: (a VACUUM, a backup, a stuck writer) before the write fails the job: each try waits one
#: busy timeout (SQLite) or ``lock_timeout`` (PostgreSQL), 30 s (review-ax AX2).
LOCK_PATIENCE_S = 300.0
#: Wall seconds between two tries (a lock reported at once is not tried again in a loop).
LOCK_RETRY_PAUSE_S = 1.0
#: Store methods that never wait a lock out: the heartbeat (a failed one is skipped,
#: :class:`~spotwise.store.heartbeat.Heartbeat`), and opening or closing the store.
IMPATIENT = frozenset({"heartbeat", "close", "open", "open_existing", "wait_out_locks"})


class Records:
    """Observations, events and cached prices over ``self.engine`` (see the module docstring)."""

    engine: Engine
    _lock_patience: tuple[str, float]  # (job id, seconds): set by wait_out_locks
    _lock_gave_up: bool  # set once a patient method gave up: each is tried once from then on

    def _scope(self, action: str) -> AbstractContextManager[Session]:
        return session_scope(self.engine, action)

    # --- a running job's patience with a held lock ----------------------------------------------

    def wait_out_locks(self, job_id: str, patience_s: float = LOCK_PATIENCE_S) -> None:
        """Opt in, for a running job's orchestrator (a command fails on one busy timeout): a
        store method that fails because another process holds the database locked
        (:class:`~spotwise.store.existing.DatabaseLocked`) is run again, a warning logged
        each time naming what waited and for how long, until it has waited ``patience_s`` in
        all; then it raises, naming ``job_id`` and `spotwise resume` (a new `tune` would pay
        for its trials again). Each method is one transaction, rolled back when it failed, so
        that running it again writes it once. Not :data:`IMPATIENT` ones (the heartbeat).

        Once one has given up, the store is impatient again (each method tried once, as a
        command's): the job is ending, and its drain, which terminates every running instance,
        must not wait a whole patience more per write (review-az AZ2: ~10 min more of every
        instance). Opting in again does not make it patient again."""
        first = "_lock_patience" not in self.__dict__
        self._lock_patience = (job_id, patience_s)
        if not first:
            return
        depth = threading.local()  # a patient method calling another: the outer one waits
        for name in dir(type(self)):
            raw = inspect.getattr_static(type(self), name, None)
            if name.startswith("_") or name in IMPATIENT or not isinstance(raw, FunctionType):
                continue  # private helpers, properties, classmethods
            setattr(self, name, self._patient(getattr(self, name), depth))

    def _patient(self, call: Callable[..., Any], depth: threading.local) -> Callable[..., Any]:
        @functools.wraps(call)
        def patient(*args: Any, **kwargs: Any) -> Any:
            if getattr(depth, "n", 0):
                return call(*args, **kwargs)
            depth.n = 1
            try:
                return self._waiting_out(call, args, kwargs)
            finally:
                depth.n = 0

        return patient

    def _waiting_out(self, call: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        job_id, patience_s = self._lock_patience
        if self.__dict__.get("_lock_gave_up"):  # the job is ending: its drain waits no more
            return call(*args, **kwargs)
        started = _time.monotonic()
        while True:
            try:
                return call(*args, **kwargs)
            except DatabaseLocked as e:
                waited = _time.monotonic() - started
                if waited >= patience_s:
                    self._lock_gave_up = True
                    raise gave_up(e, job_id, waited) from e
                _log.warning(
                    "%s: %s: another process holds the database's lock; waited %.0f s, "
                    "waiting again (the job fails after %.0f s)",
                    job_id,
                    e,
                    waited,
                    patience_s,
                )
            _time.sleep(LOCK_RETRY_PAUSE_S)

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
        obs = observation(trial_id, step, metric, wall_time, market_time, instance_id)
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


def gave_up(e: DatabaseLocked, job_id: str, waited: float) -> DatabaseLocked:
    """The error that fails a running job whose store waited a lock out for ``waited`` s:
    it names the job and `spotwise resume` (review-ax AX2: "retry in a moment" read as "run
    `tune` again", a new job that pays for its trials again)."""
    out = DatabaseLocked(
        f"job {job_id}: {e.message}, after waiting {waited:.0f} s for another process's lock",
        hint=f"once the database is free, `spotwise resume {job_id}` continues the job "
        f"(`spotwise status {job_id}` shows it; a new `spotwise tune` would pay for its "
        "trials again)",
    )
    out.job_id = job_id
    return out


def observation(
    trial_id: str,
    step: int,
    metric: float,
    wall_time: float,
    market_time: float | None = None,
    instance_id: str | None = None,
) -> Observation:
    """One reported (step, metric) as a row (:meth:`Records.add_observation`; the owner-checked
    :meth:`~spotwise.store.trial_writes.TrialWrites.add_observation_if_owner`)."""
    return Observation(
        trial_id=trial_id,
        step=int(step),
        metric=float(metric),
        wall_time=float(wall_time),
        market_time=None if market_time is None else float(market_time),
        instance_id=instance_id,
    )
