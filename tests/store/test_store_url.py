"""URL resolution, bad URLs, and opening a database that must already exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spotwise.errors import ConfigError, NotFoundError
from spotwise.store import Store, default_url
from spotwise.store.db import make_engine, redact


def test_default_url_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("SPOTWISE_DB", "sqlite:///from-env.db")
    assert default_url("sqlite:///explicit.db") == "sqlite:///explicit.db"
    assert default_url() == "sqlite:///from-env.db"
    monkeypatch.setenv("SPOTWISE_DB", "")
    url = default_url()
    folder = tmp_path / "xdg" / "spotwise"
    assert url == f"sqlite:///{folder / 'spotwise.db'}"
    assert folder.is_dir() and not (folder / "spotwise.db").exists()


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("not a url", "cannot parse"),
        ("nosuchdb://user@host/db", "unknown database dialect"),
        ("mysql+nosuchdriver://user@host/db", "unknown database dialect"),
        ("mysql://user:hunter2@host/db", "driver 'MySQLdb' is not installed"),
    ],
)
def test_bad_url_is_a_config_error(url: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        Store.open(url)
    message = str(err.value)
    assert reason in message and "--db/SPOTWISE_DB" in message and "sqlite:///" in message
    assert "\n" not in message and "hunter2" not in message


def test_missing_postgres_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    with pytest.raises(ConfigError) as err:
        make_engine("postgresql+psycopg://me:pw@localhost/spotwise")
    assert "not installed" in str(err.value) and "pw@" not in str(err.value)
    assert err.value.hint is not None and "spotwise[postgres]" in err.value.hint


def test_a_bare_path_gets_a_sqlite_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        Store.open(str(tmp_path / "runs.db"))
    assert err.value.hint == f"for a SQLite file use --db sqlite:///{tmp_path / 'runs.db'}"


def test_redact_hides_passwords_even_when_unparseable() -> None:
    assert redact("postgresql+psycopg://u:pw@h/db") == "postgresql+psycopg://u:***@h/db"
    assert "pw" not in redact("postgresql+psycopg://u:pw@h:notaport/db")


def test_open_existing_on_a_missing_file_raises_and_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "nested" / "spotwise.db"
    with pytest.raises(NotFoundError, match=r"no spotwise database at .*spotwise tune SPEC"):
        Store.open_existing(f"sqlite:///{db}")
    assert list(tmp_path.iterdir()) == []


def test_open_existing_reads_what_open_wrote(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'spotwise.db'}"
    with Store.open(url) as s:
        job = s.create_job("n", "{}", "spec.yaml", "spotwise", "minimize")
    with Store.open_existing(url) as s:
        assert s.get_job(job.id).name == "n"


def test_open_uses_spotwise_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPOTWISE_DB", f"sqlite:///{tmp_path / 'env.db'}")
    with Store.open() as s:
        assert s.url == f"sqlite:///{tmp_path / 'env.db'}"
    assert (tmp_path / "env.db").exists()


def test_importing_the_store_loads_no_heavy_library() -> None:
    code = (
        "import sys, spotwise.store\n"
        "heavy = {'torch', 'sklearn', 'skopt', 'numpy', 'scipy', 'boto3', 'botocore', "
        "'google', 'azure', 'typer', 'rich', 'moto'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
