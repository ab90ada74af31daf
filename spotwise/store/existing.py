"""Opening a database that must already exist (the read-only commands, ``Store.open_existing``):
which file a SQLite URL names, and whether a database holds spotwise's schema.

A read-only command never creates a database nor a schema: a missing file, an in-memory URL
(``sqlite://``, or ``sqlite:///$VAR`` with the variable unset), a database without spotwise's
tables (an empty file, another program's SQLite database, a PostgreSQL server's default
``postgres`` database) is "no spotwise database" (NotFoundError, exit 3), left as it was. A
file that is not SQLite at all (a damaged header, or another program's file) is a database
failure (StoreError, exit 5), as every command says (review-ah F1).
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from urllib.parse import unquote

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection
from sqlalchemy.util import asbool

from spotwise.errors import ConfigError, NotFoundError, StoreError

SCHEMA_WAIT_S = 2.0  # how long a file with no schema yet may be one another process creates
#: The tables a spotwise database has, whatever its revision: a database without them (or with
#: ``job`` alone: another program's) is not spotwise's.
SPOTWISE_TABLES = ("alembic_version", "job")
FIX_HINT = "or point --db/SPOTWISE_DB at an existing database"


def sqlite_file(url: URL) -> Path | None:
    """The file sqlite3 opens for the SQLite URL ``url`` (pysqlite's reading of it); None for
    an in-memory or temporary database (``sqlite://``, ``sqlite:///``, ``:memory:``, a ``file:``
    URI with ``mode=memory`` or no path).

    Without ``uri=true`` the database part is a path (relative to the working folder; ``~`` is
    not expanded: SQLite does not). With it, a ``file:`` URI (``file:x.db``, ``file:/abs/x.db``,
    ``file:///abs/x.db``, ``file://localhost/abs/x.db``) is resolved to its path, and another
    name is a path with the URL's SQLite parameters appended, as SQLite reads it."""
    database = url.database or ""
    if not asbool(url.query.get("uri", False)):
        return None if database in ("", ":memory:") else Path(database)
    if url.query.get("mode") == "memory":
        return None
    if not database.startswith("file:"):
        if database in ("", ":memory:"):
            return None
        params = {k: v for k, v in url.query.items() if k not in _PYSQLITE_ARGS}
        query = "&".join(f"{k}={params[k]}" for k in sorted(params))
        return Path(f"{database}?{query}" if query else database)
    rest = database[len("file:") :].partition("#")[0]
    if rest.startswith("//"):  # file://AUTHORITY/path: only an empty one or localhost
        authority, _, path = rest[2:].partition("/")
        if authority not in ("", "localhost"):
            raise ConfigError(
                f"--db: the SQLite URI {database!r} names a host ({authority!r}); SQLite opens "
                "local files only",
                hint="write the file's path: sqlite:///file:/path/to/spotwise.db?uri=true",
            )
        rest = "/" + path
    path = unquote(rest)
    return None if path in ("", ":memory:") else Path(path)


# pysqlite's own parameters: not passed on to SQLite's URI (sqlalchemy's pysqlite dialect)
_PYSQLITE_ARGS = (
    "uri",
    "timeout",
    "isolation_level",
    "detect_types",
    "check_same_thread",
    "cached_statements",
)


def in_memory_error(url: str) -> NotFoundError:
    """The read-only commands' answer to an in-memory SQLite URL: it holds no jobs."""
    return NotFoundError(
        f"no spotwise database: --db/SPOTWISE_DB is {url!r}, an in-memory SQLite database "
        "(no file path: an unset variable in sqlite:///$VAR?), which holds no jobs",
        hint="set --db/SPOTWISE_DB to sqlite:////path/to/spotwise.db, or leave both unset "
        "for the default database",
    )


def not_sqlite_error(path: Path) -> StoreError:
    """Every command's answer to a non-empty file that SQLite does not read as a database
    (``file is not a database``): its header is damaged, or it is another program's file.
    The two cannot be told apart; neither is "no database" (exit 3, "run tune first": a tune
    would fail on it the same way), both are a database failure (exit 5)."""
    return StoreError(
        f"{path} is not a SQLite database (damaged, or another program's file); point "
        "--db/SPOTWISE_DB at spotwise's database",
        hint="if it was spotwise's, restore it from a copy: the instances it recorded may "
        "still run (see the provider's console)",
    )


class DatabaseLocked(StoreError):
    """Another process held the database locked past the busy timeout (SQLite's 'database is
    locked') or PostgreSQL's ``lock_timeout``: a running job's store waits it out again
    (:meth:`~spotwise.store.records.Records.wait_out_locks`); ``job_id``: the job whose
    orchestrator it failed, once it gave up (None: a command's)."""


def locked_error(reason: str, where: str = "", action: str = "") -> DatabaseLocked:
    """A database another process held locked past the busy timeout (``reason``: the driver's
    'database is locked', PostgreSQL's lock timeout), while ``action``."""
    doing = f" while {action}" if action else ""
    return DatabaseLocked(
        f"database error{doing}: {reason}{f' ({where})' if where else ''}",
        hint="another spotwise process is writing to the database; retry in a moment",
    )


class DatabaseFull(StoreError):
    """A write the database refused because its disk is full (:func:`is_disk_full`)."""


#: SQLite's SQLITE_FULL, PostgreSQL's "could not extend file ...: No space left on device"
#: (a table grown past the disk) and an OS write's ENOSPC.
DISK_FULL_TEXTS = ("database or disk is full", "could not extend file", "no space left on device")
#: PostgreSQL's disk_full SQLSTATE.
PG_DISK_FULL = "53100"
#: How an action names its job (``f"claiming job {job_id!r}"``).
_JOB_IN_ACTION = re.compile(r"\bjob '([^'\s]+)'")


def is_disk_full(reason: str, sqlstate: str | None = None) -> bool:
    """Whether a driver's message (or PostgreSQL's SQLSTATE) says the database's disk is full."""
    low = reason.lower()
    return sqlstate == PG_DISK_FULL or any(text in low for text in DISK_FULL_TEXTS)


def disk_full_error(reason: str, where: str, action: str = "") -> DatabaseFull:
    """One line for a write a full disk refused, while ``action``: the database, and the fix:
    free space, then, where ``action`` names a job, `spotwise cancel` (it bills the instance
    records the run could not) and `spotwise resume` (review-bf BF3)."""
    doing = f" while {action}" if action else ""
    found = _JOB_IN_ACTION.search(action)
    then = (
        f"then `spotwise cancel {found[1]}` (bills what the run could not write) and, to "
        f"continue the job, `spotwise resume {found[1]}`"
        if found
        else "then run the command again"
    )
    return DatabaseFull(
        f"the database at {where} cannot be written{doing}: its disk is full ({reason}); "
        f"free space on that disk, {then}"
    )


def check_existing_sqlite(path: Path, wait_s: float = SCHEMA_WAIT_S) -> None:
    """:func:`_check_sqlite_file`, given ``wait_s`` for a file that is empty or has no
    schema yet: another process (a first `tune`) may be creating the database right now,
    which takes tens of milliseconds; only a file that stays that way is "no database"."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _check_sqlite_file(path)
        except _NoSchemaYet as e:
            if time.monotonic() >= deadline:
                raise _no_database(path, e.why) from None
            time.sleep(0.05)


class _NoSchemaYet(Exception):
    def __init__(self, why: str) -> None:
        self.why = why


def _check_sqlite_file(path: Path) -> None:
    """NotFoundError unless ``path`` is a SQLite file holding a spotwise database: a missing
    file, an empty (0-byte) one, or a SQLite database without spotwise's tables (``job`` and
    ``alembic_version``) is "no database" for the read-only commands (`report --check` exits
    3 on it); a folder is an unusable --db (ConfigError, exit 2); a non-empty file that is
    not SQLite (:func:`not_sqlite_error`), or a database locked past the busy timeout, is a
    database failure (StoreError, exit 5): the lock is waited for here, once, not again by
    the engine (review-ah F2: a held lock of a rollback-journal database was waited for
    twice, 66 s, and said "while migrating the schema").

    The file is only read (``mode=ro``, not through an engine, whose connection would switch
    it to WAL mode), never created or changed; what this cannot tell (an unreadable or
    corrupt file) is left for the engine to report. Callers: ``Store.open_existing``."""
    from spotwise.store.db import SQLITE_BUSY_TIMEOUT_S

    if path.is_dir():
        raise ConfigError(
            f"--db: {path} is a folder, not a SQLite database file",
            hint="name the database file in it: sqlite:////path/to/folder/spotwise.db",
        )
    try:
        if path.stat().st_size == 0:
            raise _NoSchemaYet("the file is empty")
    except FileNotFoundError:
        raise _no_database(path) from None
    except OSError:
        return
    try:
        con = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S
        )
        try:
            found = {
                row[0]
                for row in con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                    SPOTWISE_TABLES,
                )
            }
        finally:
            con.close()
    except sqlite3.DatabaseError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "not a database" in reason:
            raise not_sqlite_error(path) from None
        if "locked" in reason or "busy" in reason:
            raise locked_error(reason, str(path), "reading the schema") from None
        return
    if not found:
        raise _NoSchemaYet("the file has no spotwise tables")
    if found != set(SPOTWISE_TABLES):  # spotwise writes both in one transaction
        raise _no_database(path, _partial(found))


def _partial(found: set[str]) -> str:
    missing = sorted(set(SPOTWISE_TABLES) - found)
    return f"it has no {' nor '.join(missing)} table: not a spotwise schema"


def _no_database(path: Path, why: str = "") -> NotFoundError:
    return NotFoundError(
        f"no spotwise database at {path}{f' ({why})' if why else ''}; run `spotwise tune SPEC` "
        "first",
        hint=FIX_HINT,
    )


def require_spotwise_schema(conn: Connection, where: str) -> None:
    """NotFoundError unless the database on ``conn`` holds spotwise's schema: its tables
    (``alembic_version`` with a revision, and ``job``). On every backend: a read-only command
    never runs the migrations on a database without them (a PostgreSQL server's default
    ``postgres`` database got every spotwise table created in it, and `report --check` said
    "nothing held"). spotwise's own ``job`` table with no revision recorded is a damaged
    database (:func:`stored_revision`: StoreError, exit 5), not "no database". Only reads."""
    insp = sa.inspect(conn)
    found = {t for t in SPOTWISE_TABLES if insp.has_table(t)}
    why = ""
    if not found:
        why = "it has no spotwise tables"
    elif found != set(SPOTWISE_TABLES):
        why = _partial(found)
    elif conn.execute(sa.text("SELECT count(*) FROM alembic_version")).scalar() == 0:
        if _spotwise_job_table(insp):
            raise damaged_version_error(where, [])
        why = "its alembic_version records no revision"
    if why:
        raise NotFoundError(
            f"no spotwise database at {where} ({why}); run `spotwise tune SPEC` first",
            hint=FIX_HINT,
        )


#: Columns of spotwise's ``job`` table since its first revision: a ``job`` table with them is
#: spotwise's (another program's ``job`` table is left alone, "no database")
JOB_COLUMNS = frozenset({"id", "spec_json", "spec_path", "policy", "state", "created_at"})


def _spotwise_job_table(insp: sa.Inspector) -> bool:
    if not insp.has_table("job"):
        return False
    return {c["name"] for c in insp.get_columns("job")} >= JOB_COLUMNS


def stored_revision(conn: Connection, where: str) -> str | None:
    """The schema revision the database on ``conn`` records in ``alembic_version``; None where
    it records none and has no spotwise tables yet (a new database: the migrations create
    them). Read here, not by alembic, whose answer to several rows was a revision of None
    (review-as AS4). A damaged database is a StoreError (exit 5,
    :func:`damaged_version_error`): several revision rows, or none beside spotwise's ``job``
    table (a `tune` there failed on CREATE TABLE, a read said "no database, run tune")."""
    insp = sa.inspect(conn)
    if not insp.has_table("alembic_version"):
        return None
    rows = [str(r[0]) for r in conn.execute(sa.text("SELECT version_num FROM alembic_version"))]
    if len(rows) == 1:
        return rows[0]
    if rows or _spotwise_job_table(insp):
        raise damaged_version_error(where, rows)
    return None


def damaged_version_error(where: str, revisions: list[str]) -> StoreError:
    """A spotwise database whose ``alembic_version`` holds no revision (``revisions`` empty)
    or several: edited by hand, or a damaged page; never "no database" (its instances may
    still run), nor a revision it does not hold."""
    held = (
        "holds no revision"
        if not revisions
        else f"holds {len(revisions)} revisions ({', '.join(map(repr, sorted(revisions)))}), "
        "not one"
    )
    return StoreError(
        f"damaged spotwise database at {where}: its alembic_version table {held}; it was "
        "edited or damaged",
        hint="restore it from a copy: the instances it recorded may still run (see the "
        "provider's console)",
    )


def newer_schema_error(current: str, head: str | None, where: str) -> StoreError:
    """A database whose schema revision this spotwise does not know: a newer spotwise upgraded
    it (its tables, or the way it writes them: ``migrations/env.py``). Nothing is read nor
    written, not even a write lock taken (review-bc BC3)."""
    return StoreError(
        f"database schema revision {current!r} is unknown to this spotwise (newest is "
        f"{head!r}): a newer spotwise upgraded the database at {where}",
        hint="upgrade spotwise here (every machine sharing the database must run the newer "
        "version), or point --db/SPOTWISE_DB at another database",
    )


def is_readonly(reason: str) -> bool:
    """Whether a driver's message says the database cannot be written: SQLite's 'attempt to
    write a readonly database' (a read-only file or folder, a ``mode=ro`` or ``immutable=1``
    URI), PostgreSQL's 'read-only transaction' (a standby, a read-only default)."""
    low = reason.lower()
    return "readonly" in low or "read-only" in low


