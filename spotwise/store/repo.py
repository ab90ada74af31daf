"""The ``Store``: repository methods over the spotwise tables, and nothing else.

No cost math and no policy here: callers compute, the store records. Every method runs in
its own session scope (commit on success, rollback + StoreError on a database error) and
returns plain, detached rows whose attributes stay readable after the session closes. Here:
opening, and the rows whose state changes (jobs, trials); the launch records (instances) are
inherited from :mod:`spotwise.store.instances`, the append-only records (observations, events,
the price cache) from :mod:`spotwise.store.records`.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self, TypeVar
from urllib.parse import unquote

from sqlalchemy.engine import Engine
from sqlmodel import SQLModel, col, func, select

from spotwise.errors import ConfigError, NotFoundError, SpotwiseError
from spotwise.store.bills import BillReads, BillWrites
from spotwise.store.db import (
    check_existing_sqlite,
    default_url,
    in_memory_error,
    make_engine,
    migrate,
    redact,
    sqlite_path,
)
from spotwise.store.instances import InstanceRecords
from spotwise.store.models import Event, Job, JobState, Trial, TrialState, new_id, to_json
from spotwise.store.records import Records
from spotwise.store.rows import assign, coerce_state, find_by_id_or_prefix
from spotwise.store.status_reads import StatusReads
from spotwise.store.trial_writes import TrialWrites

RowT = TypeVar("RowT", bound=SQLModel)


class Store(Records, InstanceRecords, BillReads, BillWrites, StatusReads, TrialWrites):
    """Repository over one database. Open with :meth:`open` (creates and migrates) or
    :meth:`open_existing` (read-only commands: never creates a SQLite file). The append-only
    records (observations, events, the price cache) are :class:`Records`'s methods; the launch
    records (instances), :class:`InstanceRecords`'s; the
    report's reads, :class:`BillReads`'s; the compare-and-set bill writes (two cancels at
    once), :class:`BillWrites`'s; `spotwise status`'s counted reads, :class:`StatusReads`'s."""

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
            engine.dispose()
            raise ConfigError(
                f"--db: the folder {path.parent} does not exist",
                hint="create it first, or fix the path in --db / SPOTWISE_DB",
            )
        return cls._migrated(engine)

    @classmethod
    def open_existing(cls, url: str | None = None) -> Self:
        """Like :meth:`open`, but only a database that holds spotwise's schema opens: a SQLite
        file that does not exist or holds none (empty, not SQLite, no ``job`` table:
        :func:`~spotwise.store.db.check_existing_sqlite`), an in-memory SQLite URL, or any
        other database without spotwise's tables (a server's default ``postgres`` database)
        is a NotFoundError (exit 3), and nothing is created: no folder, no file, no table.
        An older spotwise schema is upgraded, as :meth:`open` does (README "State database")."""
        url = default_url(url, create=False)
        engine = make_engine(url)
        path = sqlite_path(engine.url)
        try:
            if engine.dialect.name == "sqlite" and path is None:
                raise in_memory_error(unquote(redact(url)))  # as typed: 'sqlite:///:memory:'
            if path is not None:
                check_existing_sqlite(path)
        except SpotwiseError:
            engine.dispose()
            raise
        try:
            migrate(engine, existing=True)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

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
        """The database URL, without its password (nor a password in its query string)."""
        from spotwise.store.db import redact

        return redact(self.engine.url)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    def _get(self, model: type[RowT], key: str, what: str, prefix: str, hint: str) -> RowT:
        with self._scope(f"reading {what} {key!r}") as s:
            return find_by_id_or_prefix(s, model, key, prefix, what, hint)

    def _update(
        self,
        model: type[RowT],
        key: str,
        what: str,
        fields: Mapping[str, Any],
        stamp: Callable[[Any, dict[str, Any]], None] | None = None,
    ) -> RowT:
        with self._scope(f"updating {what} {key!r}") as s:
            row = s.get(model, key)
            if row is None:
                raise NotFoundError(f"{what} {key!r} not found")
            if stamp is not None:  # fields the update adds from the row as it was
                fields = dict(fields)
                stamp(row, fields)
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

    def count_jobs(self) -> int:
        """How many jobs the store holds (:meth:`list_jobs` lists a page of them)."""
        with self._scope("counting jobs") as s:
            return int(s.exec(select(func.count()).select_from(Job)).one())

    def list_jobs(self, limit: int = 20) -> list[Job]:
        """Newest first."""
        with self._scope("listing jobs") as s:
            stmt = select(Job).order_by(col(Job.created_at).desc(), col(Job.id).desc())
            return list(s.exec(stmt.limit(limit)))

    def update_job(self, job_id: str, **fields: Any) -> Job:
        if "state" in fields:
            fields["state"] = coerce_state(JobState, fields["state"], "job")
        return self._update(Job, job_id, "job", fields)

    def update_job_if(self, job_id: str, states: Iterable[Any], **fields: Any) -> bool:
        """Set ``fields`` on the job only while its state is one of ``states`` (one UPDATE:
        compare-and-set, as :meth:`claim_job`); whether it was written (review-ax AX1)."""
        if states := [coerce_state(JobState, s, "job") for s in states]:
            return self.claim_job(job_id, {}, fields, where_state=states)
        return False

    def job_state(self, job_id: str) -> JobState:
        """The job's state alone (one small SELECT): its orchestrator hears a cancel so."""
        with self._scope(f"reading job {job_id!r}'s state") as s:
            state = s.exec(select(Job.state).where(col(Job.id) == job_id)).first()
        if state is None:
            raise NotFoundError(f"job {job_id!r} not found")
        return coerce_state(JobState, state, "job")  # type: ignore[no-any-return]

    def heartbeat(self, job_id: str, at: float) -> None:
        """Record that the job's orchestrator was alive at wall time ``at`` (``heartbeat_at``;
        one UPDATE, nothing read): see :class:`Heartbeat`."""
        from sqlalchemy import update

        stmt = update(Job).where(col(Job.id) == job_id).values(heartbeat_at=at)
        with self._scope(f"writing job {job_id!r}'s heartbeat") as s:
            s.exec(stmt.execution_options(synchronize_session=False))

    def claim_job(
        self,
        job_id: str,
        expected: Mapping[str, Any],
        fields: Mapping[str, Any],
        trials: Mapping[str, Mapping[str, Any]] | None = None,
        event: Mapping[str, Any] | None = None,
        where_state: list[JobState] | None = None,
    ) -> bool:
        """Set ``fields`` on the job, ``trials`` (trial id → fields) on its trials and add
        ``event`` (``kind``, ``time``, ``detail``), in one transaction, only if the job's
        columns still hold the ``expected`` values (its state, when it ended, its spend: a job
        resumed, cancelled again and back in the same state, or billed by a cancel since, is
        not the job a plan was read from; ``where_state``: or one of those states). Of two
        processes that read the same finished job and both try to take it over, exactly one
        gets True; the other changes nothing."""
        from sqlalchemy import update

        def coerced(values: Mapping[str, Any], states: Any, what: str) -> dict[str, Any]:
            out = dict(values)
            if "state" in out:
                out["state"] = coerce_state(states, out["state"], what)
            return out

        want = coerced(expected, JobState, "job")
        among = [col(Job.state).in_(where_state)] if where_state else []
        stmt = (
            update(Job)
            .where(col(Job.id) == job_id, *among, *(getattr(Job, k) == v for k, v in want.items()))
            .values(**coerced(fields, JobState, "job"))
            .execution_options(synchronize_session=False)
        )
        with self._scope(f"claiming job {job_id!r}") as s:
            if s.exec(stmt).rowcount != 1:
                return False
            for trial_id, changes in (trials or {}).items():
                row = s.get(Trial, trial_id)
                if row is None or row.job_id != job_id:
                    raise NotFoundError(f"trial {trial_id!r} of job {job_id!r} not found")
                assign(row, coerced(changes, TrialState, "trial"), "trial")
                s.add(row)
            if event is not None:
                s.add(
                    Event(
                        job_id=job_id,
                        time=float(event["time"]),
                        kind=str(event["kind"]),
                        detail_json=to_json(dict(event.get("detail", {}))),
                    )
                )
        return True

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
