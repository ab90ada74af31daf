"""Lasting launch refusals carried over a `spotwise resume`.

A refusal that will not pass in minutes (:attr:`~spotwise.errors.CapacityError.lasting`: an
Azure Spot price above max_price, a size without Spot, EC2's ``SpotMaxPriceTooLow`` or
``Unsupported``, a GCP machine type not in the zone) blocks its offer for a backoff that
doubles per refusal of it (:meth:`~spotwise.planner.actions.Actions._block_lasting`), held in
the orchestrator's memory. A resume started it at 5 min again and, with the block gone, sent
the same refused request at once. Every such refusal is recorded as a ``launch_failed`` event
with ``lasting``, ``blocked_until`` (market time) and ``blocked_wall_s``; a launch that goes
through (a ``launch`` event of the offer) clears the offer's backoff, as it does in memory.

A refusal for a region's quota (:class:`~spotwise.errors.QuotaError`) pauses launches in that
region of its provider for 30 min (:meth:`~spotwise.planner.actions.Actions._pause_region`),
in memory too: a resume asked the region again at once. Its ``launch_failed`` event records
``provider``, ``region``, ``quota_until`` (market time) and ``quota_wall_s``. No launch goes
through in a region while its pause is on, so a launch after the refusal comes after the
pause's end and needs no clearing here.

:func:`read_lasting_refusals` reads both back; the orchestrator restores them
(:meth:`~spotwise.planner.actions.Actions._restore_lasting`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypeGuard


@dataclass
class LastingRefusals:
    """What a job's earlier runs left of their lasting refusals, as of their end."""

    levels: dict[str, float] = field(default_factory=dict)  # offer key → its last block, wall s
    # offer key → that block's end, on the clock of the run that set it (a cloud's: wall time)
    until: dict[str, float] = field(default_factory=dict)
    said: str = ""  # the last one's error and hint, unless a launch went through since
    # (provider, region) → (the end of its last quota refusal's pause, on the clock of the run
    # that set it; that pause's length, wall s)
    quota: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)


def read_lasting_refusals(store: Any, job_id: str) -> LastingRefusals:
    """The offers whose last lasting refusal no launch on them has followed, and each region's
    last quota pause, from the job's ``launch_failed`` and ``launch`` events in the order
    recorded. A value that cannot be a block or a pause (missing, not a finite number, not > 0)
    is skipped."""
    found = [*store.events(job_id, kind="launch_failed"), *store.events(job_id, kind="launch")]
    out = LastingRefusals()
    for e in sorted(found, key=lambda e: e.id or 0):
        detail = e.detail
        key = detail.get("offer")
        if not isinstance(key, str):
            continue
        if e.kind == "launch":  # went through: no more backoff of it, nor the warning's words
            out.levels.pop(key, None)
            out.until.pop(key, None)
            out.said = ""
            continue
        if (quota := _quota_pause(detail)) is not None:
            out.quota[quota[0]] = quota[1]
        wall_s, until = detail.get("blocked_wall_s"), detail.get("blocked_until")
        if detail.get("lasting") is not True or not (_number(wall_s) and wall_s > 0):
            continue
        out.levels[key] = float(wall_s)
        if _number(until):
            out.until[key] = float(until)
        else:
            out.until.pop(key, None)
        error, hint = str(detail.get("error", "")), detail.get("hint")
        out.said = f"{error}; {hint}" if hint else error
    return out


def market_on_wall_clock(backend: Any) -> bool:
    """Whether the market's clock is the wall clock, the same in every run of a job: a cloud's
    (``time.time``). The replayed market (``local``, never mixed with a cloud) starts its clock
    again at ``replay.start`` on a resume, so an earlier run's times are none of this run's."""
    return str(backend.provider) != "local"


def _quota_pause(detail: dict[str, Any]) -> tuple[tuple[str, str], tuple[float, float]] | None:
    """((provider, region), (pause end, pause wall s)) of a quota refusal's event, or None."""
    provider, region = detail.get("provider"), detail.get("region")
    until, wall_s = detail.get("quota_until"), detail.get("quota_wall_s")
    if not (isinstance(provider, str) and isinstance(region, str) and _number(until)):
        return None
    if not (_number(wall_s) and wall_s > 0):
        return None
    return (provider, region), (float(until), float(wall_s))


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
