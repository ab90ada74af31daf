"""Engine, session scope, URL resolution and the migrations runner.

SQLite (WAL mode) by default; any SQLAlchemy URL (e.g. PostgreSQL) through ``--db`` or
``SPOTWISE_DB``. The schema is created and upgraded by alembic only (``migrate``), never by
``metadata.create_all``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import StaticPool
from sqlmodel import Session

from spotwise.errors import ConfigError, NotFoundError, StoreError
from spotwise.store.dburl import AT_IN_PASSWORD, first_line, raw_at_redacted, scrubbed_reason
from spotwise.store.dburl import redact as redact
from spotwise.store.existing import check_existing_sqlite as check_existing_sqlite
from spotwise.store.existing import (
    disk_full_error,
    is_disk_full,
    is_readonly,
    locked_error,
    newer_schema_error,
    not_sqlite_error,
    readonly_error,
    readonly_upgrade_error,
    require_spotwise_schema,
    sqlite_file,
    stored_revision,
)
from spotwise.store.existing import in_memory_error as in_memory_error

ENV_VAR = "SPOTWISE_DB"
MIGRATIONS_DIR = Path(__file__).parent / "migrations"
EXAMPLE_URLS = "sqlite:////path/to/spotwise.db or postgresql+psycopg://user@host:5432/spotwise"
SQLITE_BUSY_TIMEOUT_S = 30
#: PostgreSQL's ``lock_timeout``: a lock held longer fails the command (exit 5), as SQLite's
#: busy timeout does (review-ah F11: a held lock hung `report --check` with no end)
PG_LOCK_TIMEOUT_S = SQLITE_BUSY_TIMEOUT_S
#: Seconds a PostgreSQL connection may take (libpq's ``connect_timeout``) unless the URL sets
#: one: a firewalled host would otherwise hang `report --check` for the system's TCP timeout.
PG_CONNECT_TIMEOUT_S = 10
_DRIVER_HINTS = {
    "postgresql": "pip install 'spotwise[postgres]'",
}
# A lock id for serialising migrations on PostgreSQL ("spotwise" as a number).
_PG_MIGRATION_LOCK = 0x73706F7477697365


def default_url(explicit: str | None = None, *, create: bool = True) -> str:
    """The database URL: ``explicit``, else ``$SPOTWISE_DB``, else a SQLite file under the
    user data folder (the folder created here with ``create``; a read-only command passes
    False: it makes no folder, and finds no database there)."""
    if explicit:
        return explicit
    from_env = os.environ.get(ENV_VAR, "").strip()
    if from_env:
        return from_env
    from platformdirs import user_data_dir

    folder = Path(user_data_dir("spotwise"))
    if create:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)  # private: see create_private_file
    return f"sqlite:///{folder / 'spotwise.db'}"


def create_private_file(path: Path) -> None:
    """Create the SQLite file ``path``, empty and readable by its owner only (0600), if it does
    not exist yet: the database holds every job's spec (``env`` included) and its errors.
    SQLite gives the ``-wal`` and ``-shm`` files the database file's mode. An existing file is
    left as it is; a folder that cannot be written is left for SQLite to report."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:  # it exists (another process may just have created it), or cannot be made
        return
    os.close(fd)


def _config_error(url: str, reason: str, hint: str | None = None) -> ConfigError:
    if hint is None and "://" not in url and url.endswith((".db", ".sqlite", ".sqlite3")):
        hint = f"for a SQLite file use --db sqlite:///{Path(url).expanduser().resolve()}"
    return ConfigError(
        f"unusable database URL {redact(url)!r} ({reason}); set --db/SPOTWISE_DB to a "
        f"SQLAlchemy URL such as {EXAMPLE_URLS}",
        hint=hint,
    )


def parse_url(url: str) -> URL:
    if raw_at_redacted(url):
        raise _config_error(url, AT_IN_PASSWORD)
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise _config_error(url, "cannot parse it") from exc


def sqlite_path(url: str | URL) -> Path | None:
    """The file of a SQLite URL, as SQLite opens it (a ``file:`` URI with ``uri=true``
    resolved to its path: :func:`~spotwise.store.existing.sqlite_file`); None for other
    databases and in-memory SQLite."""
    parsed = url if isinstance(url, URL) else parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    return sqlite_file(parsed)


