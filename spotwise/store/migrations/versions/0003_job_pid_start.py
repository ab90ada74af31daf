"""job.pid_start: when the process ``job.pid`` started (a token), so a reused pid is not taken
for the job's orchestrator

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

A pid is reused once its process has exited: `spotwise cancel` used to take any live process of
that pid whose command line names spotwise (another job's orchestrator, its trials) for the
job's orchestrator and signal it. The orchestrator now records its start token
(:func:`spotwise.providers.local_records.process_start`: boot id + start time on Linux, ``ps``'s
start time elsewhere) with its pid; the process holding the pid is the orchestrator only if it
started then. Jobs recorded before this revision have no token (NULL): judged as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a plain ALTER TABLE ADD COLUMN, as 0002: the write lock is held only briefly
    op.add_column("job", sa.Column("pid_start", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("pid_start")
