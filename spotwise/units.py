"""Durations and times on the command line: ``90s``, ``30m`` (or ``30min``), ``1h``, ``2d``,
``1w``, ``1h30m`` or seconds (an uppercase ``M`` is refused: a month to some, a minute here);
dates, date-times, ``today``/``yesterday`` and epoch seconds; a report's window."""

from __future__ import annotations

import re
from dataclasses import dataclass

from spotwise.errors import SpecError

_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(min|[smhdw])", re.IGNORECASE)


def _month_m(text: str) -> bool:
    """Whether ``text`` is a duration written with an uppercase ``M`` (``1M``, ``1h30M``): a
    month to most readers, a minute to the old parser (review-af F8: ``--since 1M`` read one
    minute back). No unit here is a month: refused, with the fix."""
    s = text.strip().replace(" ", "")
    return any(m.group(2) == "M" for m in _PART.finditer(s))


def _month_m_error(field: str, text: str) -> SpecError:
    return SpecError(
        f"{field}: {text!r}: an uppercase M is ambiguous (a month or a minute?); use 1m or "
        "1min for a minute, 30d for a month"
    )


def parse_duration(text: str | float | int, *, field: str = "duration") -> float:
    """Seconds in ``text``; raises :class:`SpecError` naming ``field`` when it is not a duration.

    >>> parse_duration("1h30m")
    5400.0
    """
    if isinstance(text, int | float):
        value = float(text)
    elif _month_m(text):
        raise _month_m_error(field, text)
    else:
        s = text.strip().lower().replace(" ", "")
        try:
            value = float(s)
        except ValueError:
            pos, value = 0, 0.0
            for m in _PART.finditer(s):
                if m.start() != pos:
                    break
                value += float(m.group(1)) * _UNIT_SECONDS[m.group(2).lower()]
                pos = m.end()
            if pos != len(s) or not s:
                raise SpecError(
                    f"{field}: {text!r} is not a duration; use e.g. 90s, 30m, 1h, 2d or 1h30m"
                ) from None
    if not value > 0 or value == float("inf"):
        raise SpecError(f"{field}: must be a positive duration, got {text!r}")
    return value


def format_duration(seconds: float) -> str:
    """Short human form: ``3600 → '1h'``, ``5400 → '1h30m'``, ``90 → '1m30s'``."""
    s = round(seconds)
    if s <= 0:
        return f"{seconds:g}s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            n, s = divmod(s, size)
            out.append(f"{n}{unit}")
    return "".join(out)


#: The words a time on the command line may be besides a date: whole UTC days back from now.
_DAYS_BACK = {"today": 0, "yesterday": 1}


