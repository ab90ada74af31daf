"""A running job's orchestrator saying it is alive (:class:`Heartbeat`): a throttled write of
the wall time to its job (``heartbeat_at``), which `spotwise cancel` bills a dead local job's
lives up to. Split from :mod:`spotwise.store.repo` so that each file stays readable."""

from __future__ import annotations

import logging
import time as _time
from collections.abc import Callable

from spotwise.store.repo import Store

_log = logging.getLogger("spotwise.store")


#: Wall seconds between two heartbeats of a running job written on their own: the running
#: totals' save (every 2 wall s) carries one (:meth:`Heartbeat.carried`), so that a dead local
#: job's lives, billed up to its last one, lose at most that save's period.
HEARTBEAT_EVERY_WALL_S = 5.0


class Heartbeat:
    """A running job's orchestrator saying it is alive: :meth:`beat` writes the wall time to
    the job (:meth:`Store.heartbeat`) at its first call and then at most once every
    ``every_s`` (``clock``: monotonic seconds), however often it is called (once a pass of the
    loop). A write that fails (the database locked, unreachable) is logged at debug level and
    skipped until the next one is due: it never stops the job. Another write of the job that
    carries the wall time (``heartbeat_at``, :meth:`carried`) counts as one: no write of its
    own follows within ``every_s``."""

    def __init__(
        self,
        store: Store,
        job_id: str,
        every_s: float = HEARTBEAT_EVERY_WALL_S,
        clock: Callable[[], float] = _time.monotonic,
        wall: Callable[[], float] = _time.time,
    ) -> None:
        self.store, self.job_id, self.every_s = store, job_id, every_s
        self.clock, self.wall = clock, wall
        self.last: float | None = None  # ``clock`` at the last write tried

    def beat(self) -> bool:
        """Write the heartbeat if one is due; whether it was written."""
        now = self.clock()
        if self.last is not None and now - self.last < self.every_s:
            return False
        self.last = now
        try:
            self.store.heartbeat(self.job_id, self.wall())
        except Exception as e:  # a missed heartbeat only bills a dead job's lives less
            _log.debug("%s: no heartbeat written: %s", self.job_id, e)
            return False
        return True

    def carried(self) -> float:
        """The wall time for another write of the job to carry as ``heartbeat_at`` (the running
        totals' save: one write, not two); the next write of :meth:`beat` is due ``every_s``
        after it. Call it only once that write is about to be made, and let the write's own
        failure be that write's (it raises there as it did without the heartbeat)."""
        self.last = self.clock()
        return self.wall()
