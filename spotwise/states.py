"""The states of jobs and trials, apart from the store so that code with no database (the
cost report, the CLI's renderers) can name them without loading SQLAlchemy.

:mod:`spotwise.store.models` stores them as their plain string values.
"""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def is_terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class TrialState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"  # between instances: revoked or migrating, to be relaunched
    COMPLETED = "completed"
    STOPPED_EARLY = "stopped_early"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def is_terminal(self) -> bool:
        return self in (
            TrialState.COMPLETED,
            TrialState.STOPPED_EARLY,
            TrialState.FAILED,
            TrialState.CANCELLED,
        )


#: The values of the job states after which a job changes no more.
FINISHED_JOB_STATES: frozenset[str] = frozenset(s.value for s in JobState if s.is_terminal())
