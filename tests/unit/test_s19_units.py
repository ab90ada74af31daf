"""An uppercase M in a duration is refused (review-af F8: `report --since 1M` read one minute
back where a user means a month): one line naming the option and the fix. Every other unit
keeps its meaning, and `min` is a minute too."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spotwise.errors import SpecError
from spotwise.units import parse_duration, window

NOW = 1_795_500_000.0
FIX = "use 1m or 1min for a minute, 30d for a month"


@pytest.mark.parametrize("text", ["1M", "1h30M", " 2 M"])
def test_an_uppercase_m_is_refused_for_since_and_until(text: str) -> None:
    with pytest.raises(SpecError, match=r"--since: .*ambiguous") as e:
        window(text, None, NOW)
    assert FIX in e.value.message and "\n" not in str(e.value)
    with pytest.raises(SpecError, match=r"--until: .*ambiguous"):
        window("all", text, NOW)


def test_a_month_and_a_minute_as_they_are_written() -> None:
    # `now`: the window ends at NOW itself (the default ends a minute before it, SETTLE_S)
    assert window("30d", "now", NOW) == (NOW - 30 * 86400.0, NOW)
    assert window("1m", "now", NOW) == (NOW - 60.0, NOW)
    assert window("1min", "now", NOW) == (NOW - 60.0, NOW)
    assert window("90MIN", "1h", NOW) == (NOW - 3600.0 - 5400.0, NOW - 3600.0)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m", 60), ("1min", 60), ("1h30min", 5400), (" 1H ", 3600), ("2D", 172800), ("1W", 604800)],
)
def test_the_other_durations_keep_their_meaning(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_other_options_that_take_a_duration_refuse_it_too() -> None:
    """--history and the predictors' --horizon read the same parser: an error, never a minute
    (no spec file field reads it)."""
    for field in ("--history", "--horizon"):
        with pytest.raises(SpecError, match=f"^{field}: '1M': .*{FIX}"):
            parse_duration("1M", field=field)


def test_report_since_1M_is_refused_before_the_database_is_read() -> None:
    """The CLI's entry point prints a SpecError as one line and exits with its code, 2."""
    from spotwise.cli.app import app

    done = CliRunner().invoke(app, ["report", "--since", "1M", "--db", "sqlite:///:memory:"])
    assert isinstance(done.exception, SpecError) and done.exception.exit_code == 2
    assert done.exception.message.startswith("--since: '1M': an uppercase M is ambiguous")