def is_in_memory(url: URL) -> bool:
    """A SQLite URL with no file: an empty in-memory (or temporary) database."""
    return url.get_backend_name() == "sqlite" and sqlite_file(url) is None


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching a fresh file to WAL needs a lock another process may hold.
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        _use_wal(cursor)
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _use_wal(cursor: Any) -> None:
    """WAL mode, once per file. Asking for it while another process migrates a fresh file can
    fail at once with 'database is locked' (SQLite does not wait on the busy timeout there),
    so it is asked only when the file is not in WAL yet, and retried until the timeout.

    A database that already holds a schema and that another process is writing in
    rollback-journal mode (it holds the write lock) is used in that mode: the next process
    to connect without contention switches it (a pooled connection keeps its mode, so a
    `tune` that met the lock runs in rollback-journal mode: slower to share, never unsafe).
    Waiting for the switch made a read-only command that could read wait a whole busy
    timeout and fail (review-ah F2).

    A connection that cannot write (a read-only file or folder, a ``mode=ro`` URI) keeps the
    file's mode: the read-only commands read a database at this schema as it is, and a write
    says what is wrong (:func:`store_error`; review-bc BC4)."""
    if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
        return
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_S
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except Exception as e:  # sqlite3.OperationalError (the driver's; no import here)
            if is_readonly(str(e)):
                return
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            if _holds_schema(cursor):
                return
            time.sleep(0.05)


def _holds_schema(cursor: Any) -> bool:
    """Whether the database holds tables (its schema cookie is set): a read, that waits on
    the busy timeout while another process commits; False where it cannot tell (locked)."""
    try:
        return int(cursor.execute("PRAGMA schema_version").fetchall()[0][0]) > 0
    except Exception as e:  # sqlite3.OperationalError
        if "locked" not in str(e) and "busy" not in str(e):
            raise
        return False


def _driver_hint(parsed: URL, missing: str) -> str | None:
    """What to install for a URL whose driver is missing: spotwise's extra installs psycopg 3
    (``postgresql://`` and ``postgresql+psycopg://``); another driver named in the URL
    (``postgresql+psycopg2://``, …) is not what that extra brings."""
    hint = _DRIVER_HINTS.get(parsed.get_backend_name())
    if hint is None or missing.split(".")[0] == "psycopg":
        return hint
    return (
        f"spotwise's PostgreSQL driver is psycopg 3 ({hint}): write postgresql+psycopg://… in "
        f"--db, or install {missing!r} yourself"
    )


def make_engine(url: str) -> Engine:
    """An engine for ``url``; ConfigError for an unparseable URL, unknown dialect or missing
    driver. Nothing is connected yet."""
    parsed = parse_url(url)
    kwargs: dict[str, Any] = {}
    is_sqlite = parsed.get_backend_name() == "sqlite"
    if is_sqlite:
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}
        if is_in_memory(parsed):  # one shared connection, or tables vanish
            kwargs["poolclass"] = StaticPool
    else:
        kwargs["pool_pre_ping"] = True
        if parsed.get_backend_name() == "postgresql":
            kwargs["connect_args"] = pg_connect_args(parsed.query)
    try:
        engine = sa.create_engine(parsed, **kwargs)
    except ImportError as exc:
        name = getattr(exc, "name", None) or str(exc)
        raise _config_error(
            url, f"its driver {name!r} is not installed", hint=_driver_hint(parsed, name)
        ) from exc
    except (ArgumentError, ValueError, TypeError) as exc:
        reason = (
            f"unknown database dialect/driver {parsed.drivername!r}"
            if isinstance(exc, ArgumentError)
            else str(exc)
        )
        raise _config_error(url, reason) from exc
    if is_sqlite:
        path = sqlite_path(parsed)
        if path is not None and not {"mode", "uri"} & set(parsed.query):
            # a new file is made 0600 before SQLite opens it (SQLite would make it 0644)
            event.listen(engine, "do_connect", lambda *_: create_private_file(path))
        event.listen(engine, "connect", _on_sqlite_connect)
    return engine


class DatabaseUnreachable(StoreError, NotFoundError):
    """The database server cannot be reached or refuses us (down, wrong host or port, wrong
    password, no such database): a database failure, with the exit code of "no database" (3),
    as a missing SQLite file has, so `report --check` never reads it as "something is held"."""

    exit_code = NotFoundError.exit_code


def _connect(engine: Engine) -> Connection:
    """A command's first connection: :class:`DatabaseUnreachable` when a database server
    cannot be reached; SQLite's connect errors (a locked file) stay plain database errors."""
    try:
        return engine.connect()
    except SQLAlchemyError as exc:
        if engine.dialect.name == "sqlite":
            raise
        reason = scrubbed_reason(exc, engine.url)
        raise DatabaseUnreachable(
            f"cannot connect to the database {redact(engine.url)} "
            f"given by --db/SPOTWISE_DB: {reason}",
            hint="check that the server is up and the URL (host, port, user, database) is right",
        ) from exc


