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
#: orchestrator alive. A running orchestrator writes the heartbeat at least every 5 s (the
#: store's ``HEARTBEAT_EVERY_WALL_S``, carried by its totals' save every 2 s) once a pass of
#: its loop; only its drain goes longer without one: up to 30 s waiting for the instances a
#: notice is taking (the ledger's ``STOP_TIMEOUT_WALL_S``) and the local provider's 5 s kill
#: grace, closing records all the while. 45 s covers those with slack. A later time is not
#: the latest run's: the heartbeat is rewritten by each run of the job (a resume writes its
#: own at once), but an earlier run's records stay, written on its machine's clock, which may
#: be ahead of the resuming machine's (review-aj F3: they billed the resumed run's dead lives
#: past their death). (The constants are not imported: this module imports nothing of
#: spotwise; tests/cli/test_s20_last_alive_skew.py checks the sum.)
LATE_S = 45.0


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
