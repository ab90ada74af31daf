"""The ``Store``: repository methods over the spotwise tables, and nothing else.

No cost math and no policy here: callers compute, the store records. Every method runs in
its own session scope (commit on success, rollback + StoreError on a database error) and
returns plain, detached rows whose attributes stay readable after the session closes.
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Self, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, col, select

from spotwise.errors import ConfigError, NotFoundError
from spotwise.store.db import (
    check_existing_sqlite,
    default_url,
    make_engine,
    migrate,
    session_scope,
    sqlite_path,
)
from spotwise.store.models import (
    INSTANCE_REQUESTED,
    TERMINAL_INSTANCE_STATES,
    Event,
    InstanceRow,
    Job,
    JobState,
    Observation,
    PriceCache,
    Trial,
    TrialState,
    new_id,
    to_json,
)
from spotwise.store.rows import (
    assign,
    coerce_state,
    find_by_id_or_prefix,
    instance_state,
    plain,
    price_rows,
)

RowT = TypeVar("RowT", bound=SQLModel)


class Store:
    """Repository over one database. Open with :meth:`open` (creates and migrates) or
    :meth:`open_existing` (read-only commands: never creates a SQLite file)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    def open(cls, url: str | None = None) -> Self:
        """Open (creating if needed) the database at ``url`` (see ``default_url``) and run
        ``alembic upgrade head``; safe when several processes open a fresh database at once."""
        url = default_url(url)
        engine = make_engine(url)
        path = sqlite_path(engine.url)
        if path is not None and not path.parent.is_dir():
            # a typo in --db must not create a folder tree and a fresh, empty database there
            raise ConfigError(
                f"--db: the folder {path.parent} does not exist",
                hint="create it first, or fix the path in --db / SPOTWISE_DB",
            )
        return cls._migrated(engine)

    @classmethod
    def open_existing(cls, url: str | None = None) -> Self:
        """Like :meth:`open`, but a SQLite file that does not exist, or holds no spotwise
        schema (empty, not SQLite, no ``job`` table), is a NotFoundError and is neither created
        nor changed (:func:`~spotwise.store.db.check_existing_sqlite`)."""
        url = default_url(url)
        engine = make_engine(url)
        path = sqlite_path(engine.url)
        if path is not None:
            try:
                check_existing_sqlite(path)
            except NotFoundError:
                engine.dispose()
                raise
        return cls._migrated(engine)

    @classmethod
    def _migrated(cls, engine: Engine) -> Self:
        try:
            migrate(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    @property
    def url(self) -> str:
        """The database URL, without its password."""
        return self.engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def _scope(self, action: str) -> AbstractContextManager[Session]:
        return session_scope(self.engine, action)

    def _get(self, model: type[RowT], key: str, what: str, prefix: str, hint: str) -> RowT:
        with self._scope(f"reading {what} {key!r}") as s:
            return find_by_id_or_prefix(s, model, key, prefix, what, hint)

    def _update(self, model: type[RowT], key: str, what: str, fields: Mapping[str, Any]) -> RowT:
        with self._scope(f"updating {what} {key!r}") as s:
            row = s.get(model, key)
            if row is None:
                raise NotFoundError(f"{what} {key!r} not found")
            assign(row, fields, what)
            s.add(row)
            s.flush()
            return row

    # --- jobs ---------------------------------------------------------------------------------

    def create_job(
        self,
        name: str,
        spec_json: str,
        spec_path: str,
        policy: str,
        direction: str,
        *,
        created_at: float | None = None,
        job_id: str | None = None,
    ) -> Job:
        job = Job(
            id=job_id or new_id("j"),
            name=name,
            spec_json=spec_json,
            spec_path=spec_path,
            policy=policy,
            state=JobState.PENDING,
            created_at=_time.time() if created_at is None else created_at,
            direction=direction,
        )
        with self._scope("creating a job") as s:
            s.add(job)
        return job

    def get_job(self, job_id: str) -> Job:
        """A job by id or by a unique prefix of its id (with or without ``j-``)."""
        return self._get(Job, job_id, "job", "j", "list jobs with `spotwise status`")

    def latest_job(self) -> Job | None:
        with self._scope("reading the latest job") as s:
            stmt = select(Job).order_by(col(Job.created_at).desc(), col(Job.id).desc()).limit(1)
            return s.exec(stmt).first()

    def list_jobs(self, limit: int = 20) -> list[Job]:
        """Newest first."""
        with self._scope("listing jobs") as s:
            stmt = select(Job).order_by(col(Job.created_at).desc(), col(Job.id).desc())
            return list(s.exec(stmt.limit(limit)))

    def update_job(self, job_id: str, **fields: Any) -> Job:
        if "state" in fields:
            fields["state"] = coerce_state(JobState, fields["state"], "job")
        return self._update(Job, job_id, "job", fields)

    # --- trials -------------------------------------------------------------------------------

    def add_trial(
        self,
        job_id: str,
        number: int,
        params: Mapping[str, Any],
        *,
        created_at: float | None = None,
        trial_id: str | None = None,
    ) -> Trial:
        trial = Trial(
            id=trial_id or new_id("t"),
            job_id=job_id,
            number=number,
            params_json=to_json(dict(params)),
            state=TrialState.PENDING,
            created_at=_time.time() if created_at is None else created_at,
        )
        with self._scope(f"adding trial {number} to job {job_id!r}") as s:
            s.add(trial)
        return trial

    def get_trial(self, trial_id: str) -> Trial:
        """A trial by id or by a unique prefix of its id (with or without ``t-``)."""
        return self._get(Trial, trial_id, "trial", "t", "list trials with `spotwise trials JOB`")

    def list_trials(self, job_id: str) -> list[Trial]:
        """The job's trials by number."""
        with self._scope("listing trials") as s:
            stmt = select(Trial).where(Trial.job_id == job_id).order_by(col(Trial.number))
            return list(s.exec(stmt))

    def update_trial(self, trial_id: str, **fields: Any) -> Trial:
        if "state" in fields:
            fields["state"] = coerce_state(TrialState, fields["state"], "trial")
        return self._update(Trial, trial_id, "trial", fields)

    # --- instances (launch attempts) ----------------------------------------------------------

    def record_launch(
        self,
        *,
        job_id: str,
        trial_id: str,
        provider: str,
        region: str,
        zone: str,
        instance_type: str,
        market: str,
        offer_key: str,
        price_per_hour: float,
        tags: Mapping[str, str] | None = None,
        requested_at: float | None = None,
        id: str | None = None,
        **fields: Any,
    ) -> InstanceRow:
        """Record a launch (state ``requested``) BEFORE calling the cloud; ``id`` is our launch
        id (the request's client token), generated when not given. Any other column may be
        given in ``fields``."""
        row = InstanceRow(
            id=id or new_id("l"),
            job_id=job_id,
            trial_id=trial_id,
            provider=provider,
            region=region,
            zone=zone,
            instance_type=instance_type,
            market=plain(market),
            offer_key=offer_key,
            price_per_hour=price_per_hour,
            state=INSTANCE_REQUESTED,
            tags_json=to_json(dict(tags or {})),
            requested_at=_time.time() if requested_at is None else requested_at,
        )
        if "state" in fields:
            fields["state"] = instance_state(fields["state"])
        assign(row, fields, "instance")
        with self._scope(f"recording launch {row.id!r}") as s:
            s.add(row)
        return row

    def update_instance(self, instance_id: str, **fields: Any) -> InstanceRow:
        if "state" in fields:
            fields["state"] = instance_state(fields["state"])
        if "tags" in fields:
            fields["tags_json"] = to_json(dict(fields.pop("tags")))
        return self._update(InstanceRow, instance_id, "instance", fields)

    def get_instance(self, instance_id: str) -> InstanceRow:
        with self._scope(f"reading instance {instance_id!r}") as s:
            row = s.get(InstanceRow, instance_id)
            if row is None:
                raise NotFoundError(f"instance {instance_id!r} not found")
            return row

    def list_instances(
        self, job_id: str | None, active_only: bool = False, *, ended_since: float | None = None
    ) -> list[InstanceRow]:
        """The job's launches (every job's when ``job_id`` is None), oldest first;
        ``active_only``: state not terminal; ``ended_since``: ended after that time (strictly:
        report windows are half-open, ``(start, end]``: a life ending on a boundary is in one)."""
        with self._scope("listing instances") as s:
            stmt = select(InstanceRow)
            if job_id is not None:
                stmt = stmt.where(InstanceRow.job_id == job_id)
            if ended_since is not None:
                stmt = stmt.where(col(InstanceRow.ended_at) > ended_since)
            if active_only:
                stmt = stmt.where(col(InstanceRow.state).not_in(sorted(TERMINAL_INSTANCE_STATES)))
            stmt = stmt.order_by(col(InstanceRow.requested_at), col(InstanceRow.id))
            return list(s.exec(stmt))

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
