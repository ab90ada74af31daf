"""A trial's writes made only while its job's row still names the writer's orchestrator.

An orchestrator whose job another process took over (`spotwise resume` while it was frozen or
thought lost: review-az AZ5, s24 helper C) must not write the trials the other run now holds
(their state, progress, metric, end). Each write here is a compare-and-set on the job's owner
(its ``pid``, ``host`` and ``pid_start``), checked on the job's row locked first
(:func:`~spotwise.store.bills._lock`), so a takeover's claim, which updates that row, cannot
land between the check and the write: it waits for this write, or this write sees it.

:class:`TrialWrites` is a base class of :class:`~spotwise.store.repo.Store`: its methods are the
store's, so a running job's store waits out another process's lock on them as on every other
write (:meth:`~spotwise.store.records.Records.wait_out_locks`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from sqlmodel import Session

from spotwise.errors import NotFoundError
from spotwise.store.bills import _lock
from spotwise.store.models import Job, Trial, TrialState
from spotwise.store.records import observation
from spotwise.store.rows import assign, coerce_state


class TrialWrites:
    """Owner-checked trial writes (mixed into :class:`~spotwise.store.repo.Store`)."""

    def _scope(self, action: str) -> AbstractContextManager[Session]:  # Records's
        raise NotImplementedError

    def _if_owner(
        self, job_id: str, owner: Mapping[str, Any], what: str, write: Callable[[Session], None]
    ) -> bool:
        """``write`` in one transaction, only while job ``job_id``'s row holds ``owner``'s values
        (locked first); False, nothing written, when it does not (another process took it over)."""
        with self._scope(what) as s:
            _lock(s, Job, job_id)
            job = s.get(Job, job_id)
            if job is None or any(getattr(job, k) != v for k, v in owner.items()):
                return False
            write(s)
            return True

    def update_trial_if_owner(
        self, job_id: str, owner: Mapping[str, Any], trial_id: str, fields: Mapping[str, Any]
    ) -> bool:
        """:meth:`~spotwise.store.repo.Store.update_trial` while the job's row names ``owner``."""

        def write(s: Session) -> None:
            row = s.get(Trial, trial_id)
            if row is None:
                raise NotFoundError(f"trial {trial_id!r} not found")
            values = dict(fields)
            if "state" in values:
                values["state"] = coerce_state(TrialState, values["state"], "trial")
            assign(row, values, "trial")
            s.add(row)

        return self._if_owner(job_id, owner, f"updating trial {trial_id!r}", write)

    def add_observation_if_owner(
        self,
        job_id: str,
        owner: Mapping[str, Any],
        trial_id: str,
        step: int,
        metric: float,
        wall_time: float,
        market_time: float | None = None,
        instance_id: str | None = None,
    ) -> bool:
        """:meth:`~spotwise.store.records.Records.add_observation` while the job's row names
        ``owner``."""
        obs = observation(trial_id, step, metric, wall_time, market_time, instance_id)
        what = f"adding an observation to trial {trial_id!r}"
        return self._if_owner(job_id, owner, what, lambda s: s.add(obs))

    def update_job_if_owner(
        self, job_id: str, owner: Mapping[str, Any], fields: Mapping[str, Any]
    ) -> bool:
        """The running job's own columns (its totals and heartbeat) while its row names
        ``owner``: a save racing a takeover never writes over the other run's row."""

        def write(s: Session) -> None:
            row = s.get(Job, job_id)
            if row is None:  # _if_owner read it under the lock: not reached
                raise NotFoundError(f"job {job_id!r} not found")
            assign(row, dict(fields), "job")
            s.add(row)

        return self._if_owner(job_id, owner, f"updating job {job_id!r}", write)
