"""write protocol 2: older spotwise writers refuse the database (no table or column changes)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26

A revision marks the way rows are *written*, not only the tables. An older spotwise refuses a
database whose revision it does not know ("database schema revision '0006' is unknown to this
spotwise ... upgrade spotwise", writing nothing); it does not refuse one at its own revision.
Revision 0005 (c2ce2ca) was followed by changes to how bills are written with no revision:
instance records closed by a compare-and-set (a record is billed once, whoever closes it),
trial and job costs set to the sum of their records instead of added to, the dated parts of a
bill naming their instance, the owner-checked trial writes of a running job. A spotwise from
c2ce2ca up to this revision shares 0005 with the newer code, so nothing refused it: its cancel
beside a newer cancel of the same dead job added its bill to each trial's cost on top of the
records' sum, doubling the trials' costs (review-bc F2). This revision changes no table; its
only effect is that those writers refuse the database from now on.

The rule (also in ``migrations/env.py``): add a revision whenever the way rows are written
changes so that an older writer would corrupt them (a cost it would add to rather than set, a
close it would make twice, a column it would leave stale), even when no table changes.

Downgrading to 0005 changes nothing in the data and lets those older writers in again.
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Nothing but the revision itself (alembic writes it to ``alembic_version``)."""


def downgrade() -> None:
    """Nothing: 0005's tables are this revision's."""
