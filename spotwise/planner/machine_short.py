"""What the orchestrator does when this machine cannot start a trial for want of a resource
(:class:`~spotwise.errors.MachineShortError`: open files, processes, memory, disk; review-bf
BF2): not the trial's failure (it was counted as one: trials failed at $0, the job exited 0 and
`spotwise resume` refused them). Split from :mod:`spotwise.planner.actions`, which calls it.
"""

from __future__ import annotations

import logging
from typing import Any

from spotwise.errors import MachineShortError, ProviderError

log = logging.getLogger("spotwise.planner")
#: starts this machine refuses in a row, none of the job running: the job ends
MACHINE_SHORT_TRIES = 5
#: the pause after a refusal while some of the job runs (its end may free what is short: the
#: pause does not double, review-bg BG4), wall seconds
RUNNING_PAUSE_WALL_S = 5.0


def short_of(run: Any, p: Any, e: MachineShortError, now: float) -> None:
    """``run`` (the orchestrator's :class:`~spotwise.planner.actions.Actions`) could not start
    ``p``'s trial (``e.limit``: open files, memory, disk): no failure of the trial; its
    provider is paused (while some of the job runs, :data:`RUNNING_PAUSE_WALL_S`; else
    doubling as a throttled API's), and the launch's record closed failed at $0.
    With none of the job running (nothing will free it), the :data:`MACHINE_SHORT_TRIES`-th
    refusal in a row ends the job failed, its open trials cancelled for `spotwise resume`."""
    if p.offer.provider not in run.throttled:  # said once a pause, on the screen too
        log.warning("%s: %s; waiting to start trials again", run.job_id, e)
    running = any(not life.exited for _, life in run.lives.values())
    if running:  # a trial's end may free it: a short pause, not doubled (a freed slot waited
        pause = RUNNING_PAUSE_WALL_S * run.backend.speedup  # out up to 5 minutes: BG4)
        run.throttled[p.offer.provider] = (run._refused_at(now) + pause, 0.0)
    else:
        run._throttle(p.offer.provider, now)  # doubling, as a throttled API's
    run._event("launch_refused_here", now, p.trial, offer=p.offer.key, error=str(e))
    run._close_failed_launch(p.trial, p.launch_id, p.asked_at, p.offer)
    run.machine_short = 0 if running else run.machine_short + 1
    if run.machine_short >= MACHINE_SHORT_TRIES:
        raise ProviderError(
            f"this machine is short of {e.limit}: {run.machine_short} trial starts in a row"
            f" failed with none of the job running ({e}); then `spotwise resume {run.job_id}`"
        )
