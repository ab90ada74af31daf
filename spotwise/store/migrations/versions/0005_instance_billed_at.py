"""instance.billed_at, instance.extra_bills_json: when each part of a record's bill was written

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25

`spotwise report` counted a life in the window of its ``ended_at``. A record closed late (a
dead orchestrator's job cancelled hours after, an instance the cloud says ended before it was
seen) got an end in a window a report had already printed, and was in no report; a record
billed again after it closed (an instance found later) moved whole to today's window, its
first bill counted twice. The report now windows on when a bill was written: ``billed_at``
(NULL: the record's ``ended_at``, as every record written before this revision) and, for what
was added after the close, the dated parts in ``extra_bills_json``. The indexes serve the
report's window and its scan of the records still held.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEXES = ("billed_at", "ended_at", "state")


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMNs, as 0002: the write lock is held only briefly
    op.add_column("instance", sa.Column("billed_at", sa.Float(), nullable=True))
    op.add_column("instance", sa.Column("extra_bills_json", sa.Text(), nullable=True))
    for column in _INDEXES:
        op.create_index(f"ix_instance_{column}", "instance", [column])


def downgrade() -> None:
    for column in _INDEXES:
        op.drop_index(f"ix_instance_{column}", table_name="instance")
    with op.batch_alter_table("instance") as batch:
        batch.drop_column("extra_bills_json")
        batch.drop_column("billed_at")
