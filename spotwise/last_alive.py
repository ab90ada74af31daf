"""When a dead local job's orchestrator was last known alive (:func:`last_alive`): what
`spotwise cancel` bills its trial processes up to (they died with it), and where `spotwise
report` stops their held hours, so that the two agree. No spotwise import: both may use it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

#: the ends the orchestrator itself closes a life's record with, at its wall clock (ledger's
#: ``_bill``, the launch cleanup's ``failed``); a cancel's is ``reconciled``
ORCHESTRATOR_ENDS = frozenset({"completed", "stopped", "revoked", "released on notice", "failed"})

#: How many wall seconds past the job's last heartbeat its other records may still prove its
#: orchestrator alive. The orchestrator asks for a heartbeat once a pass of its loop, after
#: each call that may block (a terminate) and all along its drain's waits; one is written when
#: none was for the store's ``HEARTBEAT_EVERY_WALL_S`` (5 s; the totals' save carries one every
#: 2 s). So a record follows the last heartbeat by at most those 5 s plus the longest single
#: blocking step between two asks: a local terminate, the local provider's 5 s kill grace and
#: the 2 s a killed process group may take to go (proc_group's ``SETTLE_S``); then 8 s of
#: slack for the poll's sleep, a store write waiting on another process's lock, a second
#: killed group settling, a provider read: 5 + 5 + 2 + 8 = 20 s. (It was 45 s while the drain
#: wrote none through its 30 s wait for noticed lives.) A later time is not the latest run's:
#: the heartbeat is rewritten by each run of the job (a resume writes its own at once), but an
#: earlier run's records stay, written on its machine's clock, which may be ahead of the
#: resuming machine's (review-aj F3: they billed the resumed run's dead lives past their
#: death); a skew of up to 20 s is still believed. (The constants are not imported: this
#: module imports nothing of spotwise; tests/cli/test_s20_last_alive_skew.py checks the sum.)
LATE_S = 20.0


def last_alive(store: Any, job: Any, starts: list[float]) -> tuple[float | None, str]:
    """When a dead local job's orchestrator (and so its trial processes) was last known alive,
    and what says so: the latest wall time it wrote itself (review-ah F12: a life launched
    after its last heartbeat was billed only the minimum): its last heartbeat
    (``heartbeat_at``, carried by its totals' save every ~2 s: none before revision 0004), its
    last recorded report (an observation's ``wall_time``, written when it read the report),
    its last instance record (each launch's request, ``requested_at``, written before the
    launch; ``launched_at`` only where earlier: the launch cleanup writes the provider's start
    there, a replay's market time; the end of a life it closed itself, ``ended_at`` under one
    of its own end reasons). Never an event's time (a replay's are on the market clock).
    (None, "") for none (a life is then billed no further than its own start). ``starts``:
    those of the lives that died with it: records that prove it alive no later than each of
    them are not named as what their bills end at (the heartbeat or report is, if any).

    With a heartbeat, a report or record more than :data:`LATE_S` after it does not count: it
    is an earlier run's, on a clock ahead of the latest run's (a job resumed on another
    machine), not evidence that the latest run's lives ran on (review-aj F3)."""
    beat = getattr(job, "heartbeat_at", None)
    limit = beat + LATE_S if beat is not None else math.inf

    def latest(times: Iterable[float]) -> float | None:
        return max((at for at in times if at <= limit), default=None)

    report = latest(
        o.wall_time for t in store.list_trials(job.id) for o in store.observations(t.id)
    )
    records: list[float] = []
    for r in store.list_instances(job.id):
        records.append(min(r.requested_at, r.launched_at or r.requested_at))
        if r.ended_at is not None and r.end_reason in ORCHESTRATOR_ENDS:
            records.append(r.ended_at)
    said = [
        (report, "the job's last report"),
        (beat, "the orchestrator's last heartbeat"),
        (latest(records), "the orchestrator's last instance record"),
    ]
    last, which = None, ""
    for n, (at, what) in enumerate(said):  # the latest; a tie keeps the first named
        if at is None or (last is not None and at <= last):
            continue
        if n == 2 and not any(at > start for start in starts):  # no more than their starts
            return at, which
        last, which = at, what
    return last, which
