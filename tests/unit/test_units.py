from __future__ import annotations

import pytest

from spotwise.errors import SpecError
from spotwise.units import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1h", 3600),
        ("30m", 1800),
        ("90s", 90),
        ("2d", 172800),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("600", 600),
        (" 1H ", 3600),
        ("1w", 604800),
        (120, 120),
    ],
)
def test_parse_duration(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1x", "-1h", "0s", "1h junk", "abc"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(SpecError, match="--horizon"):
        parse_duration(text, field="--horizon")


def test_format_duration_round_trips() -> None:
    for s in (90, 3600, 5400, 86400 + 60):
        assert parse_duration(format_duration(s)) == s
