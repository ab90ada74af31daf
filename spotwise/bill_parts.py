"""An instance life's bill as :mod:`spotwise.costs` reads it: the record it reads
(:class:`LifeRow`), the dated parts its bill was written in (:class:`Piece`, :func:`pieces`)
and the seconds of the life each part charged for (:func:`billed_seconds`). Split from
:mod:`spotwise.costs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from spotwise.errors import SpecError


class LifeRow(Protocol):
    """What the report reads of an instance record (:class:`~spotwise.store.models.InstanceRow`)."""

    id: str
    job_id: str
    provider: str
    zone: str
    instance_type: str
    market: str
    price_per_hour: float
    provider_instance_id: str | None
    state: str
    requested_at: float
    launched_at: float | None
    ended_at: float | None
    end_reason: str | None
    cost_usd: float
    on_demand_cost_usd: float
    market_seconds: float


@dataclass(frozen=True)
class Piece:
    """A part of one record's bill, counted in the window holding ``at`` (when it was
    written): the record's bill when it closed (``life``: it counts the life), or a part billed
    after (:func:`pieces`)."""

    row: LifeRow
    at: float
    life: bool
    cost_usd: float
    on_demand_cost_usd: float
    market_seconds: float
    billed_s: float  # the seconds this part adds to the life's charged time


def pieces(row: LifeRow, billing: str | None = None) -> list[Piece]:
    """``row``'s bill as written: at its close (``billed_at``, else ``ended_at``) less what was
    added after, then each part added after it closed at its own time. Their sums are the
    record's columns; each part's billed seconds are what it adds to the life's
    (:func:`billed_seconds` of the bill so far, before and after it)."""
    from spotwise.store.bills import BILL_COLUMNS, extra_bills

    parts = extra_bills(row)
    first = getattr(row, "billed_at", None)
    at = first if first is not None else row.ended_at
    so_far = {k: float(getattr(row, k)) - sum(p.get(k, 0.0) for p in parts) for k in BILL_COLUMNS}
    billed = billed_seconds(_as_billed(row, so_far), billing)
    out = [Piece(row, at if at is not None else 0.0, True, **so_far, billed_s=billed)]
    for p in parts:
        so_far = {k: v + p.get(k, 0.0) for k, v in so_far.items()}
        now = billed_seconds(_as_billed(row, so_far), billing)
        deltas = {k: p.get(k, 0.0) for k in BILL_COLUMNS}
        out.append(Piece(row, p["at"], False, **deltas, billed_s=now - billed))
        billed = now
    return out


@dataclass(frozen=True)
class _Billed:
    """What :func:`billed_seconds` reads of a life, with its bill as it was at some time."""

    provider: str
    market: str  # spot or on-demand: only a spot life is refunded (BillingRule.charge)
    price_per_hour: float
    end_reason: str | None
    cost_usd: float
    on_demand_cost_usd: float
    market_seconds: float


def _as_billed(row: LifeRow, bill: Mapping[str, float]) -> Any:
    return _Billed(row.provider, row.market, row.price_per_hour, row.end_reason, **bill)


def billed_seconds(row: LifeRow, billing: str | None = None) -> float:
    """The seconds of ``row``'s life its provider charged for, under the billing rule of
    ``billing`` (a replay's rule), else of the life's own provider: a life revoked by the
    provider inside the rule's free window (AWS: the first hour) is 0, a short one its
    minimum, the rest rounded up to the rule's granularity. A life whose bill is $0 at a
    non-zero price was refunded whatever its end reason says (a life the provider took that a
    `spotwise cancel` closed, ``reconciled``). A provider without a rule: its seconds."""
    from spotwise.providers.base import Market
    from spotwise.providers.billing import rule_for

    seconds = max(row.market_seconds, 0.0)
    if (seconds == 0 and row.cost_usd <= 0) or (row.cost_usd <= 0 and row.price_per_hour > 0):
        return 0.0
    try:
        rule = rule_for(billing or row.provider)
    except SpecError:
        return seconds
    if seconds == 0:  # billed, never timed: a life that started pays its minimum (release.py)
        return rule.minimum_s
    # the rule's dollars at $3600/h are its billed seconds (its minimum and rounding included)
    taken = row.end_reason == "revoked"  # only a spot life is refunded (billing.charge)
    market = Market.ON_DEMAND if row.market == Market.ON_DEMAND.value else Market.SPOT
    return float(rule.charge([(seconds, 3600.0)], revoked_by_provider=taken, market=market))
