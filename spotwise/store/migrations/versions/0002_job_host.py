"""job.host: the machine whose process ``job.pid`` is

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

A pid means nothing on another machine: with a shared database (PostgreSQL), `spotwise cancel`
and `spotwise report` must know whether the orchestrator runs here before judging it by its pid.
Jobs recorded before this revision have no host (NULL): they are judged by pid, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a plain ALTER TABLE ADD COLUMN (no batch table copy): quick, so a fresh database that
    # several processes open at once holds its write lock only briefly
    op.add_column("job", sa.Column("host", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("host")
