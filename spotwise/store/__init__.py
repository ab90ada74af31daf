"""The spotwise store: SQLModel tables, one session scope, alembic migrations.

SQLite in WAL mode by default (a file under the user data folder); any SQLAlchemy URL through
``--db`` / ``SPOTWISE_DB``. Importing this package loads SQLAlchemy/SQLModel/alembic but no ML
or cloud library; the CLI imports it lazily.

    store = Store.open()                 # creates + migrates
    store = Store.open_existing(url)     # read-only commands: never creates a SQLite file
"""

from __future__ import annotations

from spotwise.store.db import default_url, session_scope
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
)
from spotwise.store.repo import Store

__all__ = [
    "INSTANCE_REQUESTED",
    "TERMINAL_INSTANCE_STATES",
    "Event",
    "InstanceRow",
    "Job",
    "JobState",
    "Observation",
    "PriceCache",
    "Store",
    "Trial",
    "TrialState",
    "default_url",
    "new_id",
    "session_scope",
]
