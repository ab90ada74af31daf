"""Database URLs and driver messages fit to print: no password (in the user part, the query
string, or a password's tail that an unescaped '@' made into the host name: review-at AT1)."""

from __future__ import annotations

import re

from sqlalchemy.engine import URL, make_url

#: Query parameters of a database URL that carry a secret (libpq's ``password``,
#: ``sslpassword``, ``sslkey``; a driver's ``token``/``secret``): hidden like the password.
_SECRET_PARAM = re.compile(r"(?i)pass|secret|token|key")


#: The scheme and the authority (up to the first ``/``, ``?`` or ``#``) of a URL.
_AUTHORITY = re.compile(r"^(?P<head>[^:/?#\s]+://)(?P<netloc>[^/?#]*)")
#: Why a URL whose password holds a raw '@' is refused (never echoing any of it).
AT_IN_PASSWORD = "its password holds a '@': write each '@' of the password as %40"


def raw_at_redacted(text: str) -> str | None:
    """``text`` with its password hidden up to the LAST '@' of its authority, when that
    password holds an unescaped '@' (SQLAlchemy cuts it at the first one and reads the rest
    as the host: review-at AT1); None for any other URL. A user name may hold '@'
    (``user@server:pw@host``)."""
    m = _AUTHORITY.match(text)
    userinfo, at, hostport = m["netloc"].rpartition("@") if m else ("", "", "")
    user, colon, password = userinfo.partition(":")
    if not (m and at and colon and "@" in password):
        return None
    return f"{m['head']}{user}:***@{hostport}{text[m.end() :]}"


def redact(url: str | URL) -> str:
    """``url`` without its password (in its user part or its query string), fit to print
    (also for strings that do not parse, and for a password holding a raw '@')."""
    if isinstance(url, str):
        url = raw_at_redacted(url) or url
    try:
        u = make_url(url)
        if u.host and "@" in u.host:  # a password's tail read as the host
            u = u.set(password="***", host=u.host.rpartition("@")[2])
        query = {k: "***" if _SECRET_PARAM.search(k) else v for k, v in u.query.items()}
        return u.set(query=query).render_as_string(hide_password=True).replace("%2A%2A%2A", "***")
    except Exception:
        text = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", str(url))
        return re.sub(
            r"(?i)([?&][^=&#\s]*(?:pass|secret|token|key)[^=&#\s]*=)[^&#\s]*", r"\1***", text
        )


def _secrets(url: URL) -> list[str]:
    """The secret values of ``url`` (its password, its secret query parameters), to scrub
    from a driver's message."""
    found = [str(url.password)] if url.password else []
    for k, v in url.query.items():
        if _SECRET_PARAM.search(k):
            found += [v] if isinstance(v, str) else list(v)
    return [f for f in found if f]


def scrubbed_reason(exc: BaseException, url: URL) -> str:
    """The driver's first line without the URL's secrets; none of it where the host holds a
    '@' (a password's tail that the driver repeats as the host name)."""
    if url.host and "@" in url.host:
        return f"the driver's message is not shown: {AT_IN_PASSWORD}"
    reason = first_line(exc)
    for secret in _secrets(url):  # drivers do not echo them; never risk it
        reason = reason.replace(secret, "***")
    return reason


def first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    lines = str(orig if orig is not None else exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__