def parse_time(text: str, *, field: str, now: float) -> float:
    """Epoch seconds of ``text``: ``now``, ``today`` / ``yesterday`` (00:00 UTC of that day),
    an ISO date (``2026-11-24``: 00:00 UTC) or date-time (``2026-11-24T07:00``, ``07:00:30``,
    with ``Z`` or an offset such as ``+02:00``; none: UTC). :class:`SpecError` naming
    ``field`` otherwise.

    >>> parse_time("2026-11-24T07:00Z", field="--until", now=0.0)
    1795503600.0
    """
    from datetime import UTC, datetime

    s = text.strip()
    if s.upper().endswith(" UTC"):  # as the text report prints its window
        s = s[:-4].strip() + "+00:00"
    word = s.lower()
    if word == "now":
        return now
    if word in _DAYS_BACK:
        return (now // 86400.0 - _DAYS_BACK[word]) * 86400.0
    try:
        when = datetime.fromisoformat(s)
    except ValueError:
        raise SpecError(
            f"{field}: {text!r} is not a time; use a UTC date (2026-11-24), a date-time "
            "(2026-11-24T07:00, with Z or an offset such as +02:00), today or yesterday"
        ) from None
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


#: A bare number from here on is a time in epoch seconds (2001-09-09), not a duration: no
#: window reaches 31 years back, and --json's since/until are such numbers
EPOCH_FROM = 1e9
#: The last second a date is written for (9999-12-31T23:59:59Z) and the first (0001-01-01):
#: a window's bound outside them cannot be printed, nor is it a time a bill has (review-as AS3:
#: `--since 1e12`, an epoch in milliseconds, exited 70 "internal error")
LATEST = 253402300799.999
EARLIEST = -62135596800.0


def whole_ms(now: float) -> float:
    """``now`` to the whole millisecond at or before it: a window ending then is the instant
    its text (to the millisecond) names, so the next window, chained on that text, starts
    exactly where it ended (review-as AS2: a bill in the fraction cut from the text was in
    both windows)."""
    ms = round(now * 1000.0)
    while ms / 1000.0 > now:  # never after now: a window holds only bills written so far
        ms -= 1
    return ms / 1000.0


def _out_of_range(field: str, text: str, value: float) -> SpecError:
    """The one line for a bound past the year 9999 (or before the year 1): an epoch in
    milliseconds or microseconds is named as such, with the division that fixes it."""
    fix = "use epoch seconds (as --json's since/until), a date or a duration"
    for unit, per_s in (("milliseconds", 1e3), ("microseconds", 1e6)):
        if EPOCH_FROM <= value / per_s <= LATEST:
            seconds = f"{value / per_s:.6f}".rstrip("0").rstrip(".")
            fix = f"an epoch in {unit}? divide it by {per_s:.0f}: {seconds}"
            break
    if not value <= LATEST:  # inf too
        return SpecError(f"{field}: {text!r} is past the year 9999, not a time; {fix}")
    return SpecError(f"{field}: {text!r} is before the year 1, not a time; {fix}")


#: Seconds a window ending "now" ends before now: twice the store's lock timeouts (SQLite's
#: busy timeout, PostgreSQL's ``lock_timeout``, 30 s), the longest a bill dated before its
#: write waits for the write lock (review-as AS1: the orchestrator dates a life's end, then
#: waits; a report in that gap saw it held, and the next window, starting at that report's
#: end, after the bill's date: neither counted it). So every bill dated in a window is written
#: before the window is read.
SETTLE_S = 60.0


@dataclass(frozen=True)
class Window:
    """A report's window ``(start, end]`` and when it may be read: ``ready_at``, when every
    bill dated by ``end`` has been written (``end`` + :data:`SETTLE_S`; ``end`` itself for
    ``--until now``, read at once and not final)."""

    start: float | None
    end: float
    ready_at: float


def report_window(since: str, until: str | None, now: float) -> Window:
    """The report's window from ``--since`` (``all``: no start; a duration before the end
    such as ``24h``; a time, :func:`~spotwise.units.parse_time`) and ``--until``:

    * None (the default), a duration before now (``1h``) or a time still to come: at most
      :data:`SETTLE_S` before ``now``, to the whole millisecond (:func:`whole_ms`): a bill
      dated before its write commits is written by then, and a bill of the last minute is in
      the next window, which starts at this one's end. Read at once.
    * a time already past (a date, ``today``, epoch seconds): that very time, so windows
      chained on whole days stay whole whenever the cron runs; read at ``ready_at`` (the
      caller waits, at most :data:`SETTLE_S`, when the time is less than that ago).
    * ``now``: ``now`` itself, read at once: a look at the bills written so far, not final
      (one still being written may be dated before it): not a window to chain on.

    A bound past the year 9999 (or an end before the year 1) is refused (SpecError, exit 2)."""
    now_ms = whole_ms(now)
    settled = whole_ms(now - SETTLE_S)

    def when(text: str, field: str, before: float) -> tuple[float, bool]:
        """``text`` as a time, and whether it was a duration (a time relative to ``before``)."""
        try:  # epoch seconds, as --json gives since/until (review-ah F3: read as a duration,
            number = float(text)  # the previous line's until started in 1970)
        except ValueError:
            number = None
        if number is not None and number >= EPOCH_FROM:  # inf too: past 9999
            if not number <= LATEST:
                raise _out_of_range(field, text, number)
            return number, False
        if _month_m(text):  # not lost in the "nor a time" line below
            raise _month_m_error(field, text)
        try:
            return before - parse_duration(text, field=field), True
        except SpecError:
            pass
        try:
            value = parse_time(text, field=field, now=now_ms)
        except SpecError:
            raise SpecError(
                f"{field}: {text!r} is not a duration (24h, 7d, 1h30m) nor a time "
                "(2026-11-24, 2026-11-24T07:00Z, today, yesterday, epoch seconds)"
            ) from None
        if value > LATEST:  # a date-time whose offset puts it in the year 10000
            raise _out_of_range(field, text, value)
        return value, False

    if until is None:
        end, ready = settled, settled + SETTLE_S
    elif until.strip().lower() == "now":
        end = ready = now_ms
    else:
        end, relative = when(until, "--until", now_ms)
        if relative or end > now_ms:  # a minute ago, or still to come: as the default
            end = min(end, settled)
        ready = end + SETTLE_S
    if end < EARLIEST:  # a duration reaching back past the year 1
        raise _out_of_range("--until", str(until), end)
    if since.strip().lower() == "all":
        return Window(None, end, ready)
    start = when(since, "--since", end)[0]
    if start >= end:
        raise SpecError(
            f"--since: the window must start before it ends ({_utc(start)} is not before "
            f"{_utc(end)})"
        )
    return Window(None if start <= 0 else start, end, ready)  # back past 1970: all, as `all`


def window(since: str, until: str | None, now: float) -> tuple[float | None, float]:
    """:func:`report_window`'s ``(start, end]``."""
    got = report_window(since, until, now)
    return got.start, got.end


def _utc(ts: float) -> str:
    from datetime import UTC, datetime

    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):  # never past 9999 here (window refuses it)
        return f"{ts!r} (epoch s)"
