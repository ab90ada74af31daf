"""Fixtures for the store tests: every backend-parametrised test runs on SQLite (a file in
tmp_path) and, where this machine has PostgreSQL 15 and psycopg, on a throwaway server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from spotwise.store import Store

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URL of the ``postgres`` database on a throwaway PostgreSQL server (skips without one)."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL 15 is not installed ({PG_BIN / 'initdb'} missing)")
    pytest.importorskip("psycopg", reason="psycopg is not installed (spotwise[postgres])")
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="spotwise-pg-"))
    data = base / "data"
    if as_postgres:
        shutil.chown(base, user="postgres")
    port = _free_port()

    def run(*argv: str) -> None:
        subprocess.run([*as_postgres, *argv], check=True, capture_output=True, timeout=120)

    try:
        run(str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
        opts = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(base / "log"),
            "-w", "start")  # fmt: skip
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(base, ignore_errors=True)
        detail = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"cannot start a throwaway PostgreSQL: {exc} {detail.decode()[-300:]}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_postgres, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of an empty database (nothing created yet for SQLite; a new database on PG)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'spotwise.db'}"
        return
    admin_url: str = request.getfixturevalue("pg_server")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@pytest.fixture
def store(fresh_url: str) -> Iterator[Store]:
    s = Store.open(fresh_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'spotwise.db'}")
    try:
        yield s
    finally:
        s.close()
