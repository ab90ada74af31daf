"""Passwords in URLs never reach an error or an output line (review-z F4, F5).

libpq takes a password from the database URL's query string (``?password=``) as well as from
its user part, and an endpoint URL may carry ``user:password@``: both were printed whole."""

from __future__ import annotations

import pytest

from spotwise.providers import aws
from spotwise.store import db


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+psycopg://alice@h:5432/x?connect_timeout=2&password=S3cret",
            "postgresql+psycopg://alice@h:5432/x?connect_timeout=2&password=***",
        ),
        (
            "postgresql://alice:S3cret@h/x?sslpassword=S3cret",
            "postgresql://alice:***@h/x?sslpassword=***",
        ),
        ("sqlite:////tmp/a.db", "sqlite:////tmp/a.db"),
        # does not parse: the regex fallback hides both forms
        (
            "post gres://al:S3cret@h/x?password=S3cret&a=1",
            "post gres://al:***@h/x?password=***&a=1",
        ),
    ],
)
def test_a_database_url_is_shown_without_any_password(url: str, shown: str) -> None:
    assert db.redact(url) == shown
    assert "S3cret" not in db.redact(url)


def test_an_unreachable_database_error_names_no_query_password() -> None:
    from spotwise.store import Store
    from spotwise.store.db import DatabaseUnreachable

    url = "postgresql+psycopg://alice@127.0.0.1:1/spotwise?connect_timeout=1&password=S3cret-q"
    with pytest.raises(DatabaseUnreachable) as err:
        Store.open_existing(url)
    text = f"{err.value.message} {err.value.hint}"
    assert text.startswith("cannot connect to the database postgresql+psycopg://alice@")
    assert "S3cret-q" not in text and "password=***" in text


def test_an_endpoint_url_is_shown_without_its_user_part_or_query(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert aws.safe_url("http://user:EPpass@127.0.0.1:1/x?sig=abc") == "http://127.0.0.1:1/x"
    assert aws.redact("could not reach https://k:s@host/") == "could not reach https://host/"
    from botocore.exceptions import EndpointConnectionError

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://user:EPpass@127.0.0.1:1")
    err = aws.transient_error(
        EndpointConnectionError(endpoint_url="http://user:EPpass@127.0.0.1:1/"), "listing"
    )
    assert err is not None
    assert "EPpass" not in f"{err.message} {err.hint}"
    assert "AWS_ENDPOINT_URL (http://127.0.0.1:1)" in str(err.hint)