def readonly_error(reason: str, where: str, action: str = "", *, sqlite: bool = True) -> StoreError:
    """A write the database refused because it cannot be written (:func:`is_readonly`)."""
    doing = f" while {action}" if action else ""
    why = (
        "the file or its folder is read-only for this user, or --db opens it read-only "
        "(mode=ro, immutable=1)"
        if sqlite
        else "the server or this user allows only reads (a standby, a read-only default)"
    )
    return StoreError(
        f"the database at {where} cannot be written{doing} ({reason}): {why}",
        hint="make the file and its folder writable, or point --db/SPOTWISE_DB at a writable "
        "database; status, trials and report can read a read-only database once its schema "
        "is this spotwise's",
    )


def readonly_upgrade_error(current: str | None, head: str | None, where: str) -> StoreError:
    """An older spotwise schema (``current``) in a database that cannot be written: every
    command, a read-only one included, upgrades it first (the code reads the newest
    columns), which needs one write (review-bc BC4)."""
    return StoreError(
        f"the database at {where} cannot be written, and its schema (revision {current!r}, "
        f"from an older spotwise) must be upgraded to {head!r} once before this spotwise can "
        "read it",
        hint="run any spotwise command on it once where the file and its folder can be "
        "written (not through a mode=ro or immutable=1 URL), or point --db at a writable copy",
    )
