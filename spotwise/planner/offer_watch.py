"""The running job's watch for a market left without a usable offer: :class:`NoOfferWatch`
says so, one warning line at a time, while a trial waits for an instance. Split from
:mod:`spotwise.planner.backend`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spotwise.providers.base import Offer

NO_OFFER_WARN_S = 600.0  # wall seconds without a usable offer before a running job says so


@dataclass
class NoOfferWatch:
    """Notices a running job that has had no usable offer for ``after_s`` seconds of wall time
    (the market emptied after the job started, or every offer is out of capacity) while a
    trial waits for an instance: :meth:`note` returns one line to record as a warning event,
    then again every ``after_s`` while it lasts, rather than the job polling silently.

    The orchestrator calls ``note`` once per poll with the offers it would choose from
    (preflight already refused a job that starts with none; :func:`check_offers
    <spotwise.planner.preflight.check_offers>`)."""

    job_id: str = "JOB"  # named in the line's advice
    after_s: float = NO_OFFER_WARN_S
    clock: Callable[[], float] = time.monotonic
    _since: float | None = field(default=None, init=False, repr=False)  # offers went at
    _said: float | None = field(default=None, init=False, repr=False)  # last said at

    def __post_init__(self) -> None:
        if not self.after_s > 0:
            raise ValueError(f"after_s must be > 0 seconds, got {self.after_s!r}")

    def note(self, offers: Sequence[Offer], waiting: bool = True, refused: str = "") -> str | None:
        """``offers``: this poll's offers (unavailable ones marked so); ``waiting``: whether a
        trial waits for an instance (with none waiting, no offer is needed); ``refused``: the
        last lasting refusal of a launch, said too (review-ai F2: a Spot price above max_price
        read as "no capacity ... widen the filters", its hint to raise max_price lost)."""
        now = self.clock()
        if not waiting or any(o.available for o in offers):
            self._since = self._said = None
            return None
        if self._since is None:
            self._since = now
        if now - (self._said if self._said is not None else self._since) < self.after_s:
            return None
        self._said = now
        minutes = int((now - self._since) // 60)
        if not offers:
            what = "no offer has matched the job's providers"
        elif len(offers) == 1:
            what = "the one matching offer has had no capacity"
        else:
            what = f"none of the {len(offers)} matching offers has had capacity"
        if refused:
            what += f" (the last lasting refusal of a launch: {refused})"
        return (
            f"{what} for {minutes} min; spotwise keeps polling (`spotwise prices` shows the "
            f"market; `spotwise cancel {self.job_id}`, then widen the providers' filters)"
        )
