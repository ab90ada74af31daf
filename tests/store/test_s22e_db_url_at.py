"""A database password holding an unescaped '@' is never shown (review-at AT1).

SQLAlchemy's URL grammar cuts the password at its first '@' and reads the rest as the host,
so the password's tail was printed twice: in the "redacted" URL and in the driver's message
("failed to resolve host 'tPart2Leak@127.0.0.1'")."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from spotwise.errors import ConfigError
from spotwise.store import db

URL = "postgresql+psycopg://alice:S3cr@tPart2Leak@127.0.0.1:1/db?connect_timeout=1"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:hu@nter2@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:a@b:c@h:5432/db?password=x", "postgresql://u:***@h:5432/db?password=***"),
        (URL, "postgresql+psycopg://alice:***@127.0.0.1:1/db?connect_timeout=1"),
        # a user name may hold '@' (user@server): the password has none, shown as before
        ("postgresql://me@srv:pw@h/db", "postgresql://me%40srv:***@h/db"),
    ],
)
def test_the_password_is_hidden_up_to_the_last_at(url: str, shown: str) -> None:
    assert db.redact(url) == shown


def test_a_parsed_url_whose_host_holds_the_tail_is_hidden_too() -> None:
    shown = db.redact(make_url(URL))
    assert "S3cr" not in shown and "tPart2Leak" not in shown
    assert shown.startswith("postgresql+psycopg://alice:***@127.0.0.1:1/db")


def test_opening_such_a_url_names_the_fix_and_none_of_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from spotwise.store import Store

    monkeypatch.setenv("SPOTWISE_DB", URL)
    for open_it in (Store.open_existing, Store.open):
        with pytest.raises(ConfigError) as err:
            open_it(None)
        text = f"{err.value.message} {err.value.hint}"
        assert "S3cr" not in text and "tPart2Leak" not in text
        assert "%40" in text and "alice:***@127.0.0.1:1/db" in text


def test_the_drivers_message_is_not_echoed_for_such_a_host() -> None:
    """An engine built from the parsed URL (past parse_url): the driver's "failed to resolve
    host 'tPart2Leak@127.0.0.1'" is replaced, not shown."""
    engine = sa.create_engine(make_url(URL), connect_args={"connect_timeout": 1})
    with pytest.raises(db.DatabaseUnreachable) as err:
        db._connect(engine)
    text = f"{err.value.message} {err.value.hint}"
    assert "S3cr" not in text and "tPart2Leak" not in text
    assert "%40" in text
    engine.dispose()
