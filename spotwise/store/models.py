"""Tables of the spotwise store, and the states of jobs and trials.

Conventions: ids are strings we generate (``j-`` jobs, ``t-`` trials, ``l-`` launches); times
are float epoch seconds (or the market clock of a replay); JSON is stored as TEXT. State
columns are plain strings in the database; job and trial states come back as their enums.

The schema is owned by the migrations in ``migrations/versions``: change a table here, then
add a migration (a test compares the migrated schema with these models).
"""

from __future__ import annotations

import enum
import json
import secrets
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlmodel import Field, SQLModel

from spotwise.providers.base import InstanceState
from spotwise.states import JobState as JobState  # re-exported: they lived here
from spotwise.states import TrialState as TrialState

#: Instance state of a launch recorded before the cloud call confirmed it.
INSTANCE_REQUESTED = "requested"
#: Every value the ``instance.state`` column may hold.
INSTANCE_STATES: frozenset[str] = frozenset([INSTANCE_REQUESTED, *(s.value for s in InstanceState)])
#: Instance states after which nothing more happens (``list_instances(active_only=True)``).
TERMINAL_INSTANCE_STATES: frozenset[str] = frozenset(
    s.value for s in InstanceState if s.is_terminal()
)


def new_id(prefix: str) -> str:
    """A fresh id such as ``t-3fa2c9d1`` (``prefix`` + ``-`` + 8 hex digits). A job id has 16
    (``j-3fa2c9d1e07b5a44``): the clouds' listings filter on it, and two installs with their
    own databases in one account must not draw the same one. Ids are never parsed: older
    8-digit job ids work as before."""
    return f"{prefix}-{secrets.token_hex(8 if prefix == 'j' else 4)}"


def to_json(value: Any) -> str:
    """JSON text for a params/detail/tags value; numpy scalars become Python numbers."""

    def _default(obj: Any) -> Any:
        item = getattr(obj, "item", None)  # numpy scalars, 0-d arrays
        if callable(item):
            return item()
        tolist = getattr(obj, "tolist", None)  # numpy arrays
        if callable(tolist):
            return tolist()
        if isinstance(obj, enum.Enum):
            return obj.value
        if isinstance(obj, set | frozenset | tuple):
            return list(obj)
        raise TypeError(f"{type(obj).__name__} is not JSON serializable")

    return json.dumps(value, sort_keys=True, default=_default)


class _StateType(sa.types.TypeDecorator[enum.Enum]):
    """A state enum stored as its plain string value (VARCHAR); read back as the enum."""

    impl = sa.String
    cache_ok = True
    enum_cls: type[enum.Enum]

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return str(self.enum_cls(value).value)  # ValueError on an unknown state

    def process_result_value(self, value: Any, dialect: Dialect) -> enum.Enum | None:
        return None if value is None else self.enum_cls(value)


class JobStateType(_StateType):
    cache_ok = True  # SQLAlchemy asks each subclass itself (else: a warning per statement)
    enum_cls = JobState


class TrialStateType(_StateType):
    cache_ok = True
    enum_cls = TrialState


class Job(SQLModel, table=True):
    __tablename__ = "job"

    id: str = Field(primary_key=True)
    name: str
    spec_json: str = Field(sa_type=sa.Text)
    spec_path: str
    policy: str
    state: JobState = Field(sa_type=JobStateType)
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None
    best_trial_id: str | None = None
    best_metric: float | None = None
    direction: str
    cost_usd: float = 0.0
    on_demand_cost_usd: float = 0.0
    revocations: int = 0
    migrations: int = 0
    early_stopped: int = 0
    error: str | None = Field(default=None, sa_type=sa.Text)
    pid: int | None = None
    host: str | None = None  # the machine whose process ``pid`` is (NULL before revision 0002)
    # when ``pid``'s process started (local_records.process_start; NULL before revision 0003)
    pid_start: str | None = None
    # wall time its orchestrator last said it was alive (the store's Heartbeat, every few
    # seconds; NULL before revision 0004): a dead local job's lives ran until about then
    heartbeat_at: float | None = None

    @property
    def spec(self) -> Any:
        return json.loads(self.spec_json)


