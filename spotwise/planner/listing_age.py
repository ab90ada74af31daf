"""How old a launch absent from a provider's listing is, read on one clock: a cancel closes
the record of a launch that is not listed only once the provider's listing lag has passed
since its request (or, where its request time cannot be read on this machine's clock, since
the first cancel here that found it absent). Split out of :mod:`spotwise.planner.reconcile`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spotwise.planner.reconcile import Held

#: A launch request time this far ahead of this machine's clock is clock skew (a request
#: cannot be in the future): its age cannot be read from it (:func:`too_young`).
CLOCK_SKEW_TOLERANCE_S = 60.0


def one_clock(h: Held, now: float) -> bool:
    """Whether ``h``'s request time can be compared with ``now``: it was written on this
    machine (or its record does not say where) and does not lie ahead of this clock by more
    than :data:`CLOCK_SKEW_TOLERANCE_S` (this clock was not set back since)."""
    assert h.requested_at is not None
    return not h.recorded_on and h.requested_at - now <= CLOCK_SKEW_TOLERANCE_S


#: The event a cancel writes, with its machine's time and name, when a launch whose request
#: time it cannot read (:func:`too_young`) is first found absent from a listing that
#: succeeded: a later cancel on the same machine closes the record once the provider's
#: listing lag has passed since.
UNLISTED = "unlisted"


def unlisted_since(events: Iterable[Any], host: str) -> dict[str, float]:
    """Launch id → when a cancel on ``host`` first found it absent, of the job's
    :data:`UNLISTED` events: only that machine's, whose clock the cancel reads
    (:attr:`Held.unlisted_since`)."""
    first: dict[str, float] = {}
    for e in events:
        if e.kind == UNLISTED and e.instance_id and e.detail.get("host") == host:
            first[e.instance_id] = min(first.get(e.instance_id, e.time), e.time)
    return first


def too_young(name: str, prov: object, h: Held, now: float) -> str:
    """Why a record absent from a listing is not yet confirmed gone: its launch may have been
    requested within the provider's listing lag (EC2's listings are eventually consistent: a
    create of seconds ago may not be listed yet, and closing its record would leave the
    instance running with nothing to find it by). "" once the lag has passed, or for a
    provider without one.

    The age is read on one clock. A request written on this machine: ``now`` less its time.
    One written on another machine (:attr:`Held.recorded_on`), or ahead of this clock (clock
    skew): its time says nothing here, so the lag is counted on this machine's clock from the
    first cancel here that found it absent (:attr:`Held.unlisted_since`): running the cancel
    again from this machine once the lag has passed closes it (a request cannot be later than
    the first cancel that read its record)."""
    from spotwise.providers.base import listing_lag_s

    lag = listing_lag_s(prov)
    if h.requested_at is None or lag <= 0:
        return ""
    if one_clock(h, now):
        age = now - h.requested_at
        if age >= lag:
            return ""
        return (
            f"{name}: launch {h.launch_id} was requested {max(age, 0):.0f} s ago and {name}'s "
            f"listing can lag {lag:.0f} s behind a create, so its absence proves nothing yet; "
            f"run the cancel again in {lag - max(age, 0):.0f} s"
        )
    absent = 0.0 if h.unlisted_since is None else max(now - h.unlisted_since, 0.0)
    if absent >= lag:
        return ""
    ahead = h.requested_at - now
    there = f"on {h.recorded_on}" if h.recorded_on else "here"
    if ahead > CLOCK_SKEW_TOLERANCE_S:
        why = (
            f"its request time, written {there}, is {ahead:.0f} s ahead of this machine's "
            "clock (clock skew: set the clocks right, e.g. with NTP), so its age is not known"
        )
    else:
        why = (
            f"it was requested on {h.recorded_on}, whose clock this machine's cannot be "
            "compared with, so its age is not known"
        )
    seen = "now" if h.unlisted_since is None else f"{absent:.0f} s ago"
    return (
        f"{name}: launch {h.launch_id} is not listed, but {why}; {name}'s listing can lag "
        f"{lag:.0f} s behind a create and this machine first found it absent {seen}: run the "
        f"cancel again from this machine in {lag - absent:.0f} s (a launch absent that long "
        "is closed)"
    )