def store_error(exc: BaseException, engine: Engine | None = None, action: str = "") -> StoreError:
    """One line for a database failure: the driver's message, no SQL, no parameters, no
    password. A SQLite file that is not a database says so as the read-only commands do
    (:func:`~spotwise.store.existing.not_sqlite_error`); a lock held, a read-only database
    and a full disk (:func:`~spotwise.store.existing.disk_full_error`) each name their fix."""
    reason = first_line(exc) if engine is None else scrubbed_reason(exc, engine.url)
    path = sqlite_path(engine.url) if engine is not None else None
    if path is not None and "file is not a database" in reason:
        return not_sqlite_error(path)
    where = redact(engine.url) if engine else ""
    if "locked" in reason or "busy" in reason or _pg_lock_timeout(exc, reason):
        return locked_error(reason, where, action)
    if is_readonly(reason):
        return readonly_error(reason, where or "--db", action, sqlite=path is not None)
    if is_disk_full(reason, _sqlstate(exc)):
        return disk_full_error(reason, where or "--db", action)
    doing = f" while {action}" if action else ""
    return StoreError(f"database error{doing}: {reason}{f' ({where})' if where else ''}")


def _pg_lock_timeout(exc: BaseException, reason: str) -> bool:
    """PostgreSQL's ``lock_timeout`` (SQLSTATE 55P03, "canceling statement due to lock
    timeout"): a lock another session held past :data:`PG_LOCK_TIMEOUT_S`."""
    return _sqlstate(exc) == "55P03" or "lock timeout" in reason


def _sqlstate(exc: BaseException) -> str | None:
    """PostgreSQL's SQLSTATE of a driver error (psycopg's ``sqlstate``, psycopg2's ``pgcode``)."""
    orig = getattr(exc, "orig", None)
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return code if isinstance(code, str) else None


@contextmanager
def session_scope(engine: Engine, action: str = "") -> Iterator[Session]:
    """A session that commits on success and rolls back on error; database errors are
    re-raised as StoreError. Objects stay readable after the scope closes."""
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        raise store_error(exc, engine, action) from exc
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


# --- migrations -------------------------------------------------------------------------------


def alembic_config(connection: Connection | None = None) -> Any:
    """An alembic Config pointing at the packaged migrations (no ini file needed)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str | None:
    return _revisions()[0]


def _revisions() -> tuple[str | None, set[str]]:
    """The newest revision this spotwise has, and every revision it knows."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    head: str | None = script.get_current_head()
    return head, {r.revision for r in script.walk_revisions()}


def current_revision(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    rev: str | None = MigrationContext.configure(connection).get_current_revision()
    return rev


def _upgrade_locked(engine: Engine) -> None:
    """``alembic upgrade head`` inside one transaction that holds a lock, so two processes
    opening a fresh database at once do not both create the tables."""
    from alembic import command

    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            # pysqlite starts no transaction before DDL: take the write lock ourselves.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        elif engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        command.upgrade(alembic_config(conn), "head")
        conn.commit()


def migrate(engine: Engine, attempts: int = 5, *, existing: bool = False) -> None:
    """Bring the schema to the newest revision; a no-op (and no write lock) when it is there.
    With ``existing`` (the read-only commands), a database without spotwise's schema is a
    NotFoundError and nothing is created in it; an older spotwise schema is still upgraded
    (the code reads the newest columns; README "State database and PostgreSQL")."""
    from alembic.util.exc import CommandError

    head, known = _revisions()
    for attempt in range(attempts):
        current: str | None = None
        doing = "reading the schema"  # what a failure says it was doing (review-ah F2)
        try:
            with _connect(engine) as conn:
                if existing:
                    require_spotwise_schema(conn, redact(engine.url))
                current = stored_revision(conn, redact(engine.url))  # review-as AS4
            if current == head:
                return
            if current is not None and current not in known:  # before any write lock
                raise newer_schema_error(current, head, redact(engine.url))
            doing = "migrating the schema"
            _upgrade_locked(engine)
            return
        except CommandError as exc:
            raise StoreError(
                f"database schema revision {current!r} is unknown to this spotwise "
                f"(newest is {head!r}) at {redact(engine.url)}",
                hint="upgrade spotwise, or point --db/SPOTWISE_DB at another database",
            ) from exc
        except SQLAlchemyError as exc:
            if doing == "migrating the schema" and current and is_readonly(str(exc)):
                raise readonly_upgrade_error(current, head, redact(engine.url)) from exc
            # Another process created the tables between our check and our lock (a database
            # without a lock of its own): look again, it is probably at head now.
            if "already exists" in str(exc).lower() and attempt + 1 < attempts:
                time.sleep(0.2 * (attempt + 1))
                continue
            raise store_error(exc, engine, doing) from exc


def pg_connect_args(query: Mapping[str, Any]) -> dict[str, Any]:
    """psycopg's connection arguments: a connect timeout and a lock timeout, unless the URL
    sets its own (``connect_timeout``, ``options``)."""
    args: dict[str, Any] = {}
    if "connect_timeout" not in query:
        args["connect_timeout"] = PG_CONNECT_TIMEOUT_S
    if "options" not in query:
        args["options"] = f"-c lock_timeout={int(PG_LOCK_TIMEOUT_S * 1000)}"
    return args