class Trial(SQLModel, table=True):
    __tablename__ = "trial"
    __table_args__ = (sa.UniqueConstraint("job_id", "number", name="uq_trial_job_number"),)

    id: str = Field(primary_key=True)
    job_id: str = Field(foreign_key="job.id", index=True)
    number: int
    params_json: str = Field(sa_type=sa.Text)
    state: TrialState = Field(sa_type=TrialStateType)
    step: int = 0
    metric: float | None = None
    best_metric: float | None = None
    final_metric: float | None = None
    predicted_final: float | None = None
    checkpoint_uri: str | None = None
    checkpoint_step: int = 0
    cost_usd: float = 0.0
    revocations: int = 0
    migrations: int = 0
    created_at: float
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def params(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.params_json)
        return value


class InstanceRow(SQLModel, table=True):
    """One launch attempt: recorded (state ``requested``) before the cloud call is made."""

    __tablename__ = "instance"

    id: str = Field(primary_key=True)
    job_id: str = Field(foreign_key="job.id", index=True)
    trial_id: str = Field(foreign_key="trial.id", index=True)
    provider: str
    region: str
    zone: str
    instance_type: str
    market: str
    offer_key: str
    price_per_hour: float
    provider_instance_id: str | None = None
    state: str = Field(default=INSTANCE_REQUESTED, index=True)  # the held scan (revision 0005)
    tags_json: str = Field(default="{}", sa_type=sa.Text)
    requested_at: float
    launched_at: float | None = None
    ended_at: float | None = Field(default=None, index=True)
    end_reason: str | None = None
    cost_usd: float = 0.0
    on_demand_cost_usd: float = 0.0
    market_seconds: float = 0.0
    # wall time the record's bill was written final (it closed); NULL: its ``ended_at`` (a
    # record closed when it ended; every record before revision 0005). `spotwise report`
    # counts the bill in the window holding this time (:mod:`spotwise.store.bills`)
    billed_at: float | None = Field(default=None, index=True)
    # what the record was billed after it closed, each part dated (JSON list of {at, cost_usd,
    # on_demand_cost_usd, market_seconds}; NULL: nothing): counted in its own time's window
    extra_bills_json: str | None = Field(default=None, sa_type=sa.Text)

    @property
    def tags(self) -> dict[str, str]:
        value: dict[str, str] = json.loads(self.tags_json)
        return value

    def is_active(self) -> bool:
        return self.state not in TERMINAL_INSTANCE_STATES


class Observation(SQLModel, table=True):
    """One reported (step, metric). A resumed trial may re-report a step: keep both."""

    __tablename__ = "observation"

    id: int | None = Field(default=None, primary_key=True)
    trial_id: str = Field(foreign_key="trial.id", index=True)
    instance_id: str | None = None
    step: int
    metric: float
    wall_time: float
    market_time: float | None = None


class Event(SQLModel, table=True):
    __tablename__ = "event"

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(foreign_key="job.id", index=True)
    trial_id: str | None = None
    instance_id: str | None = None
    time: float
    kind: str
    detail_json: str = Field(default="{}", sa_type=sa.Text)

    @property
    def detail(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.detail_json)
        return value


class PriceCache(SQLModel, table=True):
    __tablename__ = "price_cache"
    __table_args__ = (
        sa.Index("ix_price_cache_lookup", "provider", "region", "instance_type", "market"),
    )

    id: int | None = Field(default=None, primary_key=True)
    provider: str
    region: str
    zone: str
    instance_type: str
    market: str
    price_per_hour: float
    observed_at: float  # the time the price applies to
    fetched_at: float  # when we fetched it


ALL_TABLES: tuple[type[SQLModel], ...] = (Job, Trial, InstanceRow, Observation, Event, PriceCache)
