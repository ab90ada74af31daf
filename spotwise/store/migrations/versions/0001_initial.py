"""initial schema: job, trial, instance, observation, event, price_cache

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Written by hand to match spotwise/store/models.py exactly (tests/store/test_schema.py
compares the migrated schema with the models).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("spec_json", sa.Text(), nullable=False),
        sa.Column("spec_path", sa.String(), nullable=False),
        sa.Column("policy", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("best_trial_id", sa.String(), nullable=True),
        sa.Column("best_metric", sa.Float(), nullable=True),
        sa.Column("direction", sa.String(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("on_demand_cost_usd", sa.Float(), nullable=False),
        sa.Column("revocations", sa.Integer(), nullable=False),
        sa.Column("migrations", sa.Integer(), nullable=False),
        sa.Column("early_stopped", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )

    op.create_table(
        "trial",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("params_json", sa.Text(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("metric", sa.Float(), nullable=True),
        sa.Column("best_metric", sa.Float(), nullable=True),
        sa.Column("final_metric", sa.Float(), nullable=True),
        sa.Column("predicted_final", sa.Float(), nullable=True),
        sa.Column("checkpoint_uri", sa.String(), nullable=True),
        sa.Column("checkpoint_step", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("revocations", sa.Integer(), nullable=False),
        sa.Column("migrations", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["job.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "number", name="uq_trial_job_number"),
    )
    op.create_index("ix_trial_job_id", "trial", ["job_id"], unique=False)

    op.create_table(
        "instance",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("trial_id", sa.String(), nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("region", sa.String(), nullable=False),
        sa.Column("zone", sa.String(), nullable=False),
        sa.Column("instance_type", sa.String(), nullable=False),
        sa.Column("market", sa.String(), nullable=False),
        sa.Column("offer_key", sa.String(), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("provider_instance_id", sa.String(), nullable=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("tags_json", sa.Text(), nullable=False),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.Column("launched_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("end_reason", sa.String(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("on_demand_cost_usd", sa.Float(), nullable=False),
        sa.Column("market_seconds", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["job.id"]),
        sa.ForeignKeyConstraint(["trial_id"], ["trial.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_instance_job_id", "instance", ["job_id"], unique=False)
    op.create_index("ix_instance_trial_id", "instance", ["trial_id"], unique=False)

    op.create_table(
        "observation",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("trial_id", sa.String(), nullable=False),
        sa.Column("instance_id", sa.String(), nullable=True),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("metric", sa.Float(), nullable=False),
        sa.Column("wall_time", sa.Float(), nullable=False),
        sa.Column("market_time", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["trial_id"], ["trial.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_observation_trial_id", "observation", ["trial_id"], unique=False)

    op.create_table(
        "event",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("trial_id", sa.String(), nullable=True),
        sa.Column("instance_id", sa.String(), nullable=True),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("detail_json", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["job.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_event_job_id", "event", ["job_id"], unique=False)

    op.create_table(
        "price_cache",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("region", sa.String(), nullable=False),
        sa.Column("zone", sa.String(), nullable=False),
        sa.Column("instance_type", sa.String(), nullable=False),
        sa.Column("market", sa.String(), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("observed_at", sa.Float(), nullable=False),
        sa.Column("fetched_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_price_cache_lookup",
        "price_cache",
        ["provider", "region", "instance_type", "market"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_price_cache_lookup", table_name="price_cache")
    op.drop_table("price_cache")
    op.drop_index("ix_event_job_id", table_name="event")
    op.drop_table("event")
    op.drop_index("ix_observation_trial_id", table_name="observation")
    op.drop_table("observation")
    op.drop_index("ix_instance_trial_id", table_name="instance")
    op.drop_index("ix_instance_job_id", table_name="instance")
    op.drop_table("instance")
    op.drop_index("ix_trial_job_id", table_name="trial")
    op.drop_table("trial")
    op.drop_table("job")
