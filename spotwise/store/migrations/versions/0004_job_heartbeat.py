"""job.heartbeat_at: when the job's orchestrator was last known alive (wall time)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25

A local job's trial processes die with their orchestrator (kill -9, OOM, a reboot), and nothing
recorded when: `spotwise cancel` billed each life it had not seen end up to the job's last
report, or to the life's own start (the minimum) when none was recorded, however long it ran.
The orchestrator now writes the wall time into this column every few seconds while it runs;
cancel bills such a life up to the later of the two. Jobs recorded before this revision have
none (NULL): billed as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a plain ALTER TABLE ADD COLUMN, as 0002: the write lock is held only briefly
    op.add_column("job", sa.Column("heartbeat_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("heartbeat_at")
