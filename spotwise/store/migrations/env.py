"""Alembic environment for the spotwise store.

Run programmatically by ``spotwise.store.db.migrate``, which passes an open connection in
``config.attributes["connection"]`` (inside a transaction holding a lock). For ad-hoc use,
``alembic -x url=sqlite:///path.db upgrade head`` with a Config whose ``script_location`` is
this folder also works.
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
