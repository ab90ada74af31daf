"""Alembic environment for the spotwise store.

Run programmatically by ``spotwise.store.db.migrate``, which passes an open connection in
``config.attributes["connection"]`` (inside a transaction holding a lock). For ad-hoc use,
``alembic -x url=sqlite:///path.db upgrade head`` with a Config whose ``script_location`` is
this folder also works.

A revision is the only thing an older spotwise checks before it writes: it refuses a database
whose revision it does not know, and writes with its own rules to one at its own revision. So
add a revision whenever the way rows are written changes so that an older writer would corrupt
them (a cost it adds to where the new code sets it, a close it makes without the new code's
compare-and-set, a column it leaves stale), even when no table changes: an empty migration
(as ``0006_write_protocol.py``) is enough, and makes every older writer refuse the database.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from spotwise.store.db import make_engine
from spotwise.store.models import SQLModel

target_metadata = SQLModel.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER much
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option(
        "sqlalchemy.url"
    )
    if not url:
        raise SystemExit("give the database with -x url=... or sqlalchemy.url")
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            _run(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run them online")
run_migrations_online()
